"""End to end: game events in Kafka -> ``python -m pipelines.team_scores --source kafka`` -> panes
in Kafka, on each runner, against the embedded broker (``KAFKA_BROKER=noida|tansu``).

The producer writes out-of-order game events into a 4-partition topic in two phases:

1. per partition, events of windows W0 = [B, B+60) and W1 = [B+60, B+120), shuffled within
   each window (out of order, never across a window end), then one event of W2 that moves
   the partition's watermark past W1's end. The watermark of the source is the minimum over
   the partitions, so W0 and W1 close only when all four partitions delivered their W2 event.
2. once the job has written the ON_TIME panes of W0 and W1 (the test reads them from the
   output topic), late events of W0 and W1, one undecodable and one malformed record (dead
   letters), and more W2 events.

Because phase 2 is written only after the on-time panes were seen, its W0 / W1 events are late
whatever the runner's bundling; the allowed lateness (600 s) keeps them (the watermark stays
below B+150 until the read ends). The job reads ``--max_records`` per partition and ends.

On a runner without a live watermark for splittable DoFns (Beam's DirectRunner: see
:data:`LIVE_WATERMARK`) both phases are written up front and every event is on time.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from transforms.kafka.polling import poll_records
from project import PYTHON, REPO

PARTITIONS = 4
WINDOW = 60
TEAMS = ("red", "blue")
#: Seconds to wait for the on-time panes, and for the job to end after the last record.
PANE_TIMEOUT = 240.0
END_TIMEOUT = 240.0

RUNNER_ARGUMENTS = {
    "DirectRunner": ["--runner", "DirectRunner"],
    # Wall-clock micro-batches of one second.
    "SparkRunner": ["--runner", "SparkRunner", "--streaming", "--batch_interval_seconds", "1",
                    "--spark_conf", "spark.ui.enabled=false"],
}


def _event(team: str, score: int, at: float) -> bytes:
    return json.dumps({"user": f"{team}_player", "team": team, "score": score,
                       "timestamp": at}).encode()


def _phases(base: int) -> Tuple[List[tuple], List[tuple], List[tuple]]:
    """(phase 1 records, phase 2 records, kept events as (team, event time, score)).

    Records are ``(key, value, timestamp_ms, partition)`` for ``KafkaTestHelper.produce``;
    every partition gets the same number of records (``--max_records`` is per partition).
    """
    rng = random.Random(5)
    first, second, kept = [], [], []
    for partition in range(PARTITIONS):
        for window in (0, 1):
            events = [(rng.choice(TEAMS), rng.randint(1, 9),
                       base + window * WINDOW + rng.uniform(1, WINDOW - 1)) for _ in range(3)]
            rng.shuffle(events)
            kept.extend(events)
            first.extend((None, _event(*e), None, partition) for e in events)
        advance = ("red", 1, base + 2 * WINDOW + 5 + partition)
        kept.append(advance)
        first.append((None, _event(*advance), None, partition))
        for window in (0, 1):
            late = (TEAMS[(partition + window) % 2], 10 + partition, base + window * WINDOW + 30.5)
            kept.append(late)
            second.append((None, _event(*late), None, partition))
        if partition == 0:
            second.append((None, b"\xff\xfe not utf-8", None, partition))
        elif partition == 1:
            bad_score = _event("blue", 1, base + 140).replace(b'"score": 1', b'"score": "x"')
            second.append((None, bad_score, None, partition))
        else:
            extra = ("blue", 2, base + 2 * WINDOW + 20)
            kept.append(extra)
            second.append((None, _event(*extra), None, partition))
        final = ("blue", 3, base + 2 * WINDOW + 30)
        kept.append(final)
        second.append((None, _event(*final), None, partition))
    return first, second, kept


class _Panes:
    """Reads the output topic as the job writes it (no consumer group)."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers,
                                       enable_auto_commit=False)
        partitions = [TopicPartition(topic, p)
                      for p in sorted(self._consumer.partitions_for_topic(topic) or [0])]
        self._consumer.assign(partitions)
        self._consumer.seek_to_beginning(*partitions)
        self.panes: List[dict] = []

    def poll(self) -> None:
        for records in poll_records(self._consumer, 0.5).values():
            self.panes.extend(json.loads(record.value) for record in records)

    def close(self) -> None:
        self._consumer.close()


def _window(base: int, number: int) -> Tuple[float, float]:
    return (float(base + number * WINDOW), float(base + (number + 1) * WINDOW))


def _by_team_and_window(panes: List[dict]) -> Dict[Tuple[str, Tuple[float, float]], List[dict]]:
    grouped: Dict[Tuple[str, Tuple[float, float]], List[dict]] = {}
    for pane in panes:
        window = (pane["window"]["start"], pane["window"]["end"])
        grouped.setdefault((pane["key"], window), []).append(pane)
    return {slot: sorted(group, key=lambda p: p["pane"]["index"])
            for slot, group in grouped.items()}


def _sums(events, base: int) -> Dict[Tuple[str, Tuple[float, float]], int]:
    sums: Dict[Tuple[str, Tuple[float, float]], int] = {}
    for team, score, at in events:
        slot = (team, _window(base, int((at - base) // WINDOW)))
        sums[slot] = sums.get(slot, 0) + score
    return sums


#: Whether the runner moves the watermark while a Kafka partition is still being read. Beam's
#: DirectRunner does not: it holds a splittable DoFn's output watermark at -infinity until
#: the restriction is done (apache_beam/runners/direct/sdf_direct_runner.py), so every
#: window closes when the read ends and no event can be late there.
LIVE_WATERMARK = {"DirectRunner": False, "SparkRunner": True, "SparkConnect": True}


def _runner_arguments(runner_name: str) -> list:
    if runner_name != "SparkConnect":
        return RUNNER_ARGUMENTS[runner_name]
    from connect_fixtures import shared_connect_server

    # The test process's Connect server (this job is a client of it, with no SparkContext).
    return RUNNER_ARGUMENTS["SparkRunner"] + ["--spark_remote", shared_connect_server().url]


def _stop(job: subprocess.Popen, log_path: Path) -> str:
    """Stop the job if it still runs (SIGTERM, then SIGKILL); return the tail of its log."""
    if job.poll() is None:
        job.terminate()
        try:
            job.wait(timeout=20)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait(timeout=10)
    return log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""


def test_team_scores_reads_kafka_and_writes_early_on_time_and_late_panes(runner_name, kafka,
                                                                         tmp_path):
    source = kafka.create_topic(partitions=PARTITIONS)
    output = kafka.create_topic(partitions=1)
    dead_letters = kafka.create_topic(partitions=1)
    # Event times one to two hours ahead of the wall clock (in the payload only: the Kafka
    # record timestamps, which retention looks at, are the producer's clock). Beam's trigger
    # driver labels a processing-time (early) firing by comparing its processing time with
    # the window's end in *event* time (apache_beam/transforms/trigger.py, _output): with
    # event times in the past, every early firing would be labelled LATE.
    base = (int(time.time()) // 3600 + 2) * 3600
    first, second, kept = _phases(base)
    per_partition = (len(first) + len(second)) // PARTITIONS
    live = LIVE_WATERMARK[runner_name]
    kafka.produce(source, first if live else first + second)

    command = [PYTHON, "-m", "pipelines.team_scores", "--source", "kafka",
               "--bootstrap_servers", kafka.bootstrap_servers, "--input_topic", source,
               "--output_topic", output, "--dead_letter_topic", dead_letters,
               "--max_records", str(per_partition), "--window_seconds", str(WINDOW),
               "--early_seconds", "1", "--allowed_lateness", "600",
               # No idle advancement: every partition has data, and the test's pauses must
               # not move the watermark (it would otherwise follow the wall clock).
               "--idle_timeout_seconds", "3600",
               *_runner_arguments(runner_name)]
    log_path = tmp_path / "job.log"
    with open(log_path, "w") as log:
        job = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))
    reader = _Panes(kafka.bootstrap_servers, output)
    phase_one = _sums([e for e in _phase_one_events(first) if e[2] < base + 2 * WINDOW], base)
    try:
        if live:
            # Phase 2 only once the on-time panes of W0 and W1 are out: its W0/W1 events are
            # then late whatever the runner's batching.
            deadline = time.monotonic() + PANE_TIMEOUT
            while True:
                reader.poll()
                seen = {(p["key"], (p["window"]["start"], p["window"]["end"]))
                        for p in reader.panes if p["pane"]["timing"] == "ON_TIME"}
                if set(phase_one) <= seen:
                    break
                assert job.poll() is None, f"the job ended early:\n{_stop(job, log_path)}"
                assert time.monotonic() < deadline, (
                    f"no ON_TIME panes for {sorted(set(phase_one) - seen)} within "
                    f"{PANE_TIMEOUT} s; panes so far: {reader.panes}\n{_stop(job, log_path)}")
            kafka.produce(source, second)
        try:
            job.wait(timeout=END_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end after {per_partition} records per partition:\n"
                        f"{_stop(job, log_path)}")
        assert job.returncode == 0, _stop(job, log_path)
        # Every pane is flushed before the job ends; read until the topic has no more.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            before = len(reader.panes)
            reader.poll()
            if reader.panes and len(reader.panes) == before:
                break
    finally:
        _stop(job, log_path)
        reader.close()

    all_sums = _sums(kept, base)
    # Without a live watermark every event is in its window before the window closes.
    on_time_sums = phase_one if live else {slot: total for slot, total in all_sums.items()
                                           if slot[1][0] < base + 2 * WINDOW}
    panes = _by_team_and_window(reader.panes)
    all_sums = _sums(kept, base)
    assert set(panes) == set(all_sums), "one series of panes per team and window with events"
    for slot, series in panes.items():
        timings = [p["pane"]["timing"] for p in series]
        assert [p["pane"]["index"] for p in series] == list(range(len(series))), series
        values = [p["value"] for p in series]
        assert values == sorted(values), f"accumulating panes never shrink: {series}"
        assert values[-1] == all_sums[slot], f"final pane = every kept event: {slot} {series}"
        if slot[1][0] < base + 2 * WINDOW and slot not in on_time_sums:
            assert set(timings) == {"LATE"}, f"only late data, only late panes: {series}"
            continue
        # EARLY* ON_TIME LATE*: exactly one on-time pane, speculative ones before it.
        assert timings.count("ON_TIME") == 1, series
        on_time = timings.index("ON_TIME")
        assert set(timings[:on_time]) <= {"EARLY"} and set(timings[on_time + 1:]) <= {"LATE"}
        if slot[1][0] < base + 2 * WINDOW:
            # W0, W1: the on-time pane holds exactly phase 1's (on-time) events.
            assert values[on_time] == on_time_sums[slot], (slot, series)
            if all_sums[slot] != on_time_sums[slot]:
                assert timings[-1] == "LATE", f"late data appears in late panes: {series}"
        else:
            assert "LATE" not in timings, series
    late_panes = [p for p in reader.panes if p["pane"]["timing"] == "LATE"]
    if live:
        assert late_panes, "the scenario has late data, and it shows in late panes"
    else:
        assert not late_panes, "nothing can be late without a live watermark"

    letters = kafka.consume_all(dead_letters, expected=2)
    reasons = sorted(dict(record.headers)["dead_letter.reason"].decode() for record in letters)
    assert len(letters) == 2, letters
    assert reasons[0].startswith("field 'score'"), reasons
    assert reasons[1].startswith("value_decoder utf8 failed"), reasons
    assert {record.value for record in letters} == {b"\xff\xfe not utf-8", _bad_score(second)}


def _phase_one_events(first) -> List[tuple]:
    events = []
    for _key, value, _timestamp, _partition in first:
        fields = json.loads(value)
        events.append((fields["team"], fields["score"], fields["timestamp"]))
    return events


def _bad_score(second) -> bytes:
    return next(value for _key, value, _t, _p in second if b'"score": "x"' in value)
