"""Kafka -> team_scores -> Kafka on the SparkRunner, SIGKILLed mid-stream and resumed.

The whole input is in the topic before the job starts, and each micro-batch reads at most
``BATCH_CAP`` records of each partition (``--batch_max_records_per_partition``), so the read
takes several batches whose ranges the driver plans and logs in the checkpoint directory
before it runs them. The job fires on event time only (``--early_seconds 0``: on time, then
per late element), with no idle advancement of the watermark, so its panes depend on the
records of each batch and nothing else: a run given the same ranges gives the same panes.

Run 1 is killed with SIGKILL (its whole process group: driver, Spark JVM, Python workers) once
some panes are in the output topic; run 2 starts from the same ``--checkpoint_dir`` and reads
to ``--max_records``. An uninterrupted run, meanwhile, gives the reference panes.

* noida, ``--exactly_once``: a consumer that reads committed records sees every pane of the
  uninterrupted run exactly once. (The batch in flight when run 1 died is replayed with the
  same offset ranges; its open transactions are aborted, and bundles whose transaction had
  committed are not written again.)
* noida, ``--exactly_once``, run 2 with another ``--spark_parallelism``: the same, the batch
  in flight replayed at run 1's key partitions before the state is re-split;
* at-least-once (the default; tansu's only mode), on both brokers: no pane is lost; the
  only extra records are copies of panes of the uninterrupted run (a replayed batch writes
  its panes again).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from runners.spark.state.checkpoint import latest_checkpoint, read_manifest

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
    wait_for_records,
)


def _kill_after_panes(job, kafka, topic: str, panes: int, log_path: Path) -> None:
    """SIGKILL the job's process group once ``panes`` records are in ``topic``."""
    try:
        wait_for_records(job, kafka.bootstrap_servers, topic, panes, log_path)
    finally:
        kill_job(job)
    assert job.returncode == -signal.SIGKILL


@pytest.mark.parametrize("exactly_once, rescaled", [(True, False), (False, False), (True, True)],
                         ids=["exactly-once", "at-least-once", "exactly-once-rescaled"])
def test_killed_kafka_job_resumes_from_its_checkpoint(kafka, kafka_broker_kind, exactly_once,
                                                      rescaled, tmp_path):
    if exactly_once and kafka_broker_kind != "noida":
        pytest.skip(f"{kafka_broker_kind} does not isolate aborted transactions "
                    "(WriteToKafka refuses --exactly_once there: tests/kafka/test_kafka_write.py)")
    source = kafka.create_topic(partitions=PARTITIONS)
    kafka.produce(source, game_records(recent_base_seconds(), PARTITIONS, PER_PARTITION))
    reference_topic, output = kafka.create_topic(), kafka.create_topic()

    reference_log, log_1, log_2 = (tmp_path / name for name in ("reference.log", "run-1.log",
                                                                "run-2.log"))
    reference = start_job(team_scores_command(kafka, source, reference_topic, tmp_path / "reference",
                                exactly_once), reference_log)
    # Runs 1 and 2 append to one report (an option of the pipeline is part of what the
    # checkpoint's fingerprint compares, so both runs are given the same).
    report = tmp_path / "report.jsonl"
    run_1 = start_job(team_scores_command(kafka, source, output, tmp_path / "checkpoints", exactly_once)
                   + ["--streaming_report", str(report)], log_1)
    try:
        _kill_after_panes(run_1, kafka, output, 3, log_1)
        finish_job(reference, reference_log)
    finally:
        for job in (reference, run_1):
            kill_job(job)
    assert (tmp_path / "checkpoints" / "plans").is_dir(), "run 1 logged its batches' ranges"

    reported = len(report.read_text().splitlines()) if report.exists() else 0
    # Rescaled: run 2 asks for 3 key partitions; the batch in flight when run 1 died is
    # replayed at run 1's 1 (its bundles as they were), then the state is re-split.
    more = ["--spark_parallelism", "3"] if rescaled else []
    run_2 = start_job(team_scores_command(kafka, source, output, tmp_path / "checkpoints", exactly_once)
                   + ["--streaming_report", str(report)] + more, log_2)
    finish_job(run_2, log_2)
    first_batch = json.loads(report.read_text().splitlines()[reported])["batch"]
    assert first_batch > 1, "run 2 resumed after the batches run 1 checkpointed"
    if rescaled:
        # The replayed batch rebuilt run 1's one store per keyed step; a later batch the
        # three of the re-split; the final checkpoint holds three partitions.
        lines = [json.loads(line) for line in report.read_text().splitlines()[reported:]]
        loaded = [max(line["stores_loaded"].values(), default=0) for line in lines]
        assert loaded[0] == 1 and 3 in loaded[1:], loaded
        manifest = read_manifest(latest_checkpoint(str(tmp_path / "checkpoints")))
        assert manifest["parallelism"] == 3

    expected = topic_panes(kafka.bootstrap_servers, reference_topic, committed_only=exactly_once)
    timings = {json.loads(pane)["pane"]["timing"] for pane in expected}
    assert timings == {"ON_TIME", "LATE"}, expected
    if exactly_once:
        assert topic_panes(kafka.bootstrap_servers, output, committed_only=True) == expected
        return
    seen = topic_panes(kafka.bootstrap_servers, output, committed_only=False)
    assert not expected - seen, f"panes lost: {expected - seen}"
    assert set(seen) == set(expected), f"records that are no pane of the run: {seen - expected}"

