"""The *how*: the same input, discarding vs accumulating panes, with exact values."""

from __future__ import annotations

import pytest
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.trigger import AccumulationMode
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from triggers.accumulation import How
from triggers.model import WindowedAggregation
from triggers.panes import DescribePanes, pane_record
from triggers.presets import early_and_late_firings


def test_how_maps_to_beam_accumulation_modes():
    assert How.DISCARDING.beam_mode == AccumulationMode.DISCARDING
    assert How.ACCUMULATING.beam_mode == AccumulationMode.ACCUMULATING
    # Beam has no retracting mode: the window accumulates, WithRetractions retracts.
    assert How.ACCUMULATING_AND_RETRACTING.beam_mode == AccumulationMode.ACCUMULATING
    assert [how.retracting for how in How] == [False, False, True]


def stream():
    return (streams.TestStream()
            .advance_watermark_to(0)
            .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("a", 2), 2)])
            .add_elements([TimestampedValue(("a", 3), 3)])
            .advance_watermark_to(11)
            .add_elements([TimestampedValue(("a", 4), 4)])
            .advance_watermark_to_infinity())


@pytest.mark.parametrize("how, values", [
    (How.DISCARDING, (3, 3, 4)),      # each pane: only what arrived since the last one
    (How.ACCUMULATING, (3, 6, 10)),   # each pane: everything so far
])
def test_discarding_and_accumulating_panes_for_the_same_input(make_pipeline, how, values):
    when = early_and_late_firings(early_every_count=2, late_every_count=1, allowed_lateness=30)
    timings = ("EARLY", "ON_TIME", "LATE")
    with make_pipeline(streaming=True) as p:
        panes = (p | stream()
                 | WindowedAggregation(what=sum, where=FixedWindows(10), when=when, how=how)
                 | DescribePanes())
        assert_that(panes, equal_to([
            pane_record("a", value, window=(0, 10), timestamp=9.999999, timing=timing,
                        index=index, is_first=index == 0, is_last=False)
            for index, (value, timing) in enumerate(zip(values, timings))
        ]))
