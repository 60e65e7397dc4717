"""The SparkRunner's streaming loop itself: state collection, timers, its own metrics.

These tests observe the runner (its ``spark_streaming`` metrics), so they run on the
SparkRunner only; the model tests (test_triggers.py, test_lateness.py, ...) prove the same
panes as the DirectRunner on both runners.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from spark_fixtures import spark_session  # noqa: F401 (fixture)

pytestmark = pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)

NAMESPACE = "spark_streaming"


def loop_metric(result, name, step=None):
    query = MetricsFilter().with_namespace(NAMESPACE).with_name(name)
    if step is not None:
        query = query.with_step(step)
    results = result.metrics().query(query)
    return results["counters"] + results["gauges"] + results["distributions"]


def test_state_grows_with_a_burst_and_is_collected_once_windows_expire(runner, tmp_path):
    """A burst over 30 keys and 3 windows fills the GroupByKey's state; each window's state
    is collected once the watermark passes its end + the allowed lateness (5 s), so the state
    comes back down to nothing before the stream ends (the loop stops after 6 batches, at
    watermark 36). Measured per batch (``--streaming_report``): keys and bytes of state."""
    burst = [TimestampedValue((f"key-{n}", n), 10 * window + 1)
             for n in range(30) for window in range(3)]
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements(burst)
              .advance_watermark_to(12)   # [0, 10) fires; kept for late data until 15
              .advance_watermark_to(16)   # [0, 10) expired
              .advance_watermark_to(26)   # [10, 20) fired and expired
              .advance_watermark_to(36))  # [20, 30) fired and expired: nothing is left
    report = tmp_path / "report.jsonl"
    options = PipelineOptions(streaming=True, max_batches=6, streaming_report=str(report))
    pipeline = beam.Pipeline(runner=runner, options=options)
    _ = (pipeline | stream | beam.WindowInto(FixedWindows(10), allowed_lateness=5)
         | "Group" >> beam.GroupByKey() | beam.MapTuple(lambda key, values: (key, sum(values))))
    result = pipeline.run()
    result.wait_until_finish()
    batches = [json.loads(line) for line in report.read_text().splitlines()]
    keys = [batch["state_keys"]["Group"] for batch in batches]
    size = [batch["state_bytes"]["Group"] for batch in batches]
    assert keys == [0, 30, 30, 30, 30, 0]
    # Bytes peak with the burst and shrink as each window fires and expires, down to the
    # empty per-partition records (a few bytes each).
    assert size[1] == max(size)
    assert size[1] > size[2] > size[3] > size[4] > size[5]
    assert size[5] < 20 < size[4]
    assert size[1] > 30 * 3 * 10  # every (key, window) held something
    final_keys, = [m.committed.value for m in loop_metric(result, "state_keys", "Group")]
    final_bytes, = [m.committed.value for m in loop_metric(result, "state_bytes", "Group")]
    assert (final_keys, final_bytes) == (0, size[5])
    peak, = [m.committed for m in loop_metric(result, "state_keys_per_batch", "Group")]
    assert peak.max == 30
    batches_run, = [m.committed for m in loop_metric(result, "batches")]
    assert batches_run == 6


class BufferUntilTimers(beam.DoFn):
    """Buffers values per key; an event-time timer flushes them at 10, a processing-time
    timer 5 s after the first value flushes an early count."""

    BUFFER = userstate.BagStateSpec("buffer", beam.coders.VarIntCoder())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)
    EARLY = userstate.TimerSpec("early", TimeDomain.REAL_TIME)

    def process(self, element, buffer=beam.DoFn.StateParam(BUFFER),
                flush=beam.DoFn.TimerParam(FLUSH), early=beam.DoFn.TimerParam(EARLY)):
        _, value = element
        if not list(buffer.read()):
            early.set(5)  # the TestStream clock starts at 0
        buffer.add(value)
        flush.set(10)

    @userstate.on_timer(EARLY)
    def on_early(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        yield key, "early", sorted(buffer.read())

    @userstate.on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        yield key, "flush", sorted(buffer.read())
        buffer.clear()


def test_stateful_dofn_timers_fire_across_batches(runner):
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([TimestampedValue(("a", 1), 1)])
              .add_elements([TimestampedValue(("a", 2), 2), TimestampedValue(("b", 7), 2)])
              .advance_processing_time(6)        # early timers (set at 5) fire
              .add_elements([TimestampedValue(("a", 3), 3)])
              .advance_watermark_to(12)          # flush timers (at 10) fire
              .advance_watermark_to_infinity())
    options = PipelineOptions(streaming=True)
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        fired = pipeline | stream | beam.ParDo(BufferUntilTimers())
        assert_that(fired, equal_to([
            ("a", "early", [1, 2]), ("b", "early", [7]),
            ("a", "flush", [1, 2, 3]), ("b", "flush", [7]),
        ]))


def test_bounded_pipeline_in_streaming_ends_by_itself(runner):
    """--streaming on bounded input: one batch reads it all, the watermark reaches the end
    of time and the job finishes on its own."""
    options = PipelineOptions(streaming=True)
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        doubled = pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda x: 2 * x)
        assert_that(doubled, equal_to([2, 4, 6]))


@pytest.mark.parametrize("options, message", [
    ({"streaming": True, "max_batches": 0}, "--max_batches=0"),
    ({"streaming": True, "checkpoint_interval_batches": 0}, "--checkpoint_interval_batches=0"),
    ({"checkpoint_dir": "checkpoints"}, "--checkpoint_dir=checkpoints: checkpoints are for "
                                        "--streaming"),
])
def test_invalid_loop_options_are_refused(runner, options, message):
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(**options))
    _ = pipeline | beam.Create([1])
    with pytest.raises(ValueError, match=message):
        pipeline.run()
