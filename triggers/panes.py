"""Panes as plain data: what a fired pane looked like, in a form tests and outputs share.

A *pane* is one firing of a trigger for one key and window. Beam attaches its metadata
(:class:`~apache_beam.utils.windowed_value.PaneInfo`) to every element a GroupByKey or
Combine emits. :class:`DescribePanes` turns each element into a JSON-ready dict that names
the key, the window, the value, the element's timestamp and the pane's timing, index and
first/last flags. Jobs write these dicts as JSON lines; tests compare them exactly, so that
a test proves *which* pane carried *which* value on *every* runner.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> from apache_beam.transforms import window
>>> with beam.Pipeline() as p:
...     panes = (p
...              | beam.Create([("red", 3, 5.0)])
...              | beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
...              | beam.WindowInto(window.FixedWindows(10))
...              | beam.CombinePerKey(sum)
...              | DescribePanes())
...     _ = assert_that(panes, equal_to([pane_record(
...         "red", 3, window=(0, 10), timestamp=9.999,
...         timing="ON_TIME", index=0, is_first=True, is_last=False)]))

Timestamps are compared in seconds; Beam encodes element timestamps in milliseconds when
they cross from one stage to the next, so a window's end-of-window timestamp reads 9.999.
The pane is not marked last: Beam's default trigger repeats forever, and only a runner's
batch GroupByKey shortcut marks a single pane as the last one.
"""

from __future__ import annotations

from typing import Any, Optional

import apache_beam as beam
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming

#: The pane timings, as Beam names them: before the watermark, at it, after it.
EARLY = "EARLY"
ON_TIME = "ON_TIME"
LATE = "LATE"
UNKNOWN = "UNKNOWN"


def timestamp_seconds(timestamp: Timestamp) -> Optional[float]:
    """Seconds since the epoch, or None for the ends of time (which JSON cannot hold)."""
    if timestamp >= MAX_TIMESTAMP or timestamp <= MIN_TIMESTAMP:
        return None
    return timestamp.micros / 1e6


def describe_window(window: beam_window.BoundedWindow) -> Any:
    """``{"start": s, "end": e}`` in seconds for an interval window, ``"global"`` otherwise."""
    if isinstance(window, beam_window.IntervalWindow):
        return {"start": timestamp_seconds(window.start), "end": timestamp_seconds(window.end)}
    if isinstance(window, beam_window.GlobalWindow):
        return "global"
    return repr(window)


def describe_pane(pane: PaneInfo) -> dict:
    """The pane's timing name (EARLY, ON_TIME, LATE, UNKNOWN), index and first/last flags."""
    return {
        "timing": PaneInfoTiming.to_string(pane.timing),
        "index": pane.index,
        "is_first": pane.is_first,
        "is_last": pane.is_last,
    }


def pane_record(
    key: Any,
    value: Any,
    *,
    window: Any,
    timestamp: Optional[float],
    timing: str,
    index: int,
    is_first: bool,
    is_last: bool,
) -> dict:
    """Build the dict :class:`DescribePanes` emits; the form tests write expectations in.

    ``window`` is ``(start, end)`` in seconds, or ``"global"``.

    >>> pane_record("a", 1, window=(0, 60), timestamp=59.999999, timing=ON_TIME,
    ...             index=0, is_first=True, is_last=False)["window"]
    {'start': 0.0, 'end': 60.0}
    """
    if isinstance(window, tuple):
        window = {"start": float(window[0]), "end": float(window[1])}
    pane = {"timing": timing, "index": index, "is_first": is_first, "is_last": is_last}
    return {"key": key, "value": value, "window": window, "timestamp": timestamp, "pane": pane}


class _DescribePaneFn(beam.DoFn):
    def __init__(self, keyed: bool) -> None:
        self._keyed = keyed

    def process(
        self,
        element,
        window=beam.DoFn.WindowParam,
        timestamp=beam.DoFn.TimestampParam,
        pane=beam.DoFn.PaneInfoParam,
    ):
        key, value = element if self._keyed else (None, element)
        yield {
            "key": key,
            "value": value,
            "window": describe_window(window),
            "timestamp": timestamp_seconds(timestamp),
            "pane": describe_pane(pane),
        }


class DescribePanes(beam.PTransform):
    """Describe every element's key, value, window, timestamp and pane as a dict.

    Input: ``(key, value)`` pairs (``keyed=True``, the default) or bare values
    (``keyed=False``: the record's key is None). Output: dicts as built by
    :func:`pane_record`.
    """

    def __init__(self, keyed: bool = True, label: Optional[str] = None) -> None:
        super().__init__(label)
        self._keyed = keyed

    def expand(self, pcoll):
        return pcoll | "Describe" >> beam.ParDo(_DescribePaneFn(self._keyed))
