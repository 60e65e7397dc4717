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

import re
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

import lost_worker_checks as checks
from cluster_fixtures import CLUSTER_MARKS
from connect_fixtures import no_classic_spark  # noqa: F401 (fixture)
from project import QUICK_JVM
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



def test_a_keyed_streaming_job_on_connect_keeps_its_stores_and_survives_a_lost_worker(
        two_workers, cluster_connect_server, shared_dir, spark_session, tmp_path):
    """The classic cluster test's keyed job through the Connect server (placed by the cached
    pointers): :func:`lost_worker_checks.check_keyed_job_keeps_its_stores_and_survives_a_lost_worker`."""
    checks.check_keyed_job_keeps_its_stores_and_survives_a_lost_worker(
        two_workers, shared_dir, spark_session, tmp_path,
        f"--spark_remote={cluster_connect_server.url}")


def test_a_lost_worker_under_an_exactly_once_kafka_job_on_connect_leaves_the_output_whole(
        two_workers, cluster_connect_server, shared_dir, kafka, kafka_broker_kind, tmp_path):
    """:func:`lost_worker_checks.check_exactly_once_kafka_output_whole_after_a_lost_worker`
    through the Connect server."""
    if kafka_broker_kind != "noida":
        pytest.skip(f"{kafka_broker_kind} does not isolate aborted transactions (WriteToKafka "
                    "refuses --exactly_once there: tests/kafka/test_kafka_write.py)")
    checks.check_exactly_once_kafka_output_whole_after_a_lost_worker(
        two_workers, shared_dir, kafka, tmp_path, f"--spark_remote={cluster_connect_server.url}")
