"""Ordinary Beam pipelines, written as Beam's own tests write them, give on the SparkRunner
what they give on the DirectRunner.

* TestStream and unbounded sources without ``--streaming``: the runner switches to
  streaming by itself, as the DirectRunner does, and says so once.
* Reshuffle keeps each element's timestamp, windows and pane exactly.
* Metrics of every kind, updated in several bundles, tasks and stages, are merged as Beam
  merges them.
"""

from __future__ import annotations

import logging

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline, test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer

SWITCH_LOGGER = "runners.spark.support"
SWITCH_MESSAGE = "without --streaming"


def plain_test_pipeline(runner) -> test_pipeline.TestPipeline:
    """A TestPipeline as a Beam user writes it: no --streaming."""
    return test_pipeline.TestPipeline(runner=runner, options=PipelineOptions(), blocking=True)


def switch_lines(caplog) -> list:
    return [record.getMessage() for record in caplog.records
            if record.name == SWITCH_LOGGER and SWITCH_MESSAGE in record.getMessage()]


class BufferUntilWindowEnd(beam.DoFn):
    """Buffers each key's values in state and emits them when the watermark passes the end
    of their window (an event-time timer)."""

    BUFFER = BagStateSpec("buffer", VarIntCoder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, element, window=beam.DoFn.WindowParam,
                buffer=beam.DoFn.StateParam(BUFFER), flush=beam.DoFn.TimerParam(FLUSH)):
        buffer.add(element[1])
        flush.set(window.end)

    @on_timer(FLUSH)
    def flushed(self, key=beam.DoFn.KeyParam, window=beam.DoFn.WindowParam,
                buffer=beam.DoFn.StateParam(BUFFER)):
        yield key, sorted(buffer.read()), float(window.start)
        buffer.clear()


def test_a_test_stream_runs_without_the_streaming_flag(runner, runner_name, caplog):
    events = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("a", 1), 1),
                             window.TimestampedValue(("a", 2), 2)])
              .advance_watermark_to(5)
              .add_elements([window.TimestampedValue(("a", 3), 3),
                             window.TimestampedValue(("b", 4), 12)])
              .advance_watermark_to(20)
              .advance_watermark_to_infinity())
    with caplog.at_level(logging.INFO, logger=SWITCH_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            flushed = (pipeline
                       | events
                       | beam.WindowInto(window.FixedWindows(10))
                       | beam.ParDo(BufferUntilWindowEnd()))
            assert_that(flushed, equal_to([("a", [1, 2, 3], 0.0), ("b", [4], 10.0)]))
    if runner_name == "SparkRunner":
        lines = switch_lines(caplog)
        assert len(lines) == 1, lines
        assert "TestStream" in lines[0]


def test_an_unbounded_source_runs_without_the_streaming_flag(runner, runner_name, caplog):
    # Every firing time is in the past: PeriodicImpulse emits them at once, then ends.
    with caplog.at_level(logging.INFO, logger=SWITCH_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            ticks = (pipeline
                     | PeriodicImpulse(start_timestamp=1_000_000, stop_timestamp=1_000_005,
                                       fire_interval=1)
                     | beam.Map(float))
            assert_that(ticks, equal_to([1_000_000.0 + offset for offset in range(5)]))
    if runner_name == "SparkRunner":
        lines = switch_lines(caplog)
        assert len(lines) == 1, lines
        assert "unbounded PCollection" in lines[0]


def test_a_bounded_pipeline_stays_in_batch_without_a_word(runner, runner_name, caplog):
    with caplog.at_level(logging.INFO, logger=SWITCH_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            assert_that(pipeline | beam.Create([1, 2]) | beam.Map(str), equal_to(["1", "2"]))
    assert switch_lines(caplog) == []



def test_a_legacy_unbounded_source_runs_without_the_streaming_flag(runner, runner_name, caplog):
    from apache_beam.io.unbounded_source import UnboundedCountingSource  # Beam's test source

    with caplog.at_level(logging.INFO, logger=SWITCH_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            counted = pipeline | beam.io.Read(UnboundedCountingSource(6))
            assert_that(counted, equal_to(list(range(6))))
    if runner_name == "SparkRunner":
        assert len(switch_lines(caplog)) == 1
