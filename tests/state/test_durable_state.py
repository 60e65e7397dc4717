"""Where keyed state lives: executor-side stores that go with their run, a checkpoint
location named as Beam names storage, and no cluster run without one.

The cluster itself is in ``tests/cluster/test_spark_cluster_streaming.py``; these run on the
test session (``local[2]``) or need no Spark at all.
"""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as streams
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from runners.spark.options import is_local_master
from runners.spark.planning import execution_plan
from runners.spark.state.storage.filesystems import DurableStorage, StorageError
from runners.spark.state.store import RUN_DIRECTORY_PREFIX
from runners.spark.streaming.loop import check_durable_state

from cluster_fixtures import s3_bucket, s3_server  # noqa: F401 (fixtures)
from spark_fixtures import spark_session  # noqa: F401 (fixture)


def test_a_checkpoint_location_no_filesystem_serves_is_refused_naming_the_option():
    with pytest.raises(StorageError) as error:
        DurableStorage.open("nosuchscheme://bucket/checkpoints")
    message = str(error.value)
    assert "--checkpoint_dir=nosuchscheme://bucket/checkpoints" in message
    assert "'nosuchscheme://'" in message and "apache-beam[aws]" in message


def test_a_local_checkpoint_location_is_made_absolute_and_must_be_a_directory(tmp_path,
                                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert DurableStorage.open("checkpoints").root == str(tmp_path / "checkpoints")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(StorageError, match="a-file: not a directory"):
        DurableStorage.open("a-file")


def test_state_files_on_s3_round_trip_through_one_client_per_set_of_options(s3_bucket):
    """Beam's S3 filesystem made a boto3 client for every operation (~0.1 s each, on a
    server on loopback); the runner gives every Beam S3 client of one set of options the
    same boto3 client, and a client of other options one of its own."""
    from apache_beam.io.aws.clients.s3.boto3_client import Client

    storage = DurableStorage.open(f"s3://{s3_bucket.name}/checkpoints",
                                  PipelineOptions(s3_bucket.options))
    path = storage.join("state", "step", "00001.delta")
    storage.write(path, b"rows")
    assert storage.read(path) == b"rows" and storage.exists(path)
    assert storage.list(storage.join("state")) == [path]
    storage.delete([path])
    assert not storage.exists(path)
    assert s3_bucket.keys("checkpoints/") == []

    options = PipelineOptions(s3_bucket.options)
    first, second = Client(options), Client(options)
    other = Client(PipelineOptions(s3_bucket.options + ["--s3_region_name=eu-west-1"]))
    assert first.client is second.client and other.client is not first.client
    assert other.client.meta.region_name == "eu-west-1"


def _keyed_plan():
    pipeline = beam.Pipeline(options=PipelineOptions(streaming=True))
    _ = (pipeline | streams.TestStream().add_elements([("k", 1)])
         | beam.WindowInto(FixedWindows(10)) | "Sum" >> beam.CombinePerKey(sum))
    return execution_plan.plan(execution_plan.pipeline_proto(pipeline, pipeline.options),
                               streaming=True)


def test_a_cluster_run_with_keyed_state_needs_a_checkpoint_location(tmp_path):
    plan = _keyed_plan()
    for master in ("spark://127.0.0.1:7077", "yarn", "k8s://https://api:6443",
                   "local-cluster[2,1,1024]"):
        where = f"classic Spark ({master})"
        with pytest.raises(ValueError) as error:
            check_durable_state(is_local_master(master), where, plan, None)
        assert "--checkpoint_dir" in str(error.value) and master in str(error.value)
        assert "Sum/" in str(error.value)
        # With a checkpoint location it runs.
        check_durable_state(False, where, plan, DurableStorage.open(str(tmp_path)))
    check_durable_state(True, "classic Spark (local[2])", plan, None)  # one executor


class SeeStores(beam.DoFn):
    """Records, in a file, the run directories of state on the executor that runs it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def process(self, element):
        with open(self.path, "a", encoding="utf-8") as seen:
            for directory in os.environ["SPARK_LOCAL_DIRS"].split(","):
                for name in os.listdir(directory):
                    if name.startswith(RUN_DIRECTORY_PREFIX):
                        seen.write(os.path.join(directory, name) + "\n")
        yield element


def _stores_left(spark_session):
    def look(_):
        found = []
        for directory in os.environ["SPARK_LOCAL_DIRS"].split(","):
            found += [name for name in os.listdir(directory)
                      if name.startswith(RUN_DIRECTORY_PREFIX)]
        return found

    return sorted(set(spark_session.sparkContext.parallelize([0], 1).flatMap(look).collect()))


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_a_run_removes_its_stores_from_the_executors_when_it_ends(runner, spark_session,
                                                                   tmp_path):
    before = _stores_left(spark_session)
    seen = tmp_path / "seen.txt"
    stream = (streams.TestStream()
              .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2)])
              .advance_watermark_to_infinity())
    with beam.Pipeline(runner=runner, options=PipelineOptions(streaming=True)) as pipeline:
        _ = (pipeline | stream | beam.WindowInto(FixedWindows(10))
             | "Sum" >> beam.CombinePerKey(sum) | beam.ParDo(SeeStores(str(seen))))
    during = set(seen.read_text().split())
    assert during, "the keyed step kept its stores under the executor's local directory"
    assert _stores_left(spark_session) == before  # the run's own directory is gone
