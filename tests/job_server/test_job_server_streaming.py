"""Streaming jobs on the Spark job server.

Beam's client sends the TestStream (its events are in the proto) with ``--streaming``; the
server runs it with the SparkRunner's micro-batch loop. The panes (on time, then a late
refinement, accumulating) must be those the DirectRunner gives for the same pipeline.

A long streaming job submitted by a client that then exits keeps running; another client
reads its state, finds it in the job list, and cancels it: the state ends CANCELLED and the
micro-batch loop stops (no batch runs after the cancel). Drained instead, it takes no new
input and ends DONE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import apache_beam as beam
import grpc
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
from apache_beam.runners.runner import PipelineState
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger, window

from test_job_server import (  # noqa: F401 (fixture)
    _stops_growing,
    job_endpoint,
    portable_options,
)
from triggers.panes import DescribePanes

JobState = beam_job_api_pb2.JobState


def run_panes(options: PipelineOptions, output: str) -> list:
    """Run the TestStream pipeline; its panes, one JSON object per line, sorted."""

    def append_line(record):
        # A sink that works in streaming on any runner: one line per pane, appended.
        with open(output, "a") as lines:
            lines.write(json.dumps(record, sort_keys=True) + "\n")

    events = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("red", 1), 1),
                             window.TimestampedValue(("red", 2), 2)])
              .advance_watermark_to(15)
              .add_elements([window.TimestampedValue(("red", 5), 3)])  # late, within lateness
              .advance_watermark_to_infinity())
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline
         | events
         | beam.WindowInto(window.FixedWindows(10), allowed_lateness=60,
                           trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
         | beam.CombinePerKey(sum)
         | DescribePanes(keyed=True)
         | beam.Map(append_line))
    assert pipeline.run().wait_until_finish() == PipelineState.DONE
    if not os.path.exists(output):
        return []
    with open(output) as lines:
        return [json.loads(line) for line in sorted(lines)]


def test_test_stream_panes_match_the_direct_runner(job_endpoint, tmp_path):  # noqa: F811
    on_spark = run_panes(portable_options(job_endpoint, "--streaming"),
                         str(tmp_path / "spark.jsonl"))
    on_direct = run_panes(PipelineOptions(["--runner=DirectRunner", "--streaming"]),
                          str(tmp_path / "direct.jsonl"))
    assert [(pane["pane"]["timing"], pane["value"]) for pane in
            sorted(on_spark, key=lambda pane: pane["pane"]["index"])] == [
        ("ON_TIME", 3), ("LATE", 8)]
    assert on_spark == on_direct


#: A client that submits a long streaming job and goes away without waiting for it.
SUBMIT_AND_LEAVE = textwrap.dedent('''
    import sys

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    output, events, *flags = sys.argv[1:]


    def append_line(number):
        with open(output, "a") as lines:
            lines.write(f"{number}\\n")


    stream = TestStream()
    for number in range(int(events)):  # one micro-batch each: minutes of batches
        stream = stream.add_elements([TimestampedValue(number, number)])
    pipeline = beam.Pipeline(options=PipelineOptions(flags))
    _ = pipeline | stream | beam.Map(append_line)
    result = pipeline.run()
    print(result._job_id, flush=True)
''')
EVENTS = 5000


def submit_and_leave(job_endpoint: str, tmp_path) -> tuple:
    """Submit the long streaming job with Beam's own SparkRunner client (a job endpoint,
    ``--streaming``) from a client process that exits; returns (job id, its output file)."""
    output = tmp_path / "numbers.txt"
    script = tmp_path / "submit_and_leave.py"
    script.write_text(SUBMIT_AND_LEAVE)
    submitted = subprocess.run(
        [sys.executable, str(script), str(output), str(EVENTS), "--runner=SparkRunner",
         f"--job_endpoint={job_endpoint}", "--streaming"],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    return submitted.stdout.split()[-1], output


def wait_for_batches(output, service, request) -> None:
    """Wait until the job has written 3 numbers (3 batches), running all along."""
    deadline = time.monotonic() + 600
    while not (output.exists() and len(output.read_text().splitlines()) >= 3):
        assert service.GetState(request).state in (JobState.STOPPED, JobState.RUNNING)
        assert time.monotonic() < deadline, "no micro-batch ran within 10 minutes"
        time.sleep(0.5)


def test_a_streaming_job_outlives_its_client_and_cancel_stops_its_loop(
        job_endpoint, tmp_path):  # noqa: F811
    job_id, output = submit_and_leave(job_endpoint, tmp_path)

    # The client has exited; a new one finds the job running, its batches going on.
    with grpc.insecure_channel(job_endpoint) as channel:
        service = beam_job_api_pb2_grpc.JobServiceStub(channel)
        request = beam_job_api_pb2.GetJobStateRequest(job_id=job_id)
        wait_for_batches(output, service, request)
        assert service.GetState(request).state == JobState.RUNNING
        listed = {job.job_id: job.state for job in
                  service.GetJobs(beam_job_api_pb2.GetJobsRequest()).job_info}
        assert listed[job_id] == JobState.RUNNING

        cancelled = service.Cancel(beam_job_api_pb2.CancelJobRequest(job_id=job_id))
        assert cancelled.state == JobState.CANCELLED
        history = [event.state for event in service.GetStateStream(request)]
        assert history == [JobState.STOPPED, JobState.RUNNING, JobState.CANCELLING,
                           JobState.CANCELLED]
    # The loop stopped: no batch writes any more, long before the stream's end.
    assert _stops_growing(str(output)), "the cancelled streaming job kept running batches"
    numbers = [int(line) for line in output.read_text().splitlines()]
    assert 3 <= len(numbers) < EVENTS
    assert sorted(numbers) == list(range(len(numbers)))  # batches in order, none lost


def test_drain_through_the_job_server_stops_the_input_and_ends_done(
        job_endpoint, tmp_path):  # noqa: F811
    job_id, output = submit_and_leave(job_endpoint, tmp_path)
    with grpc.insecure_channel(job_endpoint) as channel:
        service = beam_job_api_pb2_grpc.JobServiceStub(channel)
        request = beam_job_api_pb2.GetJobStateRequest(job_id=job_id)
        wait_for_batches(output, service, request)
        drained = service.Drain(beam_job_api_pb2.DrainJobRequest(job_id=job_id))
        assert drained.state in (JobState.DRAINING, JobState.DONE)
        history = [event.state for event in service.GetStateStream(request)]
        assert history == [JobState.STOPPED, JobState.RUNNING, JobState.DRAINING,
                           JobState.DONE]
    # The source took no new input after the drain: the job ended long before the stream's
    # end, every element it took written once, in order.
    numbers = [int(line) for line in output.read_text().splitlines()]
    assert 3 <= len(numbers) < EVENTS
    assert sorted(numbers) == list(range(len(numbers)))
