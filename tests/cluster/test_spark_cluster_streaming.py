"""Streaming on a Spark cluster of two workers that share no disk (``cluster_fixtures``).

Keyed state is a cache on the executor that runs a key partition, durable in the
checkpoint location at every batch: a task on another executor rebuilds its store from
there (``runners/spark/state/changelog.py``), and tasks go back to the executor that
holds their store (``placement.py``). Each test runs a driver process of its own on the
cluster (``cluster_job.py``: every key touched in every batch, windows closing during the
run, a GroupByKey and a stateful DoFn), and compares what it wrote with the same pipeline
on ``local[2]``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import cluster_job
import lost_worker_checks as checks
from cluster_fixtures import (
    CLUSTER_MARKS,
    finish_driver,
    runner_options,
    start_driver,
    wait_for_batches,
)
from project import PYTHON, REPO
from spark_fixtures import spark_session  # noqa: F401 (fixture)

pytestmark = CLUSTER_MARKS


def test_a_keyed_streaming_job_keeps_its_stores_and_survives_a_lost_worker(
        two_workers, shared_dir, spark_session, tmp_path):
    """See :func:`lost_worker_checks.check_keyed_job_keeps_its_stores_and_survives_a_lost_worker`."""
    checks.check_keyed_job_keeps_its_stores_and_survives_a_lost_worker(
        two_workers, shared_dir, spark_session, tmp_path, *runner_options(two_workers))


def test_a_job_killed_and_restarted_from_a_checkpoint_on_s3_ends_with_the_same_panes(
        two_workers, shared_dir, s3_bucket, spark_session, tmp_path):
    """``--checkpoint_dir s3://...`` on an S3 server on loopback (moto): the driver killed
    mid-stream, and started again on the same location, resumes from its checkpoint (state
    rebuilt from the state files in the bucket, on whichever executor)."""
    batches = 10
    panes, report = shared_dir / "panes", shared_dir / "report.jsonl"
    command = checks.keyed_job_command(panes, f"s3://{s3_bucket.name}/checkpoints", report,
                                       batches, "--checkpoint_interval_batches", "2",
                                       *s3_bucket.options, *runner_options(two_workers))
    log_1, log_2 = tmp_path / "run-1.log", tmp_path / "run-2.log"
    run_1 = start_driver(command, log_1)
    try:
        wait_for_batches(run_1, report, 9, log_1)
    finally:
        os.killpg(run_1.pid, signal.SIGKILL)  # the driver, its JVM and its Python
        run_1.wait()
    checkpoints = s3_bucket.keys("checkpoints/checkpoint-")
    assert any(key.endswith("/MANIFEST.json") for key in checkpoints), checkpoints
    assert s3_bucket.keys("checkpoints/state/"), "state files are in the bucket"
    reported = len(report.read_text().splitlines())

    run_2 = start_driver(command, log_2)
    expected = cluster_job.local_records(spark_session, tmp_path / "local", batches)
    finish_driver(run_2, log_2)
    resumed = checks.report_lines(report)[reported]
    assert resumed["batch"] >= 6, "run 2 resumed from run 1's checkpoint"
    assert cluster_job.read_records(str(panes)) == expected


#: The user's own project: a module of DoFns, its setup.py, and a pipeline that uses them.
USER_SETUP = """from setuptools import setup
setup(name="word-stats", version="0.1", py_modules=["word_stats"])
"""
USER_MODULE = '''import json, os
import apache_beam as beam


class WordLength(beam.DoFn):
    """The user's DoFn: (first letter, length) of each word."""

    def process(self, word):
        yield word[0], len(word)


class WriteTotal(beam.DoFn):
    def __init__(self, directory):
        self.directory = directory

    def process(self, element):
        with open(os.path.join(self.directory, element[0] + ".json"), "w") as file:
            json.dump(element, file)
'''
USER_PIPELINE = '''import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from runners.spark import SparkRunner
import word_stats

output, arguments = sys.argv[1], sys.argv[2:]
words = ["apple", "avocado", "banana", "blueberry", "cherry"] * 20
with beam.Pipeline(runner=SparkRunner(), options=PipelineOptions(arguments)) as pipeline:
    _ = (pipeline | beam.Create(words) | beam.ParDo(word_stats.WordLength())
         | beam.CombinePerKey(sum) | beam.ParDo(word_stats.WriteTotal(output)))
print("JOB DONE")
'''


def _python_without_the_project(directory: Path) -> str:
    """A virtualenv whose Python has the project's third-party dependencies (the test
    environment's site-packages, as a path) but not the project (its editable install is a
    .pth file there, which a path entry does not run)."""
    import subprocess
    import sysconfig

    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(directory)], check=True,
                   timeout=120)
    python = str(directory / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]  # this test's environment (the project's venv)
    Path(purelib, "project-dependencies.pth").write_text(ours + "\n")
    return python


def test_executors_without_the_project_run_a_pipeline_of_the_users_own_module(
        two_workers, shared_dir, tmp_path):
    """The executors' Python has Beam, PySpark and the rest, but neither this project nor
    the user's module: the runner ships its own packages, and Beam's ``--setup_file``
    brings the user's package (built, installed offline into the job's site, shipped)."""
    import subprocess

    executor_python = _python_without_the_project(shared_dir / "executor-venv")
    probe = subprocess.run([executor_python, "-c", "import apache_beam, pyspark, lmdb\n"
                            "try:\n    import runners\nexcept ImportError:\n    print('NO')"],
                           capture_output=True, text=True, timeout=120, cwd=shared_dir,
                           env={key: value for key, value in os.environ.items()
                                if key != "PYTHONPATH"})
    assert probe.stdout.strip() == "NO", probe.stdout + probe.stderr  # Beam yes, project no
    user = shared_dir / "user-project"
    user.mkdir()
    (user / "setup.py").write_text(USER_SETUP)
    (user / "word_stats.py").write_text(USER_MODULE)
    (user / "pipeline.py").write_text(USER_PIPELINE)
    output = shared_dir / "totals"
    output.mkdir()
    log = tmp_path / "driver.log"
    driver = subprocess.Popen(
        [PYTHON, "pipeline.py", str(output), "--setup_file", str(user / "setup.py"),
         *runner_options(two_workers), f"--spark_conf=spark.pyspark.python={executor_python}"],
        cwd=user, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    text = finish_driver(driver, log)

    assert "JOB DONE" in text
    totals = {path.stem: json.loads(path.read_text())[1] for path in output.iterdir()}
    assert totals == {"a": 20 * (5 + 7), "b": 20 * (6 + 9), "c": 20 * 6}


def test_a_lost_worker_under_an_exactly_once_kafka_job_leaves_the_committed_output_whole(
        two_workers, shared_dir, kafka, kafka_broker_kind, tmp_path):
    """See :func:`lost_worker_checks.check_exactly_once_kafka_output_whole_after_a_lost_worker`."""
    if kafka_broker_kind != "noida":
        pytest.skip(f"{kafka_broker_kind} does not isolate aborted transactions (WriteToKafka "
                    "refuses --exactly_once there: tests/kafka/test_kafka_write.py)")
    checks.check_exactly_once_kafka_output_whole_after_a_lost_worker(
        two_workers, shared_dir, kafka, tmp_path, *runner_options(two_workers))
