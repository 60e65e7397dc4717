"""The *where*: event-time and processing-time stamping, and the window functions."""

from __future__ import annotations

import datetime
import time
import typing

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from transforms.windows import (
    WithEventTime,
    WithProcessingTime,
    fixed_windows,
    global_window,
    parse_event_time,
    sessions,
    sliding_windows,
)
from triggers.panes import DescribePanes, pane_record


class Click(typing.NamedTuple):
    user: str
    at: float


# --- parse_event_time: the one conversion WithEventTime and the parsers share. ---


@pytest.mark.parametrize(
    "value, micros",
    [
        (0, 0),
        (1700000000, 1700000000_000000),
        (1.25, 1_250000),
        ("42", 42_000000),
        ("  42.5 ", 42_500000),
        ("1e3", 1000_000000),
        ("1970-01-01T00:00:10Z", 10_000000),
        ("1970-01-01T01:00:10+01:00", 10_000000),  # converted to UTC
        ("2024-05-01T12:00:00.123456-02:30", 1714573800_123456),
        (datetime.datetime(1970, 1, 2, tzinfo=datetime.timezone.utc), 86400_000000),
        (Timestamp(7), 7_000000),
        ("9999-12-31T23:59:59.999999+00:00", 253402300799_999999),
    ],
)
def test_parse_event_time_accepts_seconds_and_iso_8601(value, micros):
    assert parse_event_time(value) == Timestamp(micros=micros)


@pytest.mark.parametrize(
    "value, message",
    [
        (None, "field 'ts': event time must be seconds or ISO-8601, got None"),
        (True, "field 'ts': event time must be seconds or ISO-8601, got True"),
        ([1], "field 'ts': event time must be seconds or ISO-8601, got list [1]"),
        ("soon", "field 'ts': event time 'soon' is neither seconds since the epoch nor an "
                 "ISO-8601 date-time"),
        ("2024-05-01T12:00:00", "field 'ts': event time '2024-05-01T12:00:00' has no timezone"),
        (float("nan"), "field 'ts': event time nan is not a finite number"),
        (float("inf"), "field 'ts': event time inf is not a finite number"),
        ("1e999", "field 'ts': event time '1e999' is not a finite number"),
        (-0.5, "field 'ts': event time -0.5 is out of range: it must be at or after "
               "1970-01-01T00:00:00Z and before 10000-01-01T00:00:00Z"),
        ("1969-12-31T23:59:59Z", "is out of range"),
        (253402300800, "field 'ts': event time 253402300800 is out of range"),
        (10 ** 400, "is out of range"),  # beyond float, and far beyond Beam's MAX_TIMESTAMP
        (Timestamp(-1), "is out of range"),
    ],
)
def test_parse_event_time_rejects_with_the_field_and_value(value, message):
    with pytest.raises(ValueError) as raised:
        parse_event_time(value, "ts")
    assert message in str(raised.value)


# --- Window function constructors. ---


def test_constructors_return_the_beam_window_fns():
    assert fixed_windows(60) == window.FixedWindows(60)
    assert fixed_windows(60, offset=15) == window.FixedWindows(60, 15)
    assert sliding_windows(60, 10) == window.SlidingWindows(60, 10)
    assert sliding_windows(60, 60) == window.SlidingWindows(60, 60)
    assert sliding_windows(60, 20, offset=5) == window.SlidingWindows(60, 20, 5)
    assert sessions(30) == window.Sessions(30)
    assert global_window() == window.GlobalWindows()


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: fixed_windows(0), ValueError, "size_seconds must be a finite number of seconds > 0, got 0"),
        (lambda: fixed_windows(-5), ValueError, "size_seconds must be a finite number"),
        (lambda: fixed_windows(float("inf")), ValueError, "size_seconds must be a finite"),
        (lambda: fixed_windows("60"), TypeError, "size_seconds must be a number of seconds, got '60'"),
        (lambda: fixed_windows(True), TypeError, "size_seconds must be a number"),
        (lambda: fixed_windows(60, offset=60), ValueError, "offset must be in [0, size_seconds)"),
        (lambda: fixed_windows(60, offset=-1), ValueError, "offset must be in [0, size_seconds)"),
        (lambda: sliding_windows(10, 20), ValueError,
         "period_seconds (20) must be <= size_seconds (10)"),
        (lambda: sliding_windows(10, 0), ValueError, "period_seconds must be a finite number of seconds > 0"),
        (lambda: sliding_windows(0, 5), ValueError, "size_seconds must be a finite"),
        (lambda: sliding_windows(10, 5, offset=5), ValueError, "offset must be in [0, period_seconds)"),
        (lambda: sessions(0), ValueError, "gap_seconds must be a finite number of seconds > 0"),
        (lambda: sessions(None), TypeError, "gap_seconds must be a number of seconds, got None"),
        (lambda: WithEventTime(42), TypeError, "WithEventTime needs a field name"),
        (lambda: WithEventTime(""), TypeError, "WithEventTime needs a field name"),
    ],
)
def test_invalid_arguments_are_rejected_at_construction(make, error, message):
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value)


# --- Stamping event time. ---


def test_with_event_time_reads_attributes_dict_keys_and_functions(make_pipeline):
    def stamped(record, source, t=beam.DoFn.TimestampParam):
        return source, record, t

    with make_pipeline() as p:
        by_attribute = (p | "Clicks" >> beam.Create([Click("ann", 12.5), Click("bob", 3)])
                        | "FromAttribute" >> WithEventTime("at")
                        | "StampedAttribute" >> beam.Map(stamped, "attribute"))
        by_key = (p | "Dicts" >> beam.Create([{"ts": "1970-01-01T00:01:00Z"}, {"ts": 7}])
                  | "FromKey" >> WithEventTime("ts")
                  | "StampedKey" >> beam.Map(stamped, "key"))
        by_function = (p | "Pairs" >> beam.Create([("x", 100), ("y", 200)])
                       | "FromFunction" >> WithEventTime(lambda pair: pair[1] / 10)
                       | "StampedFunction" >> beam.Map(stamped, "function"))
        assert_that((by_attribute, by_key, by_function) | beam.Flatten(), equal_to([
            ("attribute", Click("ann", 12.5), Timestamp(12.5)),
            ("attribute", Click("bob", 3), Timestamp(3)),
            ("key", {"ts": "1970-01-01T00:01:00Z"}, Timestamp(60)),
            ("key", {"ts": 7}, Timestamp(7)),
            ("function", ("x", 100), Timestamp(10)),
            ("function", ("y", 200), Timestamp(20)),
        ]))


def test_with_event_time_fails_clearly_on_a_record_without_the_field(make_pipeline):
    with pytest.raises(Exception, match="record has no event-time field 'ts'"):
        with make_pipeline() as p:
            _ = p | beam.Create([{"ts": 1}, {"time": 2}]) | WithEventTime("ts")


def test_with_event_time_fails_clearly_on_an_unparseable_time(make_pipeline):
    with pytest.raises(Exception, match="event time 'yesterday' is neither seconds since"):
        with make_pipeline() as p:
            _ = (p | beam.Create([{"at": "yesterday"}])
                 | WithEventTime(lambda record: record["at"]) | beam.Map(print))


# --- Elements land in the right windows. ---


def _window_of(key_count, name, w=beam.DoFn.WindowParam):
    key, count = key_count
    return name, key, count, (w.start.micros / 1e6, w.end.micros / 1e6)


def test_fixed_and_sliding_windows_in_batch(make_pipeline):
    events = [("a", 2), ("a", 7), ("a", 12), ("b", 7)]
    window_fns = {"fixed": fixed_windows(10), "shifted": fixed_windows(10, offset=5),
                  "sliding": sliding_windows(10, 5)}
    with make_pipeline() as p:
        stamped = p | beam.Create(events) | WithEventTime(lambda event: event[1])
        counted = [stamped
                   | f"Window{name}" >> beam.WindowInto(window_fn)
                   | f"Count{name}" >> beam.combiners.Count.PerKey()
                   | f"Describe{name}" >> beam.Map(_window_of, name)
                   for name, window_fn in window_fns.items()]
        assert_that(counted | beam.Flatten(), equal_to([
            ("fixed", "a", 2, (0, 10)), ("fixed", "a", 1, (10, 20)), ("fixed", "b", 1, (0, 10)),
            ("shifted", "a", 1, (-5, 5)), ("shifted", "a", 2, (5, 15)),
            ("shifted", "b", 1, (5, 15)),
            # Each element is in size / period = 2 sliding windows.
            ("sliding", "a", 1, (-5, 5)), ("sliding", "a", 2, (0, 10)),
            ("sliding", "a", 2, (5, 15)), ("sliding", "a", 1, (10, 20)),
            ("sliding", "b", 1, (0, 10)), ("sliding", "b", 1, (5, 15)),
        ]))


def _on_time(key, value, start, end):
    # Streaming: the default trigger never finishes, so no pane is known to be the last.
    return pane_record(key, value, window=(start, end), timestamp=round(end - 1e-6, 6),
                       timing="ON_TIME", index=0, is_first=True, is_last=False)


def test_fixed_and_sliding_window_panes_in_streaming(make_pipeline):
    stream = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("a", 1), 2)])
              .add_elements([window.TimestampedValue(("a", 1), 7)])
              .advance_watermark_to(10)
              .add_elements([window.TimestampedValue(("a", 1), 12)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        events = p | stream
        fixed = (events | "Fixed" >> beam.WindowInto(fixed_windows(10))
                 | "SumFixed" >> beam.CombinePerKey(sum) | "DescribeFixed" >> DescribePanes())
        sliding = (events | "Sliding" >> beam.WindowInto(sliding_windows(10, 5))
                   | "SumSliding" >> beam.CombinePerKey(sum)
                   | "DescribeSliding" >> DescribePanes())
        assert_that(fixed, equal_to([_on_time("a", 2, 0, 10), _on_time("a", 1, 10, 20)]),
                    label="fixed")
        assert_that(sliding, equal_to([_on_time("a", 1, -5, 5), _on_time("a", 2, 0, 10),
                                       _on_time("a", 2, 5, 15), _on_time("a", 1, 10, 20)]),
                    label="sliding")


def test_session_windows_merge_when_a_late_arrival_bridges_the_gap(make_pipeline):
    # Gap 10: "a" at 1 ([1, 11)) and at 20 ([20, 30)) are two sessions until "a" at 10.5
    # ([10.5, 20.5)) arrives and overlaps both. "c" at 0 and 10 only touch: windows are
    # half-open, so [0, 10) and [10, 20) stay apart.
    stream = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("a", 1), 1),
                             window.TimestampedValue(("b", 1), 5),
                             window.TimestampedValue(("c", 1), 0)])
              .add_elements([window.TimestampedValue(("a", 1), 20)])
              .add_elements([window.TimestampedValue(("a", 1), 10.5),
                             window.TimestampedValue(("c", 1), 10)])
              .add_elements([window.TimestampedValue(("b", 1), 40)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        panes = (p | stream
                 | beam.WindowInto(sessions(10))
                 | beam.CombinePerKey(sum)
                 | DescribePanes())
        assert_that(panes, equal_to([_on_time("a", 3, 1, 30), _on_time("b", 1, 5, 15),
                                     _on_time("b", 1, 40, 50), _on_time("c", 1, 0, 10),
                                     _on_time("c", 1, 10, 20)]))


# --- Processing time. ---


def test_with_processing_time_stamps_arrival_time(make_pipeline):
    before = time.time()

    def check(actual):
        after = time.time()
        assert sorted(element for element, _, _ in actual) == ["x", "y", "z"], actual
        for element, stamped, (start, end) in actual:
            # Stamped while the pipeline ran, and windowed around that moment.
            assert before <= stamped <= after, (element, before, stamped, after)
            assert start <= stamped < end and end - start == 3600, (stamped, start, end)
            assert start % 3600 == 0, start

    with make_pipeline() as p:
        windowed = (p | beam.Create(["x", "y", "z"])
                    | WithProcessingTime()
                    | beam.WindowInto(fixed_windows(3600))
                    | beam.Map(lambda element, t=beam.DoFn.TimestampParam,
                               w=beam.DoFn.WindowParam:
                               (element, t.micros / 1e6,
                                (w.start.micros / 1e6, w.end.micros / 1e6))))
        assert_that(windowed, check)
