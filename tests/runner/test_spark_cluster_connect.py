"""The SparkRunner on a Spark Connect server that drives a cluster of two workers sharing
nothing (``cluster_fixtures``): what an executor needs reaches it through Connect alone, and
a streaming job's key partitions stay on the executors that hold their stores (the cached
pointers of ``runners/spark/backends/connect_affinity.py``) and move when one is lost.

The server is started from pyspark's jars with the cluster as its master and PySpark's own
worker daemon (a server that is not the project's: its Python workers import Beam and the
runner themselves); the client, this test process, has no SparkContext for it. The
pipeline's functions are defined inside the test so that they travel by value: the
executors cannot import this test module.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import cluster_job
from cluster_fixtures import CLUSTER_MARKS, finish_driver, start_driver, wait_for_batches
from connect_fixtures import no_classic_spark  # noqa: F401 (fixture)
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
from project import PYTHON, QUICK_JVM
from spark_fixtures import spark_session  # noqa: F401 (fixture)
from runners.spark import SparkRunner
from services.connect_server import ConnectServer

pytestmark = CLUSTER_MARKS


@pytest.fixture(scope="module")
def cluster_connect_server(two_workers, tmp_path_factory):
    settings = {**two_workers.driver_conf(), "spark.driver.extraJavaOptions": QUICK_JVM,
                "spark.executor.extraJavaOptions": QUICK_JVM}
    master = settings.pop("spark.master")
    with ConnectServer(state_dir=tmp_path_factory.mktemp("cluster-connect"), master=master,
                       conf=settings, daemon_module=None) as server:
        yield server


def test_a_batch_pipeline_runs_on_a_connect_server_of_the_cluster(
        cluster_connect_server, shared_dir, no_classic_spark):
    session = cluster_connect_server.session()
    big = ["w%04d" % index + "." * 100 for index in range(1000)]  # ~100 KB: an artifact

    class NoteExecutor(beam.DoFn):
        def __init__(self):
            self.where = Metrics.string_set("cluster", "worker_directories")

        def process(self, word):
            from pyspark import SparkFiles

            # An executor's files are in its worker's own directory (the task's working
            # directory is the driver's: the workers see it, being on this host).
            self.where.add(SparkFiles.getRootDirectory().split("/work/")[0])
            yield word[0], 1

    output = shared_dir / "counts"
    pipeline = beam.Pipeline(runner=SparkRunner(session),
                             options=PipelineOptions(["--spark_parallelism=4"]))
    known = pipeline | "Known" >> beam.Create(big)
    _ = (pipeline | beam.Create(["apple", "avocado", "banana", "cherry"] * 50)
         | beam.Reshuffle() | beam.ParDo(NoteExecutor()) | beam.CombinePerKey(sum)
         | beam.Map(lambda pair, known: f"{pair[0]} {pair[1]} {len(known)}",
                    known=beam.pvalue.AsList(known))
         | beam.io.WriteToText(str(output)))
    result = pipeline.run()
    assert result.wait_until_finish() == "DONE"
    lines = sorted(line for path in Path(shared_dir).glob("counts*")
                   for line in path.read_text().splitlines())
    assert lines == ["a 100 1000", "b 50 1000", "c 50 1000"]
    (where,) = result.metrics().query(MetricsFilter().with_namespace("cluster"))["string_sets"]
    workers = {re.search(r"workers/(\d+)", directory).group(1)
               for directory in where.committed}
    assert workers == {"0", "1"}, where.committed
    session.stop()


def _report(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_keyed_streaming_job_on_connect_keeps_its_stores_and_survives_a_lost_worker(
        two_workers, cluster_connect_server, shared_dir, spark_session, tmp_path):
    """The cluster test of ``test_spark_cluster_streaming.py`` through the Connect server:
    steady, each key partition's task goes back to the executor that holds its store (no
    store rebuilt in any batch); worker 1 SIGKILLed mid-stream, the job finishes on worker
    0, which rebuilds the lost partitions' stores from the checkpoint, and writes what
    classic ``local[2]`` writes."""
    batches, before_kill = 14, 12
    panes, report, log = shared_dir / "panes", shared_dir / "report.jsonl", tmp_path / "job.log"
    driver = start_driver([PYTHON, str(Path(cluster_job.__file__)), str(panes),
                           "--batches", str(batches), "--spark_parallelism", "4",
                           "--checkpoint_dir", str(shared_dir / "checkpoints"),
                           "--streaming_report", str(report),
                           f"--spark_remote={cluster_connect_server.url}"], log)
    try:
        wait_for_batches(driver, report, before_kill, log)
        killed = two_workers.kill_worker(1)
        assert len(killed) >= 3, killed  # the worker, its executor, its Python daemon
        expected = cluster_job.local_records(spark_session, tmp_path / "local", batches)
        finish_driver(driver, log)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        two_workers.start_worker(1)

    # At-least-once: panes of the batch in flight may be written again, as the same files.
    assert cluster_job.read_records(str(panes)) == expected
    lines = _report(report)
    # The sum's GroupByKey, and the stateful stage (named after its fused transforms).
    steps = sorted(lines[-1]["stores_loaded"])
    count = next(step for step in steps if "Count" in step)
    assert len(steps) == 2 and "Sum/GroupByKey" in steps
    assert max(line["state_keys"][count] for line in lines) == len(cluster_job.KEYS)
    loaded = [sum(line["stores_loaded"].values()) for line in lines]
    assert sum(loaded[:before_kill]) == 0, loaded  # steady: every store stayed where it was
    assert sum(loaded[before_kill:]) > 0, loaded  # the lost executor's partitions moved


def test_a_lost_worker_under_an_exactly_once_kafka_job_on_connect_leaves_the_output_whole(
        two_workers, cluster_connect_server, shared_dir, kafka, kafka_broker_kind, tmp_path):
    """Kafka -> team_scores -> Kafka with the transactional sink, through the Connect
    server: a worker lost mid-stream leaves a read-committed output equal to an
    uninterrupted run's (on classic ``local[2]``)."""
    if kafka_broker_kind != "noida":
        pytest.skip(f"{kafka_broker_kind} does not isolate aborted transactions (WriteToKafka "
                    "refuses --exactly_once there: tests/kafka/test_kafka_write.py)")
    source = kafka.create_topic(partitions=PARTITIONS)
    kafka.produce(source, game_records(recent_base_seconds(), PARTITIONS, PER_PARTITION))
    reference_topic, output = kafka.create_topic(), kafka.create_topic()
    reference_log, log = tmp_path / "reference.log", tmp_path / "cluster.log"
    report = shared_dir / "report.jsonl"
    reference = start_job(team_scores_command(kafka, source, reference_topic,
                                              tmp_path / "reference", True), reference_log)
    driver = start_driver(team_scores_command(kafka, source, output, shared_dir / "checkpoints",
                                              True)
                          + ["--streaming_report", str(report), "--spark_parallelism", "2",
                             f"--spark_remote={cluster_connect_server.url}"], log)
    try:
        wait_for_batches(driver, report, 3, log)
        two_workers.kill_worker(1)
        finish_driver(driver, log)
        finish_job(reference, reference_log)
    finally:
        for job in (reference, driver):
            kill_job(job)
        two_workers.start_worker(1)

    expected = topic_panes(kafka.bootstrap_servers, reference_topic, committed_only=True)
    assert {json.loads(pane)["pane"]["timing"] for pane in expected} == {"ON_TIME", "LATE"}
    assert topic_panes(kafka.bootstrap_servers, output, committed_only=True) == expected
