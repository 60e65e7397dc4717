"""Every validation rule: invalid what/where/when/how combinations fail at construction time,
with a message that names the bad value and what to change."""

from __future__ import annotations

import math

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.combiners import CountCombineFn, MeanCombineFn, TopCombineFn
from apache_beam.transforms.trigger import (
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    Repeatedly,
)
from apache_beam.transforms.window import FixedWindows, GlobalWindows, Sessions, TimestampedValue

from triggers.accumulation import How
from triggers.model import WindowedAggregation
from triggers.presets import (
    When,
    at_watermark,
    early_and_late_firings,
    every_n_elements,
    every_period,
    micro_batch,
)
from triggers.validation import is_retractable, validate


def test_presets_describe_their_triggers():
    assert repr(at_watermark().trigger) == "DefaultTrigger()"
    assert at_watermark(60).allowed_lateness == 60
    assert repr(early_and_late_firings(early_every_count=3, early_every_seconds=10,
                                       allowed_lateness=60).trigger) == (
        "AfterWatermark(early=AfterAny(AfterCount(3), AfterProcessingTime(delay=10)), "
        "late=AfterCount(1))")
    assert repr(every_n_elements(4).trigger) == "Repeatedly(AfterCount(4))"
    assert repr(every_period(7).trigger) == "Repeatedly(AfterProcessingTime(delay=7))"
    assert repr(micro_batch(5, allowed_lateness=30).trigger) == (
        "AfterWatermark(early=AfterProcessingTime(delay=5), late=AfterCount(1))")
    assert micro_batch(5).name == "micro_batch" and "5s" in micro_batch(5).description


@pytest.mark.parametrize("build, message", [
    (lambda: at_watermark(-1), "allowed_lateness=-1"),
    (lambda: at_watermark(math.inf), "finite"),
    (lambda: When(AfterWatermark(), allowed_lateness=-5), "allowed_lateness=-5"),
    (lambda: at_watermark("10"), "number of seconds"),
    (lambda: When("AfterWatermark"), "TriggerFn"),
    (lambda: every_n_elements(0), "n=0"),
    (lambda: every_n_elements(True), "n=True"),
    (lambda: every_period(0), "seconds=0"),
    (lambda: every_period(1.5), "whole number of seconds"),
    (lambda: micro_batch(2.5), "whole number of seconds"),
    (lambda: early_and_late_firings(early_every_seconds=0.5, late_every_count=None), "0.5"),
    (lambda: early_and_late_firings(late_every_count=None), "at_watermark()"),
    # Rule: late firings with allowed_lateness=0 can never fire.
    (lambda: early_and_late_firings(early_every_count=2), "late firings can never fire"),
])
def test_invalid_preset_arguments(build, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


@pytest.mark.parametrize("what, where, when, how, error, message", [
    (42, FixedWindows(10), at_watermark(), How.DISCARDING, TypeError, "what=42"),
    (sum, "fixed", at_watermark(), How.DISCARDING, TypeError, "where='fixed'"),
    (sum, FixedWindows(10), AfterWatermark(), How.DISCARDING, TypeError, "when=AfterWatermark"),
    (sum, FixedWindows(10), at_watermark(), "discarding", TypeError, "how='discarding'"),
    # Late firings with zero lateness, in a non-merging window, never fire.
    (sum, FixedWindows(10), When(AfterWatermark(late=AfterCount(1))), How.DISCARDING,
     ValueError, "late firings can never fire"),
    # Retracting needs outputs that can be negated and summed.
    (TopCombineFn(3), FixedWindows(10), at_watermark(), How.ACCUMULATING_AND_RETRACTING,
     ValueError, "retracted"),
    (lambda values: ",".join(values), FixedWindows(10), at_watermark(),
     How.ACCUMULATING_AND_RETRACTING, ValueError, "retracted"),
    # Triggers that finish drop later data silently.
    (sum, FixedWindows(10), When(AfterCount(5)), How.DISCARDING, ValueError, "Repeatedly"),
    (sum, FixedWindows(10), When(AfterWatermark(), allowed_lateness=60), How.DISCARDING,
     ValueError, "finishes"),
    # Fractional processing-time delays do not survive Beam's proto round trip.
    (sum, GlobalWindows(), When(Repeatedly(AfterProcessingTime(2.5))), How.DISCARDING,
     ValueError, "whole seconds"),
    # Sessions merge windows after they fired: a finishing trigger would drop merged data.
    (sum, Sessions(10), When(AfterWatermark()), How.DISCARDING, ValueError, "merges"),
])
def test_invalid_combinations_fail_at_construction(what, where, when, how, error, message):
    with pytest.raises(error, match=message):
        WindowedAggregation(what=what, where=where, when=when, how=how)


def test_valid_combinations_are_accepted():
    # Sessions may carry late firings with zero lateness: they keep the session open to merges.
    validate(sum, Sessions(10), When(AfterWatermark(late=AfterCount(1))), How.DISCARDING)
    validate(CountCombineFn(), FixedWindows(10), at_watermark(), How.ACCUMULATING_AND_RETRACTING)
    validate(sum, FixedWindows(10), every_n_elements(1), How.DISCARDING, bounded=False)


class _Vector(beam.CombineFn):
    retractable = True  # declared: its outputs support -x and x + y

    def create_accumulator(self):
        return 0

    def add_input(self, accumulator, value):
        return accumulator + value

    def merge_accumulators(self, accumulators):
        return sum(accumulators)

    def extract_output(self, accumulator):
        return accumulator


def test_retractable_whats():
    assert is_retractable(sum) and is_retractable(min) and is_retractable(max)
    assert is_retractable(CountCombineFn()) and is_retractable(MeanCombineFn())
    assert is_retractable(_Vector())
    assert not is_retractable(TopCombineFn(2))
    assert not is_retractable(lambda values: sorted(values))


def keyed_stream():
    return (streams.TestStream()
            .add_elements([TimestampedValue(("a", 1), 1)])
            .advance_watermark_to_infinity())


@pytest.mark.parametrize("where, when, message", [
    # A watermark-only trigger in the global window never fires before the end of input.
    (GlobalWindows(), at_watermark(), "never fires before the end of input"),
    # Count / period triggers in event-time windows leave the last partial pane buffered.
    (FixedWindows(10), every_n_elements(3), "never fires at the watermark"),
    (FixedWindows(10), every_period(5), "never fires at the watermark"),
])
def test_unbounded_input_rules_fail_when_applied(make_pipeline, where, when, message):
    pipeline = make_pipeline(streaming=True)
    aggregation = WindowedAggregation(what=sum, where=where, when=when, how=How.DISCARDING)
    with pytest.raises(ValueError, match=message):
        pipeline | keyed_stream() | aggregation


def test_watermark_trigger_in_the_global_window_is_fine_for_bounded_input(make_pipeline):
    with make_pipeline() as p:
        totals = (p
                  | beam.Create([("a", 1), ("a", 2), ("b", 5)])
                  | WindowedAggregation(what=sum, where=GlobalWindows(), when=at_watermark(),
                                        how=How.DISCARDING))
        assert_that(totals, equal_to([("a", 3), ("b", 5)]))


@pytest.mark.parametrize("when", [
    early_and_late_firings(early_every_seconds=5, allowed_lateness=60),
    micro_batch(5),
])
def test_processing_time_trigger_on_bounded_input_fails_when_applied(make_pipeline, when):
    pipeline = make_pipeline()
    aggregation = WindowedAggregation(what=sum, where=FixedWindows(10), when=when,
                                      how=How.DISCARDING)
    with pytest.raises(ValueError, match="no processing-time clock"):
        pipeline | beam.Create([("a", 1)]) | aggregation
