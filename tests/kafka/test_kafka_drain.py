"""Kafka -> team_scores -> Kafka on the SparkRunner, drained mid-stream by SIGTERM.

The whole input is in the topic before the job starts; each micro-batch reads one record of
each partition, so the read takes :data:`~kafka_jobs.PER_PARTITION` batches. Once the first
pane is in the output topic, the test sends SIGTERM to the driver (``--on_signal=drain``).
The drain must stop the read where it is, fire every window it opened whose watermark had
not passed (the watermark goes to the end of time; a window already fired on time and
waiting for late data has nothing more to emit, as Beam's default closing behaviour fires a
closing pane only if it is not empty), commit the exactly-once sink's transactions and the
read offsets, and end the job with exit status 0 within :data:`DRAIN_SECONDS`. Each
window's latest pane must hold exactly the records the job read (its committed offsets): nothing lost,
nothing counted twice. Started again on its checkpoint, the drained job writes nothing.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import time

import pytest

from kafka_fixtures import recent_base_seconds
from kafka_jobs import (
    PARTITIONS,
    PER_PARTITION,
    WINDOW,
    finish_job,
    game_records,
    kill_job,
    log_tail,
    start_job,
    team_scores_command,
    topic_panes,
    wait_for_records,
)

#: Seconds from SIGTERM to the job's exit: a few batches that only settle, the final
#: checkpoint, Spark's shutdown.
DRAIN_SECONDS = 60


def test_a_drained_kafka_job_emits_each_final_pane_once_commits_and_a_restart_emits_nothing(
        kafka, kafka_broker_kind, tmp_path):
    if kafka_broker_kind != "noida":
        pytest.skip(f"{kafka_broker_kind} does not isolate aborted transactions: the drain's "
                    "commit of the exactly-once sink is only observable on noida")
    source = kafka.create_topic(partitions=PARTITIONS)
    records = game_records(recent_base_seconds(), PARTITIONS, PER_PARTITION)
    kafka.produce(source, records)
    output, group = kafka.create_topic(), kafka.group()
    command = team_scores_command(kafka, source, output, tmp_path / "checkpoints",
                                  exactly_once=True) + [
        "--batch_max_records_per_partition", "1", "--group_id", group]
    log = tmp_path / "run.log"
    job = start_job(command + ["--on_signal", "drain"], log)
    try:
        wait_for_records(job, kafka.bootstrap_servers, output, 1, log)
        signalled = time.monotonic()
        job.send_signal(signal.SIGTERM)  # the driver alone, as an orchestrator stops it
        try:
            job.wait(timeout=DRAIN_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the drained job did not end within {DRAIN_SECONDS} s:\n"
                        f"{log_tail(log)}")
        drain_seconds = time.monotonic() - signalled
    finally:
        kill_job(job)
    assert job.returncode == 0, log_tail(log)
    assert "SIGTERM: draining the pipeline" in log.read_text(), log_tail(log)

    committed = kafka.committed(group, source, PARTITIONS)
    assert all(offset is not None for offset in committed.values()), committed
    read = sum(committed.values())
    assert 0 < read < PARTITIONS * PER_PARTITION, (
        f"the drain did not stop the read mid-stream: {committed} after {drain_seconds:.1f} s")

    panes = topic_panes(kafka.bootstrap_servers, output, committed_only=True)
    assert panes and max(panes.values()) == 1, f"a pane written twice: {panes}"
    by_window = collections.defaultdict(list)
    for pane in map(json.loads, panes):
        by_window[(pane["key"], pane["window"]["start"])].append(pane)
    for window, fired in by_window.items():
        assert sorted(pane["pane"]["index"] for pane in fired) == list(range(len(fired))), (
            f"window {window}: panes missing or repeated: {fired}")
    # Every window the job opened fired (the drain fires those whose watermark had not
    # passed), and its latest pane (accumulating) sums exactly the records read.
    expected = collections.Counter()
    for partition in range(PARTITIONS):
        in_partition = [json.loads(value) for _, value, _, p in records if p == partition]
        for event in in_partition[:committed[partition]]:
            start = float(int(event["timestamp"] // WINDOW) * WINDOW)
            expected[(event["team"], start)] += event["score"]
    latest = {window: max(fired, key=lambda pane: pane["pane"]["index"])["value"]
              for window, fired in by_window.items()}
    assert latest == dict(expected), f"read {committed}, drained in {drain_seconds:.1f} s"

    # Started again on its checkpoint, the drained job is at its end: not one record more.
    restart_log = tmp_path / "restart.log"
    finish_job(start_job(command, restart_log), restart_log)
    assert topic_panes(kafka.bootstrap_servers, output, committed_only=False) == panes
    assert kafka.committed(group, source, PARTITIONS) == committed
