"""Failures a user can act on: their own exceptions, and pipelines the runner cannot run.

A user's exception reaches them as their own type and message, naming the transform, on
both runners. A pipeline the SparkRunner cannot run (an unbounded source that is neither a
splittable DoFn nor a TestStream, a transform of another SDK) is refused while planning,
naming the transform and the reason, before any Spark job starts.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import environments

from runners.spark.beam_internals import beam_runner_api_pb2, common_urns
from runners.spark.planning import execution_plan, support

from spark_fixtures import spark_session  # noqa: F401 (fixture)


class InventoryError(Exception):
    """A user-defined exception type with two arguments."""

    def __init__(self, message, item):
        super().__init__(message, item)
        self.item = item


def _explode(number):
    if number == 3:
        raise ValueError(f"cannot handle {number}")
    return number


def _short_of(item):
    raise InventoryError("out of stock", item)


def test_user_exception_keeps_type_message_and_transform(make_pipeline):
    with pytest.raises(ValueError) as raised:
        with make_pipeline() as p:
            p | beam.Create([1, 2, 3, 4]) | "Explode" >> beam.Map(_explode)
    message = str(raised.value)
    assert "cannot handle 3" in message
    assert "Explode" in message
    assert "Py4J" not in message and "org.apache.spark" not in message


def test_user_defined_exception_type_survives(make_pipeline):
    with pytest.raises(InventoryError) as raised:
        with make_pipeline() as p:
            p | beam.Create(["apples"]) | "CheckStock" >> beam.Map(_short_of)
    assert raised.value.args[1] == "apples"
    assert "out of stock" in str(raised.value) and "CheckStock" in str(raised.value)


def _last_job_id(spark_context) -> int:
    """Run a trivial job outside any job group and return its id (ids are sequential)."""
    spark_context.parallelize([0], 1).count()
    return max(spark_context.statusTracker().getJobIdsForGroup(None))


def _pipeline_with_a_java_step() -> beam_runner_api_pb2.Pipeline:
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([1]) | "JavaStep" >> beam.Map(lambda x: x)
    proto = pipeline.to_runner_api(
        default_environment=environments.EmbeddedPythonEnvironment.default())
    java = environments.DockerEnvironment.from_container_image("apache/beam_java17_sdk:2.77.0")
    proto.components.environments["java"].CopyFrom(java.to_runner_api(None))
    for transform in proto.components.transforms.values():
        if transform.unique_name.startswith("JavaStep"):
            transform.environment_id = "java"
    return proto


def test_transform_of_another_sdk_is_refused():
    with pytest.raises(execution_plan.UnsupportedPipelineError, match="'JavaStep.*another SDK"):
        support.check_supported(_pipeline_with_a_java_step(), streaming=False)


def _pipeline_with_a_primitive_unbounded_read() -> beam_runner_api_pb2.Pipeline:
    """A primitive Read making an unbounded PCollection, as a job server may receive one (a
    Python pipeline cannot make one: Beam cannot serialize a source that is neither a
    BoundedSource nor an UnboundedSource, and its DirectRunner cannot translate the Read)."""
    pipeline = beam.Pipeline()
    _ = pipeline | "ReadEndless" >> beam.Impulse() | beam.Map(str)
    proto = pipeline.to_runner_api(
        default_environment=environments.EmbeddedPythonEnvironment.default())
    for transform in proto.components.transforms.values():
        if transform.unique_name == "ReadEndless":
            transform.spec.urn = common_urns.deprecated_primitives.READ.urn
    for pcollection in proto.components.pcollections.values():
        pcollection.is_bounded = beam_runner_api_pb2.IsBounded.UNBOUNDED
    return proto


@pytest.mark.parametrize("streaming", [False, True])
def test_a_primitive_unbounded_read_is_refused_in_either_mode(streaming):
    proto = _pipeline_with_a_primitive_unbounded_read()
    options = PipelineOptions(streaming=streaming)
    assert support.runs_in_streaming(proto, options) is streaming
    with pytest.raises(execution_plan.UnsupportedPipelineError,
                       match="'ReadEndless'.*write the source as a splittable DoFn"):
        support.check_supported(proto, streaming)


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_an_unsupported_pipeline_is_refused_before_spark_runs(runner, spark_session):
    before = _last_job_id(spark_session.sparkContext)
    with pytest.raises(execution_plan.UnsupportedPipelineError, match="'JavaStep.*another SDK"):
        runner.run_portable_pipeline(_pipeline_with_a_java_step(), PipelineOptions())
    assert _last_job_id(spark_session.sparkContext) == before + 1


def test_bad_runner_options_are_rejected():
    from runners.spark import options as spark_options

    with pytest.raises(ValueError, match="--bundle_size=0"):
        spark_options.validated(PipelineOptions(["--bundle_size", "0"]))
    with pytest.raises(ValueError, match="KEY=VALUE"):
        spark_options.validated(PipelineOptions(["--spark_conf", "no-equals-sign"]))
