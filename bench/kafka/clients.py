"""The Kafka clients of ``bench.kafka``: a producer of game events and a consumer of panes.

The producer runs in a process of its own (``spawn``): as a thread of the benchmark's
process it shared one interpreter lock with the job's driver, whose micro-batch loop then
waited on the producer's Python (a pure-Python producer at 10-20k records/s keeps a core
busy). A real job's producers are other processes, usually on other machines.

>>> backlog = Producer("127.0.0.1:9092", "events", partitions=4, rate=None, seconds=None,
...                    seed=1, limit=1000)
>>> backlog.sent, backlog.started is None
(0, True)
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import random
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

TEAMS = tuple(f"team-{number:02d}" for number in range(20))
#: Before production, records of this team go through the whole job (left out of figures).
WARM_UP_TEAM = "warm-up"


def produce(servers: str, topic: str, partitions: int, rate: Optional[float],
            seconds: Optional[float], seed: int, limit: Optional[int],
            results: Any) -> None:
    """Send game events (``timestamp`` = send time) to ``topic``, record ``i`` to partition
    ``i % partitions``: at ``rate`` per second for ``seconds``, or, with ``rate`` None, as
    fast as possible; at most ``limit`` records. Puts one dict of figures on ``results``."""
    from kafka import KafkaProducer

    figures: Dict[str, Any] = {"sent": 0, "failed": 0, "started": None, "ended": None,
                               "error": None}
    failures = []
    chooser = random.Random(seed)
    producer = None
    try:
        producer = KafkaProducer(bootstrap_servers=servers, linger_ms=2, acks=1)
        started = figures["started"] = time.time()
        end = started + seconds if seconds is not None else float("inf")
        sent = 0
        while (limit is None or sent < limit) and time.time() < end:
            due = limit if rate is None else int((time.time() - started) * rate)
            if limit is not None:
                due = min(due, limit)
            while sent < due:
                event = {"user": f"user-{chooser.randrange(500)}",
                         "team": TEAMS[chooser.randrange(len(TEAMS))],
                         "score": chooser.randint(1, 100), "timestamp": time.time()}
                producer.send(topic, value=json.dumps(event).encode(),
                              partition=sent % partitions).add_errback(failures.append)
                sent += 1
            if rate is not None:
                time.sleep(0.002)
        figures["sent"] = sent
        figures["ended"] = time.time()
        producer.flush(timeout=60)
    except BaseException as error:  # reported to the benchmark, never swallowed
        figures["error"] = f"{type(error).__name__}: {error}"
    finally:
        if producer is not None:
            producer.close(timeout=10)
        figures["failed"] = len(failures)
        results.put(figures)


class Producer:
    """:func:`produce` in a child process; after :meth:`join`, its figures as attributes
    (``sent``, ``failed``, ``started``, ``ended``: wall-clock seconds, ``error``)."""

    def __init__(self, servers: str, topic: str, partitions: int, rate: Optional[float],
                 seconds: Optional[float], seed: int, limit: Optional[int] = None) -> None:
        context = multiprocessing.get_context("spawn")
        self._results = context.Queue()
        self._process = context.Process(
            target=produce, name="bench-producer", daemon=True,
            args=(servers, topic, partitions, rate, seconds, seed, limit, self._results))
        self.sent = self.failed = 0
        self.started: Optional[float] = None
        self.ended: Optional[float] = None
        self.error: Optional[str] = None

    def start(self) -> None:
        self._process.start()

    def join(self, timeout: float) -> None:
        """Wait for the figures (``error`` says so when none came in ``timeout`` seconds)."""
        try:
            figures = self._results.get(timeout=timeout)
        except queue.Empty:
            self.error = f"the producer process sent no figures in {timeout:g} s"
            self._process.terminate()
        else:
            for name, value in figures.items():
                setattr(self, name, value)
        self._process.join(10)


class PaneConsumer(threading.Thread):
    """Reads the output topic until stopped: (time seen, pane dict) for every pane."""

    def __init__(self, servers: str, topic: str) -> None:
        super().__init__(name="bench-pane-consumer", daemon=True)
        from kafka import KafkaConsumer, TopicPartition

        from transforms.kafka.polling import poll_records

        self._poll = poll_records
        # A short fetch wait, so the consumer's own long-poll does not add to the latency.
        self._consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False,
                                       fetch_max_wait_ms=20)
        partitions = [TopicPartition(topic, partition) for partition in
                      sorted(self._consumer.partitions_for_topic(topic) or [0])]
        self._consumer.assign(partitions)
        self._consumer.seek_to_beginning(*partitions)
        self.halt = threading.Event()
        self.panes: List[Tuple[float, Dict[str, Any]]] = []

    def records(self, warm_up: bool = False) -> int:
        """Records in the panes seen so far: the measured ones, or the warm-up ones."""
        return sum(pane["count"] for _, pane in list(self.panes)
                   if (pane["team"] == WARM_UP_TEAM) == warm_up)

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for records in self._poll(self._consumer, 0.1, stop=self.halt).values():
                    seen = time.time()
                    self.panes.extend((seen, json.loads(record.value)) for record in records)
        finally:
            self._consumer.close()
