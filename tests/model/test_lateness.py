"""Data past the allowed lateness is dropped and counted; data within it is not.

Each test drives a TestStream through a WindowedAggregation and reads the counter
``lateness/dropped_late_data`` from the pipeline result, plus the dropped elements.
"""

from __future__ import annotations

import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, Sessions, SlidingWindows, TimestampedValue

from triggers.lateness import DROPPED_LATE_DATA, NAMESPACE, CountDroppedLateData, DroppedElement
from triggers.accumulation import How
from triggers.model import WindowedAggregation
from triggers.panes import DescribePanes, pane_record
from triggers.presets import at_watermark


def dropped_count(result) -> int:
    counters = result.metrics().query(
        MetricsFilter().with_namespace(NAMESPACE).with_name(DROPPED_LATE_DATA))["counters"]
    return sum(counter.committed for counter in counters)


def late_stream() -> streams.TestStream:
    """Window [0, 10): 1 on time; 2 late within 5s of lateness; 4 after it (dropped)."""
    return (streams.TestStream()
            .advance_watermark_to(0)
            .add_elements([TimestampedValue(("a", 1), 1)])
            .advance_watermark_to(12)                       # ON_TIME pane; 2s past the end
            .add_elements([TimestampedValue(("a", 2), 2)])  # late, within lateness: kept
            .advance_watermark_to(15)                       # == end + lateness: still kept
            .add_elements([TimestampedValue(("a", 8), 3)])
            .advance_watermark_to(16)                       # past end + lateness
            .add_elements([TimestampedValue(("a", 4), 4), TimestampedValue(("a", 5), 5)])
            .advance_watermark_to_infinity())


def test_data_past_allowed_lateness_is_dropped_and_counted(make_pipeline):
    aggregation = WindowedAggregation(what=sum, where=FixedWindows(10),
                                      when=at_watermark(allowed_lateness=5), how=How.DISCARDING)
    with make_pipeline(streaming=True) as p:
        panes = p | late_stream() | aggregation
        assert_that(panes | DescribePanes(), equal_to([
            pane_record("a", 1, window=(0, 10), timestamp=9.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 2, window=(0, 10), timestamp=9.999999, timing="LATE",
                        index=1, is_first=False, is_last=False),
            pane_record("a", 8, window=(0, 10), timestamp=9.999999, timing="LATE",
                        index=2, is_first=False, is_last=False),
        ]), label="KeptPanes")
        assert_that(aggregation.dropped, equal_to([
            DroppedElement("a", 4, 4.0, 0.0, 10.0),
            DroppedElement("a", 5, 5.0, 0.0, 10.0),
        ]), label="DroppedElements")


def test_nothing_dropped_counts_zero(make_pipeline):
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("a", 2), 12)])
              .advance_watermark_to(11)
              .add_elements([TimestampedValue(("a", 3), 3)])  # late, but lateness is 5
              .advance_watermark_to_infinity())
    aggregation = WindowedAggregation(what=sum, where=FixedWindows(10),
                                      when=at_watermark(allowed_lateness=5), how=How.DISCARDING)
    with make_pipeline(streaming=True) as p:
        panes = p | stream | aggregation
        assert_that(panes, equal_to([("a", 1), ("a", 3), ("a", 2)]), label="AllKept")
        assert_that(aggregation.dropped, equal_to([]), label="NoneDropped")


def test_zero_lateness_drops_everything_behind_the_window_end(make_pipeline):
    stream = (streams.TestStream()
              .advance_watermark_to(10)  # == window end: [0, 10) is not yet expired
              .add_elements([TimestampedValue(("a", 1), 9)])
              .advance_watermark_to(11)
              .add_elements([TimestampedValue(("a", 2), 9), TimestampedValue(("a", 4), 10)])
              .advance_watermark_to_infinity())
    aggregation = WindowedAggregation(what=sum, where=FixedWindows(10), when=at_watermark(),
                                      how=How.DISCARDING)
    with make_pipeline(streaming=True) as p:
        panes = p | stream | aggregation
        assert_that(panes | DescribePanes(), equal_to([
            pane_record("a", 1, window=(0, 10), timestamp=9.999999, timing="LATE",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 4, window=(10, 20), timestamp=19.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
        ]), label="Panes")
        assert_that(aggregation.dropped, equal_to([DroppedElement("a", 2, 9.0, 0.0, 10.0)]),
                    label="Dropped")


def test_each_sliding_window_counts_its_own_drop(make_pipeline):
    # Windows of 10s every 5s: t=7 is in [0, 10) and [5, 15). At watermark 12, [0, 10) has
    # expired (lateness 0) but [5, 15) has not: one drop, one kept.
    stream = (streams.TestStream()
              .advance_watermark_to(12)
              .add_elements([TimestampedValue(("a", 1), 7)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        dropped = p | stream | CountDroppedLateData(SlidingWindows(10, 5), allowed_lateness=0)
        assert_that(dropped, equal_to([DroppedElement("a", 1, 7.0, 0.0, 10.0)]))


def test_sessions_compare_the_unmerged_window(make_pipeline):
    # Gap 10, lateness 0. A session [1, 11) closes at watermark 11. An element at t=0 that
    # arrives at watermark 12 has the proto-window [0, 10), already expired: dropped, even
    # though it would have merged into the session. One at t=5, window [5, 15), is kept and
    # merges with the fired session into [1, 15) (discarding: that pane carries only 4).
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([TimestampedValue(("a", 1), 1)])
              .advance_watermark_to(12)
              .add_elements([TimestampedValue(("a", 2), 0), TimestampedValue(("a", 4), 5)])
              .advance_watermark_to_infinity())
    aggregation = WindowedAggregation(what=sum, where=Sessions(10), when=at_watermark(),
                                      how=How.DISCARDING)
    with make_pipeline(streaming=True) as p:
        panes = p | stream | aggregation
        assert_that(aggregation.dropped, equal_to([DroppedElement("a", 2, 0.0, 0.0, 10.0)]),
                    label="Dropped")
        assert_that(panes | DescribePanes(), equal_to([
            pane_record("a", 1, window=(1, 11), timestamp=10.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 4, window=(1, 15), timestamp=14.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
        ]), label="Panes")


def test_dropped_late_data_counter_counts_every_drop(make_pipeline, runner_name, request):
    if runner_name == "DirectRunner":
        # A true Beam bug, not ours: in streaming the DirectRunner's StateSampler.scoped_state
        # caches the ScopedState (and with it the MetricsContainer) of the first bundle a
        # thread ran for a step, so counter updates of later bundles go to a container that
        # was already committed and are never reported (apache_beam/runners/worker/
        # statesampler.py, scoped_state). The DroppedElement outputs above are exact.
        request.applymarker(pytest.mark.xfail(
            reason="DirectRunner (streaming) loses counter updates after a thread's first "
                   "bundle of a step", strict=False))
    aggregation = WindowedAggregation(what=sum, where=FixedWindows(10),
                                      when=at_watermark(allowed_lateness=5), how=How.DISCARDING)
    with make_pipeline(streaming=True) as p:
        p | late_stream() | aggregation
    assert dropped_count(p.result) == 2
