"""Accumulating and retracting: every pane retracts the previous one, so the sum of all
refinements of a key and window is always the latest pane's value."""

from __future__ import annotations

from collections import defaultdict

from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, GlobalWindows, Sessions, TimestampedValue

from triggers.retractions import Refinement
from triggers.accumulation import How
from triggers.model import WindowedAggregation
from triggers.presets import early_and_late_firings, every_n_elements


def at(key, value, timestamp):
    return TimestampedValue((key, value), timestamp)


def sums_per_window(expected):
    """Matcher: the signed values of all refinements, summed per key and window."""
    def check(refinements):
        totals = defaultdict(int)
        for refinement in refinements:
            totals[(refinement.key, refinement.window_start, refinement.window_end)] += (
                refinement.signed_value)
        if dict(totals) != expected:
            raise BeamAssertException(f"sums of refinements {dict(totals)} != {expected}")
    return check


def test_refinements_retract_the_previous_pane(make_pipeline):
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([at("a", 1, 1), at("a", 2, 2)])  # EARLY pane: 3
              .add_elements([at("a", 3, 3)])
              .advance_watermark_to(11)                      # ON_TIME pane: 6
              .add_elements([at("a", 4, 4)])                 # LATE pane: 10
              .advance_watermark_to_infinity())
    when = early_and_late_firings(early_every_count=2, late_every_count=1, allowed_lateness=30)
    with make_pipeline(streaming=True) as p:
        refinements = p | stream | WindowedAggregation(
            what=sum, where=FixedWindows(10), when=when, how=How.ACCUMULATING_AND_RETRACTING)
        assert_that(refinements, equal_to([
            Refinement("a", 3, False, 0.0, 10.0, 0),
            Refinement("a", 3, True, 0.0, 10.0, 1),
            Refinement("a", 6, False, 0.0, 10.0, 1),
            Refinement("a", 6, True, 0.0, 10.0, 2),
            Refinement("a", 10, False, 0.0, 10.0, 2),
        ]), label="Refinements")
        assert_that(refinements, sums_per_window({("a", 0.0, 10.0): 10}), label="Sums")


def test_sessions_merging_retracts_the_merged_away_windows(make_pipeline):
    # Gap 10: [5, 15) and [20, 30) fire early; t=12 ([12, 22)) merges them into [5, 30),
    # whose pane retracts both old sessions' values, in their own windows.
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([at("a", 1, 5)])
              .add_elements([at("a", 2, 20)])
              .add_elements([at("a", 4, 12)])
              .advance_watermark_to_infinity())
    when = early_and_late_firings(early_every_count=1, late_every_count=1, allowed_lateness=60)
    with make_pipeline(streaming=True) as p:
        refinements = p | stream | WindowedAggregation(
            what=sum, where=Sessions(10), when=when, how=How.ACCUMULATING_AND_RETRACTING)
        assert_that(refinements, equal_to([
            Refinement("a", 1, False, 5.0, 15.0, 0),
            Refinement("a", 2, False, 20.0, 30.0, 0),
            Refinement("a", 1, True, 5.0, 15.0, 0),    # merged away into [5, 30)
            Refinement("a", 2, True, 20.0, 30.0, 0),   # merged away into [5, 30)
            Refinement("a", 7, False, 5.0, 30.0, 0),   # EARLY pane of the merged session
            Refinement("a", 7, True, 5.0, 30.0, 1),
            Refinement("a", 7, False, 5.0, 30.0, 1),   # ON_TIME pane
        ]), label="Refinements")
        assert_that(refinements, sums_per_window({
            ("a", 5.0, 15.0): 0, ("a", 20.0, 30.0): 0, ("a", 5.0, 30.0): 7}), label="Sums")


def test_global_window_refinements(make_pipeline):
    stream = (streams.TestStream()
              .add_elements([at("a", 1, 1), at("a", 2, 2)])
              .add_elements([at("a", 3, 3), at("a", 4, 4)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        refinements = p | stream | WindowedAggregation(
            what=sum, where=GlobalWindows(), when=every_n_elements(2),
            how=How.ACCUMULATING_AND_RETRACTING)
        assert_that(refinements, equal_to([
            Refinement("a", 3, False, None, None, 0),
            Refinement("a", 3, True, None, None, 1),
            Refinement("a", 10, False, None, None, 1),
        ]), label="Refinements")
        assert_that(refinements, sums_per_window({("a", None, None): 10}), label="Sums")


def test_signed_value():
    assert Refinement("k", 5, True, 0.0, 1.0, 1).signed_value == -5
    assert Refinement("k", 5, False, 0.0, 1.0, 0).signed_value == 5
