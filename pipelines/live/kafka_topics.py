"""The Kafka clients of a live run (``make run``): the events producer, the panes reader.

* :class:`Producer` (a thread) sends seeded game events (:func:`pipelines.generator.generate`,
  event time from when it starts) to a topic, each at its arrival time: out of order, a few
  held back long enough to be late, a few malformed. It keeps what it sent, with when.
* :class:`PaneReader` (a thread) reads the job's panes from the output topic as they are
  written, with the time each was seen, for the leaderboard and the pane diagram.
* :func:`create_topics` and :func:`count_records`: the run's topics, and a count of one.

Both threads stop when the shared ``stop`` event is set; neither uses a consumer group.
"""

from __future__ import annotations

import json
import threading
import time
from typing import List, Optional, Sequence

from pipelines.generator import generate
from transforms.kafka.polling import poll_records


class Producer(threading.Thread):
    """Sends generated game events to ``topic`` at their arrival times, until stopped."""

    def __init__(self, servers: str, topic: str, *, rate: float, seed: int, seconds: float,
                 stop: threading.Event) -> None:
        super().__init__(name="producer", daemon=True)
        self._servers, self._topic, self._halt = servers, topic, stop
        self.started_at = time.time()
        self.records = generate("game", int(rate * seconds) + 1, seed, start=self.started_at,
                                rate=rate, mean_delay_seconds=1.0, late_fraction=0.04,
                                late_delay_seconds=(6.0, 40.0), malformed_fraction=0.01)
        self.sent: List = []  # (wall time sent, record)
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self._servers, linger_ms=5)
        try:
            for record in self.records:
                delay = record.arrival_time - time.time()
                if delay > 0 and self._halt.wait(delay):
                    break
                if self._halt.is_set():
                    break
                user = record.fields.get("user")
                producer.send(self._topic, key=None if user is None else str(user).encode(),
                              value=record.event_json().encode())
                self.sent.append((time.time(), record))
            producer.flush(timeout=30)
        except BaseException as error:  # reported in the summary, never swallowed
            self.error = error
        finally:
            try:
                producer.close(timeout=10)
            except Exception as error:  # e.g. the broker went away: say so in the summary
                self.error = self.error or error


class PaneReader(threading.Thread):
    """Reads every pane from the output topic as the job writes it: (time seen, record)."""

    def __init__(self, servers: str, topic: str, stop: threading.Event) -> None:
        super().__init__(name="pane-reader", daemon=True)
        from kafka import KafkaConsumer, TopicPartition

        self._halt = stop
        self._consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        partitions = [TopicPartition(topic, partition) for partition in
                      sorted(self._consumer.partitions_for_topic(topic) or [0])]
        self._consumer.assign(partitions)
        self._consumer.seek_to_beginning(*partitions)
        self._lock = threading.Lock()
        self._new: List = []
        self.seen: List = []

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                for records in poll_records(self._consumer, 0.2, stop=self._halt).values():
                    now = time.time()
                    panes = [(now, json.loads(record.value)) for record in records]
                    with self._lock:
                        self._new.extend(panes)
        finally:
            self._consumer.close()

    def take(self) -> List:
        """The panes that arrived since the last call."""
        with self._lock:
            new, self._new = self._new, []
        self.seen.extend(new)
        return new


def create_topics(servers: str, names: Sequence[str], partitions: int) -> None:
    """Create ``names``: the first with ``partitions`` partitions, the others with one."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(name, partitions if number == 0 else 1, 1)
                             for number, name in enumerate(names)])
    finally:
        admin.close()


def count_records(servers: str, topic: str) -> int:
    """How many records ``topic`` holds now (read from the beginning, no consumer group)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [0])]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        count, deadline = 0, time.monotonic() + 10
        while time.monotonic() < deadline:
            batch = poll_records(consumer, 0.3)
            count += sum(len(records) for records in batch.values())
            if not batch and all(consumer.highwater(tp) is not None
                                 and consumer.position(tp) >= consumer.highwater(tp)
                                 for tp in partitions):
                break
        return count
    finally:
        consumer.close()


__all__ = ["PaneReader", "Producer", "count_records", "create_topics"]
