"""The Spark job server's Job API with a raw gRPC client: bad requests, environments,
clients that go away.

The server (a subprocess on a free loopback port, see ``test_job_server.running_job_server``)
must answer garbage and truncated messages with INVALID_ARGUMENT and keep serving; refuse a
pipeline of another SDK at Prepare; run the environments Beam's Python SDK sends (DOCKER,
PROCESS, EXTERNAL) in its own Python workers; and keep a job running after the client that
submitted it has disconnected.
"""

from __future__ import annotations

import sys
import time

import apache_beam as beam
import grpc
import pytest
from apache_beam.portability.api import (
    beam_job_api_pb2,
    beam_job_api_pb2_grpc,
    beam_runner_api_pb2,
    endpoints_pb2,
)
from google.protobuf import struct_pb2

from test_job_server import job_endpoint, read_lines  # noqa: F401 (fixture)

JobState = beam_job_api_pb2.JobState
TERMINAL = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)
PREPARE = "/org.apache.beam.model.job_management.v1.JobService/Prepare"
RUN = "/org.apache.beam.model.job_management.v1.JobService/Run"

pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def channel(job_endpoint):  # noqa: F811
    with grpc.insecure_channel(job_endpoint) as opened:
        yield opened


def job_service(channel) -> beam_job_api_pb2_grpc.JobServiceStub:
    return beam_job_api_pb2_grpc.JobServiceStub(channel)


def write_pipeline(output: str, environment: beam_runner_api_pb2.Environment):
    """The proto of Create -> WriteToText, every environment replaced by ``environment``
    (its capabilities kept when ``environment`` has none)."""
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create(["alpha", "beta"]) | beam.io.WriteToText(output)
    proto = pipeline.to_runner_api()
    for env in proto.components.environments.values():
        capabilities = list(environment.capabilities) or list(env.capabilities)
        env.CopyFrom(environment)
        del env.capabilities[:]
        env.capabilities.extend(capabilities)
    return proto


def prepare_request(pipeline, **options) -> beam_job_api_pb2.PrepareJobRequest:
    struct = struct_pb2.Struct()
    for name, value in options.items():
        struct[f"beam:option:{name}:v1"] = value
    return beam_job_api_pb2.PrepareJobRequest(
        job_name="raw", pipeline=pipeline, pipeline_options=struct)


def docker(image: str) -> beam_runner_api_pb2.Environment:
    return beam_runner_api_pb2.Environment(
        urn="beam:env:docker:v1",
        payload=beam_runner_api_pb2.DockerPayload(container_image=image).SerializeToString())


#: What Beam's Python SDK puts in its environments' capabilities: its SDK, named by this
#: Python's minor version and Beam's version (the server runs the same interpreter).
SDK = f"apache/beam_python{sys.version_info[0]}.{sys.version_info[1]}_sdk:{beam.__version__}"
PYTHON_CAPABILITIES = [f"beam:version:sdk_base:{SDK}", "beam:combinefn:packed_python:v1"]
PYTHON_ENVIRONMENTS = {
    "DOCKER": docker(SDK),
    "PROCESS": beam_runner_api_pb2.Environment(
        urn="beam:env:process:v1",
        payload=beam_runner_api_pb2.ProcessPayload(command="/opt/apache/beam/boot")
        .SerializeToString(), capabilities=PYTHON_CAPABILITIES),
    "EXTERNAL": beam_runner_api_pb2.Environment(
        urn="beam:env:external:v1",
        payload=beam_runner_api_pb2.ExternalPayload(
            endpoint=endpoints_pb2.ApiServiceDescriptor(url="localhost:1")).SerializeToString(),
        capabilities=PYTHON_CAPABILITIES),
}


def assert_invalid(call, request, *fragments: str) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value
    for fragment in fragments:
        assert fragment in raised.value.details(), raised.value.details()


def test_garbage_and_truncated_messages_are_invalid_arguments(channel, tmp_path):
    prepare_bytes = channel.unary_unary(PREPARE)  # raw bytes in, raw bytes out
    valid = prepare_request(write_pipeline(str(tmp_path / "out"), PYTHON_ENVIRONMENTS["DOCKER"]))
    serialized = valid.SerializeToString()

    assert_invalid(prepare_bytes, b"\xff\xfe\x00 not a protobuf \x07", "malformed")
    assert_invalid(prepare_bytes, serialized[: len(serialized) // 2], "malformed")
    assert_invalid(prepare_bytes, serialized[:-3], "malformed")
    assert_invalid(channel.unary_unary(RUN), b"\x0a\xff\xff\xff\xff\x0f", "malformed")

    # Still serving: a listing, and the untruncated request is accepted.
    service = job_service(channel)
    service.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=60)
    response = beam_job_api_pb2.PrepareJobResponse.FromString(prepare_bytes(serialized))
    assert response.preparation_id
    assert service.GetState(beam_job_api_pb2.GetJobStateRequest(
        job_id=response.preparation_id)).state == JobState.STOPPED


def test_pipelines_the_server_cannot_run_are_refused_at_prepare(channel, tmp_path):
    service = job_service(channel)
    java = write_pipeline(str(tmp_path / "out"), docker("apache/beam_java17_sdk:2.77.0"))
    for environment in java.components.environments.values():
        del environment.capabilities[:]
        environment.capabilities.append("beam:version:sdk_base:apache/beam_java17_sdk:2.77.0")
    assert_invalid(service.Prepare, prepare_request(java), "apache/beam_java17_sdk",
                   "Python SDK")
    assert_invalid(service.Prepare, prepare_request(beam_runner_api_pb2.Pipeline()),
                   "no transforms")
    python = write_pipeline(str(tmp_path / "out"), PYTHON_ENVIRONMENTS["DOCKER"])
    assert_invalid(service.Prepare, prepare_request(python, bundle_size="many"),
                   "--bundle_size='many'")
    # Built by another Python (3.9: below any we support): Beam's harness would refuse it in
    # every task of the job.
    older = write_pipeline(str(tmp_path / "out"), beam_runner_api_pb2.Environment(
        urn="beam:env:process:v1", capabilities=[
            f"beam:version:sdk_base:apache/beam_python3.9_sdk:{beam.__version__}"]))
    assert_invalid(service.Prepare, prepare_request(older),
                   f"built by apache/beam_python3.9_sdk:{beam.__version__}",
                   f"this job server runs {SDK}")
    service.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=60)


def test_unknown_jobs_are_not_found(channel):
    service = job_service(channel)
    with pytest.raises(grpc.RpcError) as raised:
        service.GetState(beam_job_api_pb2.GetJobStateRequest(job_id="no-such-job"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-job" in raised.value.details()


def test_describes_the_options_a_job_may_set(channel):
    described = job_service(channel).DescribePipelineOptions(
        beam_job_api_pb2.DescribePipelineOptionsRequest())
    types = {option.name: option.type for option in described.options}
    assert types["spark_parallelism"] == beam_job_api_pb2.PipelineOptionType.INTEGER
    assert types["bundle_size"] == beam_job_api_pb2.PipelineOptionType.INTEGER
    assert "spark_conf" not in types  # the server's SparkContext settings, not a job's


@pytest.mark.parametrize("environment", sorted(PYTHON_ENVIRONMENTS))
def test_a_job_outlives_its_client(job_endpoint, tmp_path, environment):  # noqa: F811
    output = str(tmp_path / "out")
    pipeline = write_pipeline(output, PYTHON_ENVIRONMENTS[environment])
    with grpc.insecure_channel(job_endpoint) as submitting:
        service = job_service(submitting)
        prepared = service.Prepare(prepare_request(pipeline, bundle_size="1"), timeout=60)
        job_id = service.Run(beam_job_api_pb2.RunJobRequest(
            preparation_id=prepared.preparation_id), timeout=60).job_id
    # The submitting channel is closed; a new client finds the job and its end.
    with grpc.insecure_channel(job_endpoint) as watching:
        service = job_service(watching)
        state = service.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job_id)).state
        while state not in TERMINAL:
            time.sleep(0.5)
            state = service.GetState(beam_job_api_pb2.GetJobStateRequest(job_id=job_id)).state
        assert state == JobState.DONE
        stored = service.GetPipeline(beam_job_api_pb2.GetJobPipelineRequest(job_id=job_id))
        assert stored.pipeline == pipeline
    assert sorted(read_lines(output)) == ["alpha", "beta"]


def test_a_taken_port_is_refused_before_spark_starts():
    """The port is checked first: a taken one fails at once, naming it, and no SparkContext
    (no JVM) is created for a server that cannot serve."""
    import socket

    from runners.spark.job_server.server import SparkJobServer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = SparkJobServer(port=port, spark_master_url="local[1]")
        started = time.monotonic()
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}.*pick another"):
            server.start()
        assert time.monotonic() - started < 5
        assert server._backend is None
