"""The *where*: event-time stamping and validated window functions.

Every element carries an event time (when it happened, stamped at the source) and is seen
at a processing time (when the pipeline reads it). Windows group elements by one of the two:

* :class:`WithEventTime` stamps each element with the event time read from the record, so
  windows follow event time (the Dataflow model's default and the only deterministic one).
* :class:`WithProcessingTime` stamps each element with the wall-clock time at which it
  arrives, so event-time windows downstream become processing-time windows.

Stamping does not re-window: follow it with ``beam.WindowInto(<window fn>)``, built with
:func:`fixed_windows`, :func:`sliding_windows`, :func:`sessions` or :func:`global_window`.
These constructors validate their arguments and say what to change, where Beam's classes
would accept a zero size or a period longer than the window and fail later or silently.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     counts = (p
...               | beam.Create([{"user": "a", "ts": 5}, {"user": "a", "ts": 65}])
...               | WithEventTime("ts")
...               | beam.WindowInto(fixed_windows(60))
...               | beam.Map(lambda event: (event["user"], 1))
...               | beam.CombinePerKey(sum))
...     _ = assert_that(counts, equal_to([("a", 1), ("a", 1)]))
"""

from __future__ import annotations

import datetime
import math
import re
from numbers import Real
from typing import Any, Callable, Optional, Union

import apache_beam as beam
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from transforms.iso8601 import InvalidDateTime, parse_iso8601

__all__ = [
    "EARLIEST_EVENT_TIME",
    "LATEST_EVENT_TIME",
    "parse_event_time",
    "WithEventTime",
    "WithProcessingTime",
    "fixed_windows",
    "sliding_windows",
    "sessions",
    "global_window",
]

#: Event times are accepted from the epoch (inclusive) ...
EARLIEST_EVENT_TIME = Timestamp(0)
#: ... up to the start of year 10000 (exclusive): the range ISO-8601 and datetime can write,
#: well inside Beam's own [MIN_TIMESTAMP, MAX_TIMESTAMP] (checked below, at import time).
LATEST_EVENT_TIME = Timestamp(253402300800)  # 10000-01-01T00:00:00Z
assert MIN_TIMESTAMP < EARLIEST_EVENT_TIME < LATEST_EVENT_TIME < MAX_TIMESTAMP

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_NUMBER_TEXT = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def _describe(field: str) -> str:
    return f"field {field!r}: " if field else ""


def parse_event_time(value: Any, field: str = "") -> Timestamp:
    """Convert a record's event time to a Beam Timestamp, or raise ValueError.

    Accepted: ``int``/``float`` seconds since the epoch; a string holding such a number;
    an ISO-8601 string *with* a UTC offset (``2024-05-01T12:00:00Z``,
    ``...+02:00``), converted to UTC, read the same on every Python (the grammar is
    :mod:`transforms.iso8601`'s); a timezone-aware ``datetime``; a Beam ``Timestamp``.
    The time must be finite and in ``[1970-01-01, 10000-01-01)``. The error message names
    ``field`` and the offending value, so it can serve as a dead-letter reason.
    Microseconds are kept here, but Beam encodes element timestamps between stages in
    milliseconds, so keep event times millisecond-exact where results must match exactly.

    >>> parse_event_time("1970-01-01T01:00:00+01:00")
    Timestamp(0)
    >>> parse_event_time(1.5).micros
    1500000
    """
    prefix = _describe(field)
    if isinstance(value, Timestamp):
        timestamp = value
    elif isinstance(value, bool) or value is None:
        raise ValueError(f"{prefix}event time must be seconds or ISO-8601, got {value!r}")
    elif isinstance(value, Real):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float is far past year 9999
            raise ValueError(_out_of_range(prefix, value)) from None
        timestamp = _seconds_to_timestamp(seconds, value, prefix)
    elif isinstance(value, datetime.datetime):
        timestamp = _datetime_to_timestamp(value, value, prefix)
    elif isinstance(value, str):
        text = value.strip()
        if _NUMBER_TEXT.fullmatch(text):
            timestamp = _seconds_to_timestamp(float(text), value, prefix)
        else:
            try:
                parsed = parse_iso8601(text)
            except InvalidDateTime as error:
                raise ValueError(f"{prefix}event time {error}") from None
            except ValueError:
                raise ValueError(
                    f"{prefix}event time {value!r} is neither seconds since the epoch "
                    "nor an ISO-8601 date-time"
                ) from None
            timestamp = _datetime_to_timestamp(parsed, value, prefix)
    else:
        raise ValueError(
            f"{prefix}event time must be seconds or ISO-8601, got {type(value).__name__} "
            f"{value!r}"
        )
    if not EARLIEST_EVENT_TIME <= timestamp < LATEST_EVENT_TIME:
        raise ValueError(_out_of_range(prefix, value))
    return timestamp


def _out_of_range(prefix: str, value: Any) -> str:
    return (
        f"{prefix}event time {value!r} is out of range: it must be at or after "
        "1970-01-01T00:00:00Z and before 10000-01-01T00:00:00Z"
    )


def _seconds_to_timestamp(seconds: float, value: Any, prefix: str) -> Timestamp:
    if not math.isfinite(seconds):
        raise ValueError(f"{prefix}event time {value!r} is not a finite number")
    if not EARLIEST_EVENT_TIME.seconds() <= seconds < LATEST_EVENT_TIME.seconds():
        # Checked before Timestamp(): Beam overflows on huge seconds instead of saying so.
        raise ValueError(_out_of_range(prefix, value))
    return Timestamp(seconds)


def _datetime_to_timestamp(moment: datetime.datetime, value: Any, prefix: str) -> Timestamp:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(
            f"{prefix}event time {value!r} has no timezone; add one (e.g. 'Z' or '+00:00') "
            "so it names a single instant"
        )
    # Exact integer microseconds: float seconds would round far-future times.
    delta = moment - _EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return Timestamp(micros=micros)


def _field_reader(field_or_function: Union[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    if callable(field_or_function):
        return field_or_function
    if not isinstance(field_or_function, str) or not field_or_function:
        raise TypeError(
            "WithEventTime needs a field name (attribute or dict key) or a function of the "
            f"record, got {field_or_function!r}"
        )
    field = field_or_function

    def read(record: Any) -> Any:
        if isinstance(record, dict):
            if field not in record:
                raise ValueError(f"record has no event-time field {field!r}: {record!r}")
            return record[field]
        try:
            return getattr(record, field)
        except AttributeError:
            raise ValueError(f"record has no event-time field {field!r}: {record!r}") from None

    return read


class _StampEventTimeFn(beam.DoFn):
    def __init__(self, read: Callable[[Any], Any], field: str) -> None:
        self._read = read
        self._field = field

    def process(self, element):
        yield beam_window.TimestampedValue(
            element, parse_event_time(self._read(element), self._field)
        )


class WithEventTime(beam.PTransform):
    """Set each element's timestamp to its event time, read from the record.

    ``field_or_function`` is an attribute name (NamedTuple, object), a dict key, or a
    function of the record returning the time. The time may be seconds since the epoch
    (int/float) or an ISO-8601 string with a timezone (see :func:`parse_event_time`).

    WithEventTime expects *validated* records: a missing or unparseable time raises
    ValueError naming the field and value, which fails the pipeline. Untrusted input should
    go through :mod:`transforms.parsing` first, which stamps event time itself and routes
    bad records to a dead-letter output instead.
    """

    def __init__(
        self,
        field_or_function: Union[str, Callable[[Any], Any]],
        label: Optional[str] = None,
    ) -> None:
        super().__init__(label)
        self._read = _field_reader(field_or_function)
        self._field = field_or_function if isinstance(field_or_function, str) else ""

    def expand(self, pcoll):
        return pcoll | "StampEventTime" >> beam.ParDo(_StampEventTimeFn(self._read, self._field))


class _StampProcessingTimeFn(beam.DoFn):
    def process(self, element):
        yield beam_window.TimestampedValue(element, Timestamp.now())


class WithProcessingTime(beam.PTransform):
    """Set each element's timestamp to the wall-clock time at which this step sees it.

    Downstream windows then group by *processing* time: "the last minute of arrivals"
    rather than "what happened in that minute". This is non-deterministic by nature: the
    same input gives different windows on every run, so use it for processing-time
    windowing (monitoring, load shedding) and never where results must be reproducible.
    """

    def expand(self, pcoll):
        return pcoll | "StampProcessingTime" >> beam.ParDo(_StampProcessingTimeFn())


def _positive_seconds(name: str, value: Any, hint: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}; {hint}")
    return value


def fixed_windows(size_seconds: float, offset: float = 0) -> beam_window.FixedWindows:
    """Tumbling windows ``[offset + k*size, offset + (k+1)*size)`` of event time.

    ``offset`` shifts the window boundaries (``0 <= offset < size``), e.g. hourly windows
    that start at a quarter past.

    >>> from apache_beam.transforms.window import WindowFn
    >>> fixed_windows(60, offset=15).assign(WindowFn.AssignContext(Timestamp(75)))
    [[75.0, 135.0)]
    """
    size = _positive_seconds("size_seconds", size_seconds, "use the window length")
    if isinstance(offset, bool) or not isinstance(offset, Real) or not math.isfinite(offset):
        raise TypeError(f"offset must be a finite number of seconds, got {offset!r}")
    if not 0 <= offset < size:
        raise ValueError(
            f"offset must be in [0, size_seconds) = [0, {size}), got {offset}; "
            "an offset of a whole window is the same windows, so take it modulo the size"
        )
    return beam_window.FixedWindows(size, offset)


def sliding_windows(
    size_seconds: float, period_seconds: float, offset: float = 0
) -> beam_window.SlidingWindows:
    """Overlapping windows of ``size_seconds``, a new one starting every ``period_seconds``.

    Each element lands in ``size / period`` windows (rounded up). The period must not exceed
    the size: a longer period would leave gaps of event time in no window at all (use
    :func:`fixed_windows` for period == size).
    """
    size = _positive_seconds("size_seconds", size_seconds, "use the window length")
    period = _positive_seconds(
        "period_seconds", period_seconds, "use how often a new window starts"
    )
    if period > size:
        raise ValueError(
            f"period_seconds ({period}) must be <= size_seconds ({size}): a period longer "
            "than the window leaves elements in no window; lower the period or enlarge "
            "the window"
        )
    if isinstance(offset, bool) or not isinstance(offset, Real) or not math.isfinite(offset):
        raise TypeError(f"offset must be a finite number of seconds, got {offset!r}")
    if not 0 <= offset < period:
        raise ValueError(f"offset must be in [0, period_seconds) = [0, {period}), got {offset}")
    return beam_window.SlidingWindows(size, period, offset)


def sessions(gap_seconds: float) -> beam_window.Sessions:
    """Session windows per key: elements closer than ``gap_seconds`` merge into one window.

    A lone element at time t gets ``[t, t + gap)``; windows that overlap merge.
    """
    gap = _positive_seconds("gap_seconds", gap_seconds, "use the idle time that ends a session")
    return beam_window.Sessions(gap)


def global_window() -> beam_window.GlobalWindows:
    """The single window holding all of time; results come from triggers, not window ends."""
    return beam_window.GlobalWindows()
