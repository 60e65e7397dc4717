"""The lecture's window policies, proved with TestStream on every registered runner.

Each test fixes the tuples, the watermark and (for processing time) the clock, and
states every window the policy must emit, with its output timestamp. Tuples inside one
``add_elements`` are given out of event-time order on purpose: the policies must take
them in event-time order whatever order a runner delivers them in.

Why the outputs are recorded to files instead of checked with ``assert_that``: Beam's
Python DirectRunner does not hold the watermark for pending event-time timers
(apache/beam#18987, "DirectRunner assert_that should work in user state and timers
tests"), so what a timer emits when the watermark jumps to infinity (the end-of-input
windows) reaches assert_that's GroupByKey after the global window has expired and is
dropped there. Recording every output element (one real file each, no GroupByKey) and
comparing after the pipeline finished sees all of them, duplicates included, on any runner.
"""

from __future__ import annotations

import os
import pickle
import uuid

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.transforms.window import GlobalWindow, TimestampedValue

from transforms.window_policies import (
    ApplyWindowPolicy,
    CountWindow,
    DeltaWindow,
    PolicyWindow,
    PunctuationWindow,
    TimeWindow,
)

#: Where end-of-input windows are emitted: the global window's last millisecond.
END_OF_GLOBAL_WINDOW = GlobalWindow().max_timestamp().micros // 1000 * 1000 / 1e6


def stamped(key, value, seconds):
    return TimestampedValue((key, value), seconds)


def window(key, values, reason, complete=True, times=None):
    """The expected PolicyWindow; event times default to the values themselves."""
    times = list(values) if times is None else times
    return PolicyWindow(key, tuple(values), len(values), times[0] if times else None,
                        times[-1] if times else None, reason, complete)


class RecordOutputs(beam.DoFn):
    """Writes each element and its output timestamp (seconds) to its own file."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        name = os.path.join(self._directory, uuid.uuid4().hex)
        with open(name + ".tmp", "wb") as out:
            pickle.dump((element, timestamp.micros / 1e6), out)
        os.replace(name + ".tmp", name + ".out")


def run_policy(make_pipeline, tmp_path, source, policy, streaming=True):
    """Runs ``source | policy`` and returns every (output, output time) it emitted."""
    directory = tmp_path / "outputs"
    directory.mkdir()
    with make_pipeline(streaming=streaming) as p:
        _ = p | source | policy | beam.ParDo(RecordOutputs(str(directory)))
    outputs = []
    for name in sorted(os.listdir(directory)):
        assert name.endswith(".out"), f"unfinished output file {name}"
        with open(directory / name, "rb") as recorded:
            outputs.append(pickle.load(recorded))
    return outputs


def assert_same_outputs(actual, expected):
    """Equal as multisets: same outputs, same number of times each, in any order."""
    unmatched = list(actual)
    missing = []
    for wanted in expected:
        if wanted in unmatched:
            unmatched.remove(wanted)
        else:
            missing.append(wanted)
    assert not missing and not unmatched, f"missing {missing}; unexpected {unmatched}"


def windows_of(outputs):
    return [output for output, _ in outputs]


# --- count ----------------------------------------------------------------------------

def test_tumbling_count_windows_and_partial_window_at_end_of_input(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([stamped("a", v, v) for v in (4, 1, 3, 0, 2)])
              .advance_watermark_to(5)
              .add_elements([stamped("a", v, v) for v in (6, 5)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, CountWindow(3))
    # A window fires at its last tuple's time; the partial one at the end of input.
    assert_same_outputs(outputs, [
        (window("a", [0, 1, 2], "count"), 2.0),
        (window("a", [3, 4, 5], "count"), 5.0),
        (window("a", [6], "end_of_input", complete=False), END_OF_GLOBAL_WINDOW),
    ])


def test_count_window_larger_than_the_input_is_emitted_incomplete(make_pipeline, tmp_path):
    stream = test_stream.TestStream().add_elements([stamped("a", 2, 2), stamped("a", 1, 1)])
    outputs = run_policy(make_pipeline, tmp_path, stream.advance_watermark_to_infinity(),
                         CountWindow(5))
    assert_same_outputs(windows_of(outputs), [
        window("a", [1, 2], "end_of_input", complete=False)])


def test_sliding_count_windows_evict_the_oldest_tuples(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([stamped("a", v, v) for v in (3, 0, 5, 1, 4, 2)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, CountWindow(3, slide=1))
    # Every firing holds the last 3 tuples; no tuple arrived after the last firing, so
    # there is no end-of-input window.
    assert_same_outputs(outputs, [
        (window("a", [0, 1, 2], "count"), 2.0),
        (window("a", [1, 2, 3], "count"), 3.0),
        (window("a", [2, 3, 4], "count"), 4.0),
        (window("a", [3, 4, 5], "count"), 5.0),
    ])


def test_sliding_count_window_end_of_input_keeps_the_retained_tuples(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .add_elements([stamped("a", v, v) for v in (6, 2, 0, 4, 1, 5, 3)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, CountWindow(4, slide=2))
    assert_same_outputs(windows_of(outputs), [
        window("a", [0, 1, 2, 3], "count"),
        window("a", [2, 3, 4, 5], "count"),
        window("a", [4, 5, 6], "end_of_input", complete=False),
    ])


def test_count_windows_keep_keys_apart_and_can_aggregate(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .add_elements([stamped("b", 20, 2), stamped("a", 3, 3), stamped("b", 10, 1),
                             stamped("a", 1, 1), stamped("a", 2, 2), stamped("b", 30, 3)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, CountWindow(2, combine_fn=sum))
    assert_same_outputs(windows_of(outputs), [
        PolicyWindow("a", 3, 2, 1.0, 2.0, "count", True),
        PolicyWindow("a", 3, 1, 3.0, 3.0, "end_of_input", False),
        PolicyWindow("b", 30, 2, 1.0, 2.0, "count", True),
        PolicyWindow("b", 30, 1, 3.0, 3.0, "end_of_input", False),
    ])


def test_equal_timestamps_are_ordered_by_encoded_value(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .add_elements([stamped("a", v, 7) for v in ("c", "a", "d", "b")])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, CountWindow(2))
    assert_same_outputs(windows_of(outputs), [
        window("a", ["a", "b"], "count", times=[7.0, 7.0]),
        window("a", ["c", "d"], "count", times=[7.0, 7.0]),
    ])


# --- late data ------------------------------------------------------------------------

def test_late_tuples_are_emitted_alone_and_never_reorder_a_key(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([stamped("a", v, v) for v in (3, 1, 2)])
              .advance_watermark_to(5)
              # 2.5 is before the 3 that key "a" already windowed: late. 4 is behind the
              # watermark too, but after everything "a" released: taken in order. Key "b"
              # released nothing yet, so its tuple behind the watermark is in order.
              .add_elements([stamped("a", 2.5, 2.5), stamped("a", 4, 4), stamped("b", 1, 1)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, CountWindow(2))
    assert_same_outputs(outputs, [
        (window("a", [1, 2], "count"), 2.0),
        (window("a", [2.5], "late", complete=False), 2.5),
        (window("a", [3, 4], "count"), 4.0),
        (window("b", [1], "end_of_input", complete=False), END_OF_GLOBAL_WINDOW),
    ])


# --- delta ----------------------------------------------------------------------------

def test_delta_window_closes_before_the_tuple_that_moved_too_far(make_pipeline, tmp_path):
    prices = {0: 10, 1: 12, 2: 8, 3: 7, 4: 9.5, 5: 8}
    stream = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([stamped("ibm", {"price": prices[t]}, t) for t in (3, 0, 2, 1)])
              .advance_watermark_to(3)
              .add_elements([stamped("ibm", {"price": prices[t]}, t) for t in (5, 4)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, DeltaWindow("price", threshold=2))
    # 12 and 8 are exactly 2 from 10 (they stay); 7 is 3 away and opens the next window,
    # which closes at 9.5 (2.5 from 7); 8 is 1.5 from 9.5 and stays.
    assert_same_outputs(
        [(tuple(v["price"] for v in w.value), w.reason, w.complete, time)
         for w, time in outputs],
        [((10, 12, 8), "delta", True, 3.0),
         ((7,), "delta", True, 4.0),
         ((9.5, 8), "end_of_input", False, END_OF_GLOBAL_WINDOW)])


def test_delta_window_reads_a_function_of_the_value(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .add_elements([stamped("a", v, t) for t, v in enumerate([1, 5, 9, 2])])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream,
                         DeltaWindow(lambda v: -v, threshold=4))
    assert_same_outputs(windows_of(outputs), [
        window("a", [1, 5], "delta", times=[0.0, 1.0]),
        window("a", [9], "delta", times=[2.0]),
        window("a", [2], "end_of_input", complete=False, times=[3.0]),
    ])


# --- punctuation ----------------------------------------------------------------------

PUNCTUATED = [(0, "x"), (1, "|"), (2, "|"), (3, "y"), (4, "z"), (5, "|"), (6, "w")]


def punctuated_stream():
    return (test_stream.TestStream()
            .advance_watermark_to(0)
            .add_elements([stamped("a", v, t) for t, v in reversed(PUNCTUATED[:4])])
            .advance_watermark_to(3)
            .add_elements([stamped("a", v, t) for t, v in reversed(PUNCTUATED[4:])])
            .advance_watermark_to_infinity())


def test_punctuation_closes_the_window_and_is_left_out(make_pipeline, tmp_path):
    outputs = run_policy(make_pipeline, tmp_path, punctuated_stream(),
                         PunctuationWindow(lambda v: v == "|"))
    # The second punctuation finds the window empty and still closes it.
    assert_same_outputs(outputs, [
        (window("a", ["x"], "punctuation", times=[0.0]), 1.0),
        (window("a", [], "punctuation", times=[]), 2.0),
        (window("a", ["y", "z"], "punctuation", times=[3.0, 4.0]), 5.0),
        (window("a", ["w"], "end_of_input", complete=False, times=[6.0]), END_OF_GLOBAL_WINDOW),
    ])


def test_punctuation_can_end_the_window_it_closes(make_pipeline, tmp_path):
    outputs = run_policy(make_pipeline, tmp_path, punctuated_stream(),
                         PunctuationWindow(lambda v: v == "|", include_punctuation=True))
    assert_same_outputs(outputs, [
        (window("a", ["x", "|"], "punctuation", times=[0.0, 1.0]), 1.0),
        (window("a", ["|"], "punctuation", times=[2.0]), 2.0),
        (window("a", ["y", "z", "|"], "punctuation", times=[3.0, 4.0, 5.0]), 5.0),
        (window("a", ["w"], "end_of_input", complete=False, times=[6.0]), END_OF_GLOBAL_WINDOW),
    ])


# --- time -----------------------------------------------------------------------------

def test_event_time_window_closes_a_period_after_its_first_tuple(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([stamped("a", v, v) for v in (9.5, 0, 3)]
                            + [stamped("b", 100, 4)])
              .advance_watermark_to(9.5)  # a's [0, 10) may still receive tuples
              .add_elements([stamped("a", v, v) for v in (25, 10, 9.75)])
              .advance_watermark_to(30)   # closes a's [0, 10) and [10, 20), b's [4, 14)
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, TimeWindow(10))
    # Each window is emitted at its end, first tuple + period.
    assert_same_outputs(outputs, [
        (window("a", [0, 3, 9.5, 9.75], "time"), 10.0),
        (window("a", [10], "time"), 20.0),
        (window("a", [25], "time"), 35.0),
        (window("b", [100], "time", times=[4.0]), 14.0),
    ])


def test_processing_time_window_closes_a_period_after_its_first_arrival(make_pipeline, tmp_path):
    stream = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([stamped("a", 2, 2), stamped("a", 1, 1), stamped("b", 10, 10)])
              .advance_processing_time(3)
              .add_elements([stamped("a", 3, 3)])
              .advance_processing_time(3)   # 6 s after the first arrivals: a and b close
              .add_elements([stamped("a", 0.5, 0.5)])
              .advance_processing_time(1)
              .add_elements([stamped("a", 9, 9)])
              .advance_watermark_to_infinity())
    outputs = run_policy(make_pipeline, tmp_path, stream, TimeWindow(5, domain="processing"))
    # Windows follow arrival; inside one, tuples are in event-time order; each is emitted
    # at its last tuple's event time.
    assert_same_outputs(outputs, [
        (window("a", [1, 2, 3], "time"), 3.0),
        (window("b", [10], "time"), 10.0),
        (window("a", [0.5, 9], "end_of_input", complete=False), 9.0),
    ])


# --- batch ----------------------------------------------------------------------------

def test_policies_run_in_batch_too(make_pipeline, tmp_path):
    source = beam.Create([(t, v) for t, v in enumerate([4, 7, 1, 9, 3])]) | beam.MapTuple(
        lambda t, v: TimestampedValue(("a", v), t))
    outputs = run_policy(make_pipeline, tmp_path, source, DeltaWindow(lambda v: v, 3),
                         streaming=False)
    assert_same_outputs(outputs, [
        (window("a", [4, 7, 1], "delta", times=[0.0, 1.0, 2.0]), 3.0),
        (window("a", [9], "delta", times=[3.0]), 4.0),
        (window("a", [3], "end_of_input", complete=False, times=[4.0]), END_OF_GLOBAL_WINDOW),
    ])


# --- validation -----------------------------------------------------------------------

@pytest.mark.parametrize("make, error, message", [
    (lambda: CountWindow(0), ValueError, "size=0"),
    (lambda: CountWindow(2.5), TypeError, "size=2.5"),
    (lambda: CountWindow(True), TypeError, "size=True"),
    (lambda: CountWindow(3, slide=4), ValueError, "slide=4 must be between 1 and size=3"),
    (lambda: CountWindow(3, slide=0), ValueError, "slide=0"),
    (lambda: CountWindow(3, combine_fn=42), TypeError, "combine_fn=42"),
    (lambda: DeltaWindow("price", threshold=0), ValueError, "threshold=0"),
    (lambda: DeltaWindow("price", threshold=float("nan")), ValueError, "threshold=nan"),
    (lambda: DeltaWindow("price", threshold="2"), TypeError, "threshold='2'"),
    (lambda: DeltaWindow(7, threshold=1), TypeError, "attribute=7"),
    (lambda: PunctuationWindow("|"), TypeError, "is_punctuation='|'"),
    (lambda: PunctuationWindow(bool, include_punctuation=1), TypeError, "include_punctuation"),
    (lambda: TimeWindow(0), ValueError, "period_seconds=0"),
    (lambda: TimeWindow(-1, domain="processing"), ValueError, "period_seconds=-1"),
    (lambda: TimeWindow(0.0001), ValueError, "1 millisecond"),
    (lambda: TimeWindow(1.5, domain="processing"), ValueError, "whole seconds"),
    (lambda: TimeWindow(10, domain="wall"), ValueError, "domain='wall'"),
    (lambda: ApplyWindowPolicy("count"), TypeError, "policy='count'"),
])
def test_invalid_arguments_are_rejected_at_construction(make, error, message):
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value)


def test_processing_time_window_needs_the_global_window(make_pipeline):
    p = make_pipeline(streaming=True)
    keyed = (p | test_stream.TestStream().add_elements([stamped("a", 1, 1)])
             | beam.WindowInto(beam.window.FixedWindows(10)))
    with pytest.raises(ValueError, match="global window"):
        _ = keyed | TimeWindow(5, domain="processing")
