"""Beam's own triggers, composed, give the same panes on every runner (TestStream).

tests/model/test_triggers.py proves the project's presets (AfterWatermark with early and late
firings, AfterCount, AfterProcessingTime, Repeatedly). These use Beam's trigger classes
directly: the default trigger, AfterAny, AfterAll, AfterEach and OrFinally, each over a
TestStream whose events decide every firing, with CombinePerKey(sum) as the aggregation.
AfterEach and OrFinally finish, so Beam calls them unsafe (data after the last pane is
dropped): the tests pass ``allow_unsafe_triggers`` and check that drop too.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger as triggers
from apache_beam.transforms.window import FixedWindows, GlobalWindow, GlobalWindows, TimestampedValue

from triggers.panes import DescribePanes, pane_record

#: Panes of the global window carry its last timestamp (END_OF_WINDOW timestamp combiner).
GLOBAL_END = GlobalWindow().max_timestamp().micros / 1e6


def at(key, value, timestamp):
    return TimestampedValue((key, value), timestamp)


def sums(make_pipeline, stream, window_fn, **windowing):
    pipeline = make_pipeline(streaming=True, allow_unsafe_triggers=True)
    panes = (pipeline | stream | beam.WindowInto(window_fn, **windowing)
             | beam.CombinePerKey(sum) | DescribePanes())
    return pipeline, panes


def global_pane(value, index, is_last=False):
    return pane_record("a", value, window="global", timestamp=GLOBAL_END, timing="EARLY",
                       index=index, is_first=index == 0, is_last=is_last)


def test_the_default_trigger_fires_at_the_watermark_and_again_for_late_data(make_pipeline):
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([at("a", 1, 1), at("a", 2, 2)])
              .advance_watermark_to(10)           # ON_TIME pane of [0, 10)
              .add_elements([at("a", 4, 3)])      # late, the window not yet expired: LATE
              .add_elements([at("a", 8, 12)])
              .advance_watermark_to_infinity())   # ON_TIME pane of [10, 20)
    pipeline, panes = sums(make_pipeline, stream, FixedWindows(10))
    with pipeline:
        assert_that(panes, equal_to([
            pane_record("a", 3, window=(0, 10), timestamp=9.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 4, window=(0, 10), timestamp=9.999999, timing="LATE",
                        index=1, is_first=False, is_last=False),
            pane_record("a", 8, window=(10, 20), timestamp=19.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
        ]))


def test_after_any_fires_on_whichever_comes_first(make_pipeline):
    stream = (streams.TestStream()
              .add_elements([at("a", 1, 1), at("a", 2, 2), at("a", 3, 3)])  # count 3
              .add_elements([at("a", 4, 4)])
              .advance_processing_time(6)                                  # 5 s passed
              .advance_watermark_to_infinity())
    trigger = triggers.Repeatedly(triggers.AfterAny(
        triggers.AfterCount(3), triggers.AfterProcessingTime(5)))
    pipeline, panes = sums(make_pipeline, stream, GlobalWindows(), trigger=trigger,
                           accumulation_mode=triggers.AccumulationMode.DISCARDING)
    with pipeline:
        assert_that(panes, equal_to([global_pane(6, 0), global_pane(4, 1)]))


def test_after_all_needs_both_conditions_at_one_firing(make_pipeline):
    # Beam's AfterAll fires when all its triggers would fire at the same moment: the early
    # timer fires while one element is buffered, later elements come before no timer, so
    # no early pane; the watermark then fires the ON_TIME pane.
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([at("a", 1, 1)])
              .advance_processing_time(6)
              .add_elements([at("a", 2, 2)])
              .add_elements([at("a", 4, 3)])
              .add_elements([at("a", 8, 4)])
              .advance_processing_time(6)
              .advance_watermark_to(100)
              .advance_watermark_to_infinity())
    trigger = triggers.AfterWatermark(early=triggers.Repeatedly(triggers.AfterAll(
        triggers.AfterCount(2), triggers.AfterProcessingTime(5))))
    pipeline, panes = sums(make_pipeline, stream, FixedWindows(100), trigger=trigger,
                           accumulation_mode=triggers.AccumulationMode.ACCUMULATING)
    with pipeline:
        assert_that(panes, equal_to([
            pane_record("a", 15, window=(0, 100), timestamp=99.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=True),
        ]))


def test_after_each_runs_its_triggers_in_turn_then_finishes(make_pipeline):
    stream = (streams.TestStream()
              .add_elements([at("a", 1, 1), at("a", 2, 2)])   # AfterCount(2): pane
              .add_elements([at("a", 4, 3), at("a", 8, 4)])
              .add_elements([at("a", 16, 5)])                 # AfterCount(3): last pane
              .add_elements([at("a", 32, 6)])                 # after the last pane: dropped
              .advance_watermark_to_infinity())
    trigger = triggers.AfterEach(triggers.AfterCount(2), triggers.AfterCount(3))
    pipeline, panes = sums(make_pipeline, stream, GlobalWindows(), trigger=trigger,
                           accumulation_mode=triggers.AccumulationMode.ACCUMULATING)
    with pipeline:
        assert_that(panes, equal_to([global_pane(3, 0), global_pane(31, 1, is_last=True)]))


def test_or_finally_stops_a_repeated_trigger(make_pipeline):
    stream = (streams.TestStream()
              .add_elements([at("a", 1, 1)])
              .add_elements([at("a", 2, 2)])
              .add_elements([at("a", 4, 3)])   # the third element: last pane
              .add_elements([at("a", 8, 4)])   # dropped
              .advance_watermark_to_infinity())
    trigger = triggers.OrFinally(triggers.Repeatedly(triggers.AfterCount(1)),
                                 triggers.AfterCount(3))
    pipeline, panes = sums(make_pipeline, stream, GlobalWindows(), trigger=trigger,
                           accumulation_mode=triggers.AccumulationMode.DISCARDING)
    with pipeline:
        assert_that(panes, equal_to([global_pane(1, 0), global_pane(2, 1),
                                     global_pane(4, 2, is_last=True)]))
