"""The Spark job server, end to end through Beam's own portable client.

A real server (``python -m runners.spark.job_server --port 0``) runs in a subprocess on a
free loopback port for the whole module; pipelines are submitted with
``--runner=PortableRunner --job_endpoint=localhost:PORT`` (and Beam's ``--runner=SparkRunner``
with a job endpoint), read and write real files, and are checked by their output, their
states, their messages and their metrics.

DoFns here are defined inside the test functions: cloudpickle ships them by value, as it does
a user's ``__main__`` code; the server's executors never import this test module.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Iterator, List, Sequence

import apache_beam as beam
import grpc
import pytest
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
from apache_beam.runners.runner import PipelineState

from project import QUICK_JVM_OPTIONS, REPO

PROJECT_ROOT = str(REPO)
JobState = beam_job_api_pb2.JobState

pytestmark = pytest.mark.timeout(900)


#: The server's Spark: a SparkContext of its own on local[2].
LOCAL_SPARK = ("--spark_master_url", "local[2]", "--spark_conf", "spark.default.parallelism=2",
               *QUICK_JVM_OPTIONS)


@contextlib.contextmanager
def running_job_server(log_path: str, start_timeout: float = 180.0,
                       spark: Sequence[str] = LOCAL_SPARK) -> Iterator[str]:
    """Start the job server in a subprocess on a free port, on ``spark`` (its options);
    yield ``localhost:PORT``.

    Stops only that process (SIGTERM, then SIGKILL if it does not exit).
    """
    command = [sys.executable, "-m", "runners.spark.job_server", "--port", "0", *spark]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                                   stderr=log)
    try:
        endpoint = _read_endpoint(process, log_path, start_timeout)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def _read_endpoint(process: subprocess.Popen, log_path: str, start_timeout: float) -> str:
    deadline = time.monotonic() + start_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the job server exited ({process.returncode}); see {log_path}")
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            line = process.stdout.readline().decode()
            if line.startswith("Job server listening on "):
                return line.split()[-1]
    raise RuntimeError(f"the job server did not start within {start_timeout} s; see {log_path}")


@functools.lru_cache(maxsize=None)
def shared_job_server() -> str:
    """One server for every job server test module (started once, stopped at exit)."""
    log_path = os.path.join(tempfile.mkdtemp(prefix="job-server-test-"), "server.log")
    server = running_job_server(log_path)
    endpoint = server.__enter__()
    atexit.register(server.__exit__, None, None, None)
    return endpoint


@pytest.fixture(scope="session")
def job_endpoint() -> str:
    """``localhost:PORT`` of a job server running in a subprocess (see module doc)."""
    return shared_job_server()


@pytest.fixture(scope="module")
def job_service(job_endpoint):
    """A raw Job API stub on the server (what Beam's client uses underneath)."""
    channel = grpc.insecure_channel(job_endpoint)
    yield beam_job_api_pb2_grpc.JobServiceStub(channel)
    channel.close()


def portable_options(job_endpoint: str, *extra: str) -> PipelineOptions:
    return PipelineOptions(["--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
                            "--environment_type=LOOPBACK", *extra])


def read_lines(prefix: str) -> List[str]:
    directory, base = os.path.split(prefix)
    lines = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(base):
            with open(os.path.join(directory, name)) as handle:
                lines.extend(line.rstrip("\n") for line in handle)
    return lines


def state_history(job_service, job_id: str) -> List[int]:
    events = job_service.GetStateStream(beam_job_api_pb2.GetJobStateRequest(job_id=job_id))
    return [event.state for event in events]


WORDS = "the cat sat on the mat\nthe dog sat\n\nan end\n"
WORD_COUNTS = ["an: 1", "cat: 1", "dog: 1", "end: 1", "mat: 1", "on: 1", "sat: 2", "the: 3"]


@pytest.mark.parametrize("runner_flags", [
    ["--runner=PortableRunner", "--environment_type=LOOPBACK"],
    # Beam's own SparkRunner with a job endpoint: a plain client, no jar download.
    ["--runner=SparkRunner"],
], ids=["PortableRunner", "BeamSparkRunner"])
def test_beam_wordcount_runs_on_the_job_server(job_endpoint, tmp_path, runner_flags):
    source = tmp_path / "words.txt"
    source.write_text(WORDS)
    output = str(tmp_path / "counts")
    command = [sys.executable, "-m", "apache_beam.examples.wordcount",
               f"--input={source}", f"--output={output}", f"--job_endpoint={job_endpoint}",
               *runner_flags]
    completed = subprocess.run(command, cwd=str(tmp_path), capture_output=True, text=True,
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Job state changed to DONE" in completed.stderr
    assert sorted(read_lines(output)) == WORD_COUNTS


def test_project_pipeline_gives_the_direct_runners_output(job_endpoint, tmp_path):
    events = tmp_path / "game.jsonl"
    subprocess.run([sys.executable, "-m", "pipelines.generator", "--kind", "game",
                    "--events", "200", "--seed", "11", "--output", str(events)],
                   cwd=PROJECT_ROOT, check=True, capture_output=True, timeout=120)
    outputs = {}
    for name, flags in {
        "direct": ["--runner=DirectRunner"],
        "portable": ["--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
                     "--environment_type=LOOPBACK"],
    }.items():
        prefix = str(tmp_path / name)
        completed = subprocess.run(
            [sys.executable, "-m", "pipelines.team_scores", "--input", str(events),
             "--output", prefix, *flags],
            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
        assert completed.returncode == 0, completed.stderr[-3000:]
        outputs[name] = sorted(read_lines(prefix + ".jsonl"))
    assert outputs["portable"], "team_scores wrote no panes"
    assert outputs["portable"] == outputs["direct"]


def test_state_stream_messages_and_counters(job_endpoint, job_service, tmp_path):
    output = str(tmp_path / "evens")

    def keep_even(number):
        Metrics.counter("job_server_test", "seen").inc()
        if number % 2 == 0:
            Metrics.counter("job_server_test", "kept").inc()
            yield number

    pipeline = beam.Pipeline(options=portable_options(job_endpoint))
    _ = (pipeline | beam.Create(range(100)) | beam.FlatMap(keep_even)
         | beam.Map(str) | beam.io.WriteToText(output))
    result = pipeline.run()
    assert result.wait_until_finish() == PipelineState.DONE
    assert sorted(int(line) for line in read_lines(output)) == list(range(0, 100, 2))

    counters = {counter.key.metric.name: counter.committed
                for counter in result.metrics().query(
                    MetricsFilter().with_namespace("job_server_test"))["counters"]}
    assert counters == {"seen": 100, "kept": 50}

    # The state history replays for any later reader (the client that ran it is done).
    job_id = result._job_id
    assert state_history(job_service, job_id) == [
        JobState.STOPPED, JobState.RUNNING, JobState.DONE]
    listed = {job.job_id: job.state for job in
              job_service.GetJobs(beam_job_api_pb2.GetJobsRequest()).job_info}
    assert listed[job_id] == JobState.DONE


def test_a_failing_job_reports_the_users_error(job_endpoint, job_service):
    def explode(number):
        if number == 3:
            raise ValueError(f"number {number} is unlucky")
        return number

    pipeline = beam.Pipeline(options=portable_options(job_endpoint))
    _ = pipeline | beam.Create([1, 2, 3]) | beam.Map(explode)
    result = pipeline.run()
    with pytest.raises(RuntimeError, match="number 3 is unlucky"):
        result.wait_until_finish()
    assert result.state == PipelineState.FAILED

    messages = job_service.GetMessageStream(
        beam_job_api_pb2.JobMessagesRequest(job_id=result._job_id))
    errors = [m.message_response.message_text for m in messages
              if m.HasField("message_response")
              and m.message_response.importance == beam_job_api_pb2.JobMessage.JOB_MESSAGE_ERROR]
    assert any("ValueError: number 3 is unlucky" in text for text in errors), errors
    assert state_history(job_service, result._job_id)[-1] == JobState.FAILED


def test_jobs_run_side_by_side_and_cancel_stops_one(job_endpoint, job_service, tmp_path):
    heartbeat = str(tmp_path / "heartbeat")

    def beat_for_ten_minutes(number):
        import time as clock
        for _ in range(600):
            with open(heartbeat, "a") as beats:
                beats.write(".")
            clock.sleep(1)
        return number

    pipeline = beam.Pipeline(options=portable_options(job_endpoint))
    _ = pipeline | beam.Create([1]) | beam.Map(beat_for_ten_minutes)
    long_running = pipeline.run()
    while not os.path.exists(heartbeat):  # its Spark task is running
        assert not PipelineState.is_terminal(long_running.state), long_running.state
        time.sleep(0.5)

    # A second job on the same SparkContext runs to the end meanwhile.
    output = str(tmp_path / "meanwhile")
    pipeline = beam.Pipeline(options=portable_options(job_endpoint))
    _ = pipeline | beam.Create(["side by side"]) | beam.io.WriteToText(output)
    assert pipeline.run().wait_until_finish() == PipelineState.DONE
    assert read_lines(output) == ["side by side"]
    assert long_running.state == PipelineState.RUNNING

    long_running.cancel()
    assert long_running.state == PipelineState.CANCELLED
    assert state_history(job_service, long_running._job_id)[-2:] == [
        JobState.CANCELLING, JobState.CANCELLED]
    assert _stops_growing(heartbeat), "the cancelled job's task kept running"


def _stops_growing(path: str, attempts: int = 10) -> bool:
    """Whether the file stops growing within ``attempts`` checks, 3 s apart (a killed
    Python worker stops writing; Spark kills it a few seconds after the cancel)."""
    size = os.path.getsize(path)
    for _ in range(attempts):
        time.sleep(3)
        if os.path.getsize(path) == size:
            return True
        size = os.path.getsize(path)
    return False
