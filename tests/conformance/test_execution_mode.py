"""Batch or streaming without ``--streaming``: the runner chooses as Beam 2.77's DirectRunner
chooses its engine, and gives the DirectRunner's result.

* A TestStream runs in streaming; one INFO line of ``runners.spark.planning.support`` says so.
* A pipeline whose unbounded PCollections come from splittable DoFns (PeriodicImpulse, an
  ``UnboundedSource`` read) runs in batch, as the DirectRunner runs it on its FnApiRunner:
  the splittable DoFn runs to its end before the steps after it, so a GroupByKey sees its
  whole input at once, however the clock's ticks fall. One INFO line says so, and that
  ``--streaming`` runs it in micro-batches. Beam's ``CombineGlobally`` cases on a
  PeriodicImpulse in real time (``combiners_test.CombineGloballyTest``) give one pane, run
  after run, on a cold Spark as on a warm one.
* With ``--streaming`` the SparkRunner runs such a pipeline in micro-batches (the DirectRunner
  2.77 ignores the flag and runs it in batch; with every tick in the past, as here, the
  result is the same).
* A bounded pipeline stays in batch without a word.
"""

from __future__ import annotations

import json
import logging
import time

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline, test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window
from apache_beam.transforms.periodicsequence import PeriodicImpulse
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer

MODE_LOGGER = "runners.spark.planning.support"
MODE_MESSAGE = "without --streaming"


def plain_test_pipeline(runner, **options) -> test_pipeline.TestPipeline:
    """A TestPipeline as a Beam user writes it: no --streaming."""
    return test_pipeline.TestPipeline(runner=runner, options=PipelineOptions(**options),
                                      blocking=True)


def mode_lines(caplog) -> list:
    return [record.getMessage() for record in caplog.records
            if record.name == MODE_LOGGER and MODE_MESSAGE in record.getMessage()]


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


def test_a_test_stream_runs_in_streaming_without_the_flag(runner, runner_name, caplog):
    events = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("a", 1), 1),
                             window.TimestampedValue(("a", 2), 2)])
              .advance_watermark_to(5)
              .add_elements([window.TimestampedValue(("a", 3), 3),
                             window.TimestampedValue(("b", 4), 12)])
              .advance_watermark_to(20)
              .advance_watermark_to_infinity())
    with caplog.at_level(logging.INFO, logger=MODE_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            flushed = (pipeline
                       | events
                       | beam.WindowInto(window.FixedWindows(10))
                       | beam.ParDo(BufferUntilWindowEnd()))
            assert_that(flushed, equal_to([("a", [1, 2, 3], 0.0), ("b", [4], 10.0)]))
    if runner_name != "DirectRunner":
        lines = mode_lines(caplog)
        assert len(lines) == 1, lines
        assert "running in streaming" in lines[0] and "TestStream" in lines[0]


def past_ticks(pipeline):
    """PeriodicImpulse with every firing time in the past: it emits them at once, then ends."""
    return (pipeline
            | PeriodicImpulse(start_timestamp=1_000_000, stop_timestamp=1_000_005,
                              fire_interval=1)
            | beam.Map(float))


PAST_TICKS = [1_000_000.0 + offset for offset in range(5)]


def assert_runs_in_batch(caplog, source: str) -> None:
    lines = mode_lines(caplog)
    assert len(lines) == 1, lines
    assert lines[0].startswith("running in batch"), lines
    assert source in lines[0] and "--streaming" in lines[0], lines


def test_an_unbounded_source_runs_in_batch_without_the_streaming_flag(runner, runner_name,
                                                                        caplog):
    with caplog.at_level(logging.INFO, logger=MODE_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            ticks = past_ticks(pipeline)
            assert_that(ticks, equal_to(PAST_TICKS))
            # One pane of all five: the grouping sees the whole input at once.
            counted = (ticks
                       | beam.WindowInto(window.GlobalWindows(),
                                         trigger=trigger.Repeatedly(trigger.AfterCount(1)),
                                         accumulation_mode=trigger.AccumulationMode.DISCARDING)
                       | beam.combiners.Count.Globally().without_defaults())
            assert_that(counted, equal_to([5]), label="one pane")
    if runner_name != "DirectRunner":
        assert_runs_in_batch(caplog, "PeriodicImpulse")


def test_with_the_streaming_flag_an_unbounded_source_runs_in_micro_batches(
        runner, runner_name, caplog, tmp_path):
    report = tmp_path / "report.jsonl"
    with caplog.at_level(logging.INFO, logger=MODE_LOGGER):
        with plain_test_pipeline(runner, streaming=True,
                                 streaming_report=str(report)) as pipeline:
            assert_that(past_ticks(pipeline), equal_to(PAST_TICKS))
    if runner_name != "DirectRunner":
        assert mode_lines(caplog) == []
        batches = [json.loads(line) for line in report.read_text().splitlines()]
        assert batches, "no micro-batch reported"


def test_a_bounded_pipeline_stays_in_batch_without_a_word(runner, caplog):
    with caplog.at_level(logging.INFO, logger=MODE_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            assert_that(pipeline | beam.Create([1, 2]) | beam.Map(str), equal_to(["1", "2"]))
    assert mode_lines(caplog) == []


def test_a_legacy_unbounded_source_runs_in_batch_without_the_streaming_flag(runner, runner_name,
                                                                            caplog):
    # Beam reads an UnboundedSource with a splittable DoFn (ReadFromUnboundedSource).
    from apache_beam.io.unbounded_source import UnboundedCountingSource  # Beam's test source

    with caplog.at_level(logging.INFO, logger=MODE_LOGGER):
        with plain_test_pipeline(runner) as pipeline:
            counted = pipeline | beam.io.Read(UnboundedCountingSource(6))
            assert_that(counted, equal_to(list(range(6))))
    if runner_name != "DirectRunner":
        assert_runs_in_batch(caplog, "Read")


#: Beam's CombineGlobally cases, with fewer and closer ticks: 4 ticks 0.5 s apart.
TICKS = 4
TICK_SECONDS = 0.5


def real_time_ticks(pipeline):
    """``combiners_test.CombineGloballyTest``'s input: PeriodicImpulse from now, in real
    time, each tick ``("c", 1)``, in the global window firing every two elements."""
    start = time.time()
    return (pipeline
            | PeriodicImpulse(start_timestamp=start, stop_timestamp=start + TICKS * TICK_SECONDS,
                              fire_interval=TICK_SECONDS, apply_windowing=False)
            | beam.Map(lambda tick: ("c", 1))
            | beam.WindowInto(window.GlobalWindows(),
                              trigger=trigger.Repeatedly(trigger.AfterCount(2)),
                              accumulation_mode=trigger.AccumulationMode.DISCARDING))


def test_beams_global_combine_with_its_default_on_real_time_ticks_gives_one_pane(runner):
    """``test_combine_globally_for_unbounded_source_with_default``: the default is injected
    by a main element reading the combine as a side input, and Beam asserts it sees one
    pane (``InjectDefault``). In batch the combine sees every tick at once: one pane, in
    every run, the first one on a cold Spark as the later ones on a warm one."""
    for _ in range(3):
        with plain_test_pipeline(runner) as pipeline:
            counted = real_time_ticks(pipeline) | beam.combiners.Count.Globally()
            assert_that(counted, equal_to([TICKS]))


def test_beams_global_combine_without_defaults_on_real_time_ticks_gives_one_pane(runner):
    """``test_combine_globally_for_unbounded_source_without_defaults``, with its result."""
    with plain_test_pipeline(runner) as pipeline:
        summed = (real_time_ticks(pipeline)
                  | beam.Values()
                  | beam.CombineGlobally(sum).without_defaults())
        assert_that(summed, equal_to([TICKS]))
