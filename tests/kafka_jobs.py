"""Kafka jobs run as processes of their own, for the tests that kill or disturb them.

A job in its own process has its own Spark session (so its master can differ from the test
session's) and its own process group, which a test can SIGKILL whole: driver, Spark JVM and
Python workers. The helpers here start such a job, wait for it, and read the panes it wrote
to an output topic; :func:`game_records` is the input every such test feeds it.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Counter, List, Optional

import pytest

from transforms.kafka.polling import poll_records
from project import PYTHON, QUICK_JVM_OPTIONS, REPO

#: Seconds a job may take (Spark's start-up included).
RUN_SECONDS = 240.0
#: The input of the restart and fault tests: partitions, records in each, records of a
#: partition read per batch, window seconds.
PARTITIONS = 4
PER_PARTITION = 12
BATCH_CAP = 2
WINDOW = 10


def game_records(base: int, partitions: int, per_partition: int) -> List[tuple]:
    """Per partition ``p`` (user ``u<p>``), events 3.5 s apart from ``base`` on, moving through
    several windows, a few out of order and two (numbers 7 and 10) 25 s late; as
    ``(key, value, timestamp_ms, partition)`` tuples for ``KafkaTestHelper.produce``."""
    rng = random.Random(11)
    records = []
    for partition in range(partitions):
        for number in range(per_partition):
            at = base + number * 3.5 + rng.uniform(0, 2)
            if number in (7, 10):
                at -= 25  # behind the watermark: late, within the allowed lateness
            event = {"user": f"u{partition}", "team": rng.choice(("red", "blue")),
                     "score": rng.randint(1, 9), "timestamp": at}
            records.append((None, json.dumps(event).encode(), None, partition))
    return records


def start_job(command: List[str], log_path: Path) -> subprocess.Popen:
    """Start ``command`` in the repository, in a new process group, logging to ``log_path``."""
    with open(log_path, "w") as log:
        return subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONPATH=str(REPO)),
                                start_new_session=True)


def log_tail(log_path: Path, characters: int = 4000) -> str:
    """The end of a job's log, for a failure message."""
    return log_path.read_text(errors="replace")[-characters:]


def finish_job(job: subprocess.Popen, log_path: Path) -> None:
    """Wait for ``job`` to end and fail the test unless it ended with status 0 in time."""
    try:
        job.wait(timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired:
        kill_job(job)
        pytest.fail(f"the job did not end within {RUN_SECONDS} s:\n{log_tail(log_path)}")
    assert job.returncode == 0, log_tail(log_path)


def kill_job(job: subprocess.Popen) -> None:
    """SIGKILL the job's whole process group (driver, Spark JVM, Python workers) and reap it."""
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def topic_panes(bootstrap_servers: str, topic: str, committed_only: bool,
                client_config: Optional[dict] = None) -> Counter[str]:
    """Every pane record now in partition 0 of ``topic``, as canonical JSON, counted
    (``client_config``: more kafka-python settings, e.g. TLS)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             isolation_level="read_committed" if committed_only
                             else "read_uncommitted", **(client_config or {}))
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        panes: Counter[str] = collections.Counter()
        deadline = time.monotonic() + 30
        while consumer.position(partition) < end and time.monotonic() < deadline:
            for records in poll_records(consumer, 0.5).values():
                panes.update(json.dumps(json.loads(record.value), sort_keys=True)
                             for record in records)
        return panes
    finally:
        consumer.close()


def wait_for_records(job: subprocess.Popen, bootstrap_servers: str, topic: str, count: int,
                     log_path: Path) -> None:
    """Return once partition 0 of ``topic`` holds ``count`` records; fail if the job ends
    first or :data:`RUN_SECONDS` pass."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    partition = TopicPartition(topic, 0)
    deadline = time.monotonic() + RUN_SECONDS
    try:
        while consumer.end_offsets([partition])[partition] < count:
            assert job.poll() is None, f"the job ended too soon:\n{log_tail(log_path)}"
            assert time.monotonic() < deadline, log_tail(log_path)
            time.sleep(0.2)
    finally:
        consumer.close()


def team_scores_command(kafka, source: str, output: str, checkpoint_dir: Path,
                        exactly_once: bool) -> List[str]:
    """team_scores from ``source`` to ``output`` on the SparkRunner, reading at most
    :data:`BATCH_CAP` records of a partition a batch (so the read takes several batches),
    firing on event time only, checkpointed every batch."""
    return [PYTHON, "-m", "pipelines.team_scores", "--source", "kafka",
            "--bootstrap_servers", kafka.bootstrap_servers, "--input_topic", source,
            "--output_topic", output, "--max_records", str(PER_PARTITION),
            "--batch_max_records_per_partition", str(BATCH_CAP),
            "--window_seconds", str(WINDOW), "--early_seconds", "0",
            "--allowed_lateness", "600", "--idle_timeout_seconds", "3600",
            "--runner", "SparkRunner", "--streaming", "--batch_interval_seconds", "0.2",
            "--checkpoint_dir", str(checkpoint_dir), "--checkpoint_interval_batches", "1",
            "--spark_parallelism", "1", "--spark_conf", "spark.ui.enabled=false",
            *QUICK_JVM_OPTIONS,
            *(["--exactly_once"] if exactly_once else [])]
