"""The cluster's lost-worker checks, one body each for classic Spark and for a Connect server
that drives the same cluster (``test_spark_cluster_streaming.py``,
``test_spark_cluster_connect.py``): the tests differ only in how the driver reaches Spark.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, List

import cluster_job
from cluster_fixtures import finish_driver, start_driver, wait_for_batches
from kafka_fixtures import recent_base_seconds
from kafka_jobs import (
    PARTITIONS,
    PER_PARTITION,
    finish_job,
    game_records,
    kill_job,
    start_job,
    team_scores_command,
    topic_panes,
)
from project import PYTHON

#: TestStream batches of data of the keyed job (each one a report line, its watermark
#: advance another).
BATCHES = 14


def report_lines(path: Path) -> List[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def keyed_job_command(panes: Path, checkpoints: str, report: Path, batches: int,
                      *options: str) -> List[str]:
    """``cluster_job.py`` at 4 key partitions, checkpointed, reporting each batch."""
    return [PYTHON, str(Path(cluster_job.__file__)), str(panes), "--batches", str(batches),
            "--spark_parallelism", "4", "--checkpoint_dir", checkpoints,
            "--streaming_report", str(report), *options]


def check_keyed_job_keeps_its_stores_and_survives_a_lost_worker(
        cluster: Any, shared_dir: Path, spark_session: Any, tmp_path: Path,
        *driver_options: str) -> None:
    """Steady, each key partition's task goes back to the executor that holds its store: no
    store is rebuilt in any batch. Then worker 1, its executor and its Python workers are
    SIGKILLed mid-stream: the job finishes on worker 0, whose tasks rebuild the lost
    partitions' stores from the checkpoint location, and writes what classic ``local[2]``
    (``spark_session``) writes."""
    panes, report, log = shared_dir / "panes", shared_dir / "report.jsonl", tmp_path / "job.log"
    before_kill = 12  # report lines (a TestStream event each)
    driver = start_driver(keyed_job_command(panes, str(shared_dir / "checkpoints"), report,
                                            BATCHES, *driver_options), log)
    try:
        wait_for_batches(driver, report, before_kill, log)
        killed = cluster.kill_worker(1)
        assert len(killed) >= 3, killed  # the worker, its executor, its Python daemon
        expected = cluster_job.local_records(spark_session, tmp_path / "local", BATCHES)
        finish_driver(driver, log)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        cluster.start_worker(1)

    # At-least-once: panes of the batch in flight may be written again, as the same files.
    assert cluster_job.read_records(str(panes)) == expected
    lines = report_lines(report)
    # The sum's GroupByKey, and the stateful stage (named after its fused transforms).
    steps = sorted(lines[-1]["stores_loaded"])
    count = next(step for step in steps if "Count" in step)
    assert len(steps) == 2 and "Sum/GroupByKey" in steps
    assert max(line["state_keys"][count] for line in lines) == len(cluster_job.KEYS)
    loaded = [sum(line["stores_loaded"].values()) for line in lines]
    assert sum(loaded[:before_kill]) == 0, loaded  # steady: every store stayed where it was
    assert sum(loaded[before_kill:]) > 0, loaded  # the lost executor's partitions moved


def check_exactly_once_kafka_output_whole_after_a_lost_worker(
        cluster: Any, shared_dir: Path, kafka: Any, tmp_path: Path, *driver_options: str) -> None:
    """Kafka -> team_scores -> Kafka with the transactional sink on the cluster: a worker
    lost mid-stream (its bundles' open transactions die with it, their tasks run again on
    the other executor) leaves a read-committed output equal to an uninterrupted run's (on
    classic ``local``)."""
    source = kafka.create_topic(partitions=PARTITIONS)
    kafka.produce(source, game_records(recent_base_seconds(), PARTITIONS, PER_PARTITION))
    reference_topic, output = kafka.create_topic(), kafka.create_topic()
    reference_log, log = tmp_path / "reference.log", tmp_path / "cluster.log"
    report = shared_dir / "report.jsonl"
    reference = start_job(team_scores_command(kafka, source, reference_topic,
                                              tmp_path / "reference", True), reference_log)
    # The same job on the cluster (a later --spark_parallelism wins: both executors work).
    driver = start_driver(team_scores_command(kafka, source, output, shared_dir / "checkpoints",
                                              True)
                          + ["--streaming_report", str(report), "--spark_parallelism", "2",
                             *driver_options], log)
    try:
        wait_for_batches(driver, report, 3, log)
        cluster.kill_worker(1)
        finish_driver(driver, log)
        finish_job(reference, reference_log)
    finally:
        for job in (reference, driver):
            kill_job(job)
        cluster.start_worker(1)

    expected = topic_panes(kafka.bootstrap_servers, reference_topic, committed_only=True)
    assert {json.loads(pane)["pane"]["timing"] for pane in expected} == {"ON_TIME", "LATE"}
    assert topic_panes(kafka.bootstrap_servers, output, committed_only=True) == expected
