"""Operating a streaming job on the SparkRunner: draining it, and watching it while it runs.

A drain takes effect between two micro-batches, so the tests drain from a progress listener
(called after every batch, in the run's thread) at a known batch. The panes a drained run
gives are Beam's at the end of input: the DirectRunner's on the same TestStream cut where
the drain took effect and followed by the watermark's advance to the end of time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import threading
import time
from typing import Any, Dict, List

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing import test_stream as streams
from apache_beam.transforms.trigger import AccumulationMode, AfterCount, AfterWatermark
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from project import PYTHON, QUICK_JVM_OPTIONS, REPO
from runners.spark import SparkRunner
from connect_fixtures import no_classic_spark, spark_connect  # noqa: F401 (fixtures)
from spark_fixtures import spark_session  # noqa: F401 (fixture)
from triggers.panes import DescribePanes

#: The listener drains after this batch (0-based): the 4th event has been delivered.
DRAIN_AFTER_BATCH = 3
def _events(drained: bool = False) -> streams.TestStream:
    """One event per batch; ``drained``: the stream cut after the event of batch
    :data:`DRAIN_AFTER_BATCH`, the watermark then at the end of time."""
    stream = (streams.TestStream()
              .add_elements([TimestampedValue(("a", 1), 1)])
              .add_elements([TimestampedValue(("b", 2), 12)])
              .advance_watermark_to(10)
              .add_elements([TimestampedValue(("a", 5), 15)]))
    if drained:
        return stream.advance_watermark_to_infinity()
    return (stream.add_elements([TimestampedValue(("c", 7), 25)])
            .advance_watermark_to(30)
            .add_elements([TimestampedValue(("a", 9), 35)])
            .advance_watermark_to_infinity())


class _CountPanes(beam.DoFn):
    def process(self, record):
        Metrics.counter("drain_test", "panes").inc()
        yield record


def _panes(pipeline: beam.Pipeline, stream: streams.TestStream) -> Any:
    """A windowed sum with an early pane per element, accumulating; every pane described."""
    return (pipeline
            | stream
            | beam.WindowInto(FixedWindows(10), trigger=AfterWatermark(early=AfterCount(1)),
                              accumulation_mode=AccumulationMode.ACCUMULATING)
            | "Sum" >> beam.CombinePerKey(sum)
            | DescribePanes()
            | "Count" >> beam.ParDo(_CountPanes()))


class _AppendTo(beam.DoFn):
    """Appends each described pane to a JSON-lines file (a real sink, the same in every run
    of the pipeline, so a restart finds its checkpoint's pipeline)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, record):
        with open(self._path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(record, sort_keys=True) + "\n")


def _read(path: Any) -> List[Dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as sink:
        return sorted((json.loads(line) for line in sink), key=json.dumps)


def _direct_panes_at_end_of_input(path: Any) -> List[Dict[str, Any]]:
    with beam.Pipeline(runner="DirectRunner",
                       options=PipelineOptions(["--streaming"])) as pipeline:
        _panes(pipeline, _events(drained=True)) | beam.ParDo(_AppendTo(str(path)))
    panes = _read(path)
    assert panes, "the DirectRunner gave no pane"
    return panes


def _drain_at(batch: int, holder: Dict[str, Any]):
    def listener(progress: Dict[str, Any]) -> None:
        holder.setdefault("batches", []).append(progress["batch"])
        if progress["batch"] == batch:
            # pipeline.run() returns once the run has started: its result may come later.
            assert holder["started"].wait(60), "pipeline.run() did not return"
            holder["drain_state"] = holder["result"].drain(0)
    return listener


@pytest.fixture(params=["classic", "connect"])
def any_session(request):
    """The classic test session, or the Connect one (classic Spark then unusable)."""
    return request.getfixturevalue("spark_session" if request.param == "classic"
                                   else "spark_connect")


def test_a_drained_test_stream_job_gives_the_panes_of_the_end_of_input_and_a_restart_emits_nothing(
        any_session, tmp_path):
    spark_session = any_session
    expected = _direct_panes_at_end_of_input(tmp_path / "direct.jsonl")
    sink = str(tmp_path / "spark.jsonl")
    options = PipelineOptions(["--streaming", f"--checkpoint_dir={tmp_path / 'checkpoints'}"])
    holder: Dict[str, Any] = {"started": threading.Event()}
    pipeline = beam.Pipeline(runner=SparkRunner(spark_session, progress_listeners=[
        _drain_at(DRAIN_AFTER_BATCH, holder)]), options=options)
    _panes(pipeline, _events()) | beam.ParDo(_AppendTo(sink))
    result = holder["result"] = pipeline.run()
    holder["started"].set()
    assert result.wait_until_finish() == PipelineState.DONE
    assert holder["drain_state"] == PipelineState.DRAINING
    # The drain took effect after batch 3: every further batch only settles (no new input).
    assert holder["batches"][-1] > DRAIN_AFTER_BATCH
    assert _read(sink) == expected
    last_windows = {record["window"]["start"] for record in expected if record["pane"]["is_last"]}
    assert last_windows == {0.0, 10.0}, "every open window fires its final pane"

    # Started again on its checkpoint, the drained job is at its end: not one pane.
    restarted = beam.Pipeline(runner=SparkRunner(spark_session), options=options)
    _panes(restarted, _events()) | beam.ParDo(_AppendTo(sink))
    assert restarted.run().wait_until_finish() == PipelineState.DONE
    assert _read(sink) == expected


def _pane_count(result: Any) -> int:
    return sum(counter.committed for counter in result.metrics().query(
        MetricsFilter().with_name("panes"))["counters"])


def test_metrics_and_progress_answer_while_the_job_runs(spark_session):  # noqa: F811
    seen: List[Dict[str, Any]] = []
    holder: Dict[str, Any] = {}
    run_thread: List[Any] = []

    def listener(progress: Dict[str, Any]) -> None:
        run_thread.append(threading.current_thread())
        seen.append({"progress": progress, "state": holder["result"].state,
                     "panes": _pane_count(holder["result"])})

    pipeline = beam.Pipeline(runner=SparkRunner(spark_session),
                             options=PipelineOptions(["--streaming"]))
    _panes(pipeline, _events())
    result = holder["result"] = pipeline.run()
    result.add_listener(listener)
    assert result.wait_until_finish() == PipelineState.DONE
    assert seen, "the listener was never called"
    assert all(thread is not threading.main_thread() for thread in run_thread)
    # Read while the run went on: the pane counter grows batch after batch.
    running = [entry for entry in seen if entry["state"] == PipelineState.RUNNING]
    assert len(running) == len(seen)
    counts = [entry["panes"] for entry in running]
    assert counts == sorted(counts) and counts[-1] > counts[0] > 0
    assert counts[-1] == _pane_count(result)
    # Each batch's progress: the step's watermarks, lag, input rate and state size.
    progress = seen[-1]["progress"]
    assert progress["batch"] == len(seen) - 1 + seen[0]["progress"]["batch"]
    assert {"Sum/GroupByKey"} <= set(progress["output_watermarks"])
    assert {"rate", "watermark_lag_seconds", "state_keys", "state_bytes"} <= set(progress)
    gauges = result.metrics().query(MetricsFilter().with_name("state_keys"))["gauges"]
    assert [gauge.key.step for gauge in gauges] == ["Sum/GroupByKey"]


def test_a_failing_listener_is_logged_and_the_job_goes_on(spark_session, caplog):  # noqa: F811
    calls: List[int] = []

    def broken(progress: Dict[str, Any]) -> None:
        calls.append(progress["batch"])
        raise RuntimeError("listener bug")

    pipeline = beam.Pipeline(runner=SparkRunner(spark_session, progress_listeners=[broken]),
                             options=PipelineOptions(["--streaming"]))
    _panes(pipeline, _events(drained=True))
    with caplog.at_level("WARNING", logger="runners.spark.streaming.batch_report"):
        assert pipeline.run().wait_until_finish() == PipelineState.DONE
    assert len(calls) >= 5, calls
    assert "listener" in caplog.text and "listener bug" in caplog.text


def test_a_batch_run_has_no_progress_listeners(spark_session):  # noqa: F811
    pipeline = beam.Pipeline(runner=SparkRunner(spark_session))
    pipeline | beam.Create([1, 2])
    result = pipeline.run()
    try:
        with pytest.raises(TypeError, match="--streaming run"):
            result.add_listener(print)
    finally:
        assert result.wait_until_finish() == PipelineState.DONE


#: A driver that runs a long TestStream job with --on_signal=drain and prints its end state.
_SIGNALLED_DRIVER = textwrap.dedent('''
    import sys

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from runners.spark import SparkRunner

    output, events, *flags = sys.argv[1:]


    def append_line(number):
        with open(output, "a") as lines:
            lines.write(f"{number}\\n")


    stream = TestStream()
    for number in range(int(events)):  # one micro-batch each: minutes of batches
        stream = stream.add_elements([TimestampedValue(number, number)])
    pipeline = beam.Pipeline(runner=SparkRunner(), options=PipelineOptions(flags))
    _ = pipeline | stream | beam.Map(append_line)
    print("END", pipeline.run().wait_until_finish(), flush=True)
''')
#: Events of the signalled job: far more batches than the test waits for.
_SIGNALLED_EVENTS = 5000


def test_sigterm_drains_a_job_run_with_on_signal_drain(tmp_path):
    output = tmp_path / "numbers.txt"
    script = tmp_path / "driver.py"
    script.write_text(_SIGNALLED_DRIVER)
    driver = subprocess.Popen(
        [PYTHON, str(script), str(output), str(_SIGNALLED_EVENTS), "--streaming",
         "--on_signal=drain", "--spark_master_url=local[1]", *QUICK_JVM_OPTIONS],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (output.exists() and len(output.read_text().splitlines()) >= 3):
            assert driver.poll() is None, driver.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no micro-batch ran within 4 minutes"
            time.sleep(0.2)
        driver.send_signal(signal.SIGTERM)
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, stderr[-3000:]
    assert "END DONE" in stdout
    assert "SIGTERM: draining the pipeline" in stderr
    numbers = [int(line) for line in output.read_text().splitlines()]
    assert 3 <= len(numbers) < _SIGNALLED_EVENTS  # no new input after the signal
    assert sorted(numbers) == list(range(len(numbers)))
