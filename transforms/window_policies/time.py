"""Time-based windows: a window per key closes a period after its first tuple.

``TimeWindow(period_seconds, domain="event")``: per key, the first tuple (at event time
``f``) opens a window covering event times ``[f, f + period)``. An event-time timer closes
it (``reason="time"``) when the watermark reaches ``f + period`` (rounded up to the
millisecond, the resolution of Beam timers), even if no later tuple arrives; the window is
emitted at that time. The next tuple of the key opens the next window. Windows are
data-driven, not aligned to the epoch like Beam's FixedWindows. At the end of input the
open window's period has passed in event time, so it too closes with ``reason="time"``.
Tuples are taken in event-time order and late tuples handled as described in
:mod:`transforms.window_policies.buffer`.

``TimeWindow(period_seconds, domain="processing")``: per key, the first tuple to *arrive*
opens a window that closes ``period`` later on the runner's processing-time clock; it
holds every tuple of the key that arrived in between (``reason="time"``), sorted by event
time then encoded bytes. Which tuples share a window depends on arrival, so it is only
deterministic where arrival is (TestStream's ``advance_processing_time``). At the end of
input the tuples that arrived since the last firing form one last window
(``reason="end_of_input"``, ``complete=False``). Nothing is late in processing time.
Each window is emitted at the event time of its last tuple.

Why processing time is not a stateful DoFn: a Python DoFn cannot read the runner's
processing-time clock (Beam's Python SDK has no relative timers and no clock parameter;
``time.time()`` is not the TestStream clock), so it cannot set a timer ``period`` after
an arrival. Beam's ``AfterProcessingTime`` trigger is set by the runner, on its own
clock; the processing-time policy is therefore a GroupByKey in the global window with
``AfterWatermark(early=AfterProcessingTime(period))`` and discarding panes. That trigger
carries whole seconds through the portable pipeline proto, so the processing-time period
must be a whole number of seconds, and the input must be in the global window.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     windows = (p
...                | beam.Create([("a", n) for n in (0, 3, 12)])
...                | beam.Map(lambda kv: beam.window.TimestampedValue(kv, kv[1]))
...                | TimeWindow(10)
...                | beam.Map(lambda w: (w.value, w.reason)))
...     _ = assert_that(windows, equal_to([((0, 3), "time"), ((12,), "time")]))
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Iterable, Optional, Tuple

import apache_beam as beam
from apache_beam.transforms import core, trigger
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming

from transforms.window_policies.buffer import (
    END_OF_INPUT,
    TIME,
    ApplyWindowPolicy,
    Item,
    WindowBuffer,
    WindowPolicy,
    as_combine_fn,
    build_window,
    sort_items,
    value_coder_of,
)

__all__ = ["TimeWindow", "EVENT_TIME", "PROCESSING_TIME"]

EVENT_TIME = "event"
PROCESSING_TIME = "processing"


class EventTimePolicy(WindowPolicy):
    """Closes the window once event time passes ``[first, first + period)``."""

    def __init__(self, period_micros: int) -> None:
        self.period_micros = period_micros

    def deadline_micros(self, buffer: WindowBuffer) -> Optional[int]:
        if not buffer.items:
            return None
        return buffer.items[0].timestamp_micros + self.period_micros - 1

    def expire(self, buffer: WindowBuffer) -> None:
        buffer.close(TIME)

    def admit(self, buffer: WindowBuffer, item: Item) -> None:
        deadline = self.deadline_micros(buffer)
        if deadline is not None and item.timestamp_micros > deadline:
            buffer.close(TIME)
        buffer.append(item)


class _PanesToWindows(beam.DoFn):
    """Turns each processing-time pane into a PolicyWindow in a deterministic order."""

    def __init__(self, value_coder: beam.coders.Coder, combine_fn: Optional[core.CombineFn]):
        self._value_coder = value_coder
        self._combine_fn = combine_fn

    def setup(self) -> None:
        if self._combine_fn is not None:
            self._combine_fn.setup()

    def teardown(self) -> None:
        if self._combine_fn is not None:
            self._combine_fn.teardown()

    def process(self, element: Tuple[Any, Iterable[Tuple[int, Any]]],
                pane=beam.DoFn.PaneInfoParam):
        key, stamped = element
        items = sort_items(Item(micros, self._value_coder.encode(value), value)
                           for micros, value in stamped)
        if not items:
            return  # The on-time pane of a key whose tuples all left in early panes.
        early = pane.timing == PaneInfoTiming.EARLY
        window = build_window(key, items, TIME if early else END_OF_INPUT, early,
                              self._combine_fn)
        # Later than the pane's own timestamp (its earliest tuple), so never late.
        yield beam_window.TimestampedValue(window, Timestamp(micros=items[-1].timestamp_micros))


class _ProcessingTimeWindow(beam.PTransform):
    def __init__(self, period_seconds: int, combine_fn: Optional[core.CombineFn]) -> None:
        super().__init__()
        self._period_seconds = period_seconds
        self._combine_fn = combine_fn

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        windowing = keyed.windowing
        if not isinstance(windowing.windowfn, beam_window.GlobalWindows):
            raise ValueError(
                f"TimeWindow(domain='processing') needs input in the global window, got "
                f"{windowing.windowfn!r}; apply it before beam.WindowInto (or re-window "
                "with beam.WindowInto(beam.window.GlobalWindows()))"
            )
        panes = (
            keyed
            | "StampEventTime" >> beam.Map(
                lambda kv, ts=beam.DoFn.TimestampParam: (kv[0], (ts.micros, kv[1])))
            | "FireAfterPeriod" >> beam.WindowInto(
                beam_window.GlobalWindows(),
                trigger=trigger.AfterWatermark(
                    early=trigger.AfterProcessingTime(self._period_seconds)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                timestamp_combiner=beam_window.TimestampCombiner.OUTPUT_AT_EARLIEST)
            | "Collect" >> beam.GroupByKey()
        )
        windows = panes | "ToPolicyWindows" >> beam.ParDo(
            _PanesToWindows(value_coder_of(keyed), self._combine_fn))
        return windows | "RestoreWindowing" >> beam.WindowInto(
            windowing.windowfn,
            trigger=windowing.triggerfn,
            accumulation_mode=windowing.accumulation_mode,
            timestamp_combiner=windowing.timestamp_combiner,
            allowed_lateness=windowing.allowed_lateness,
        )


class TimeWindow(beam.PTransform):
    """Time-based windows over keyed tuples, in event time or processing time.

    Args:
      period_seconds: window length (> 0); a whole number of seconds for processing time.
      domain: "event" (event-time timer, the default) or "processing".
      combine_fn: None to emit each window's elements, or a CombineFn (or callable).
    """

    def __init__(self, period_seconds: float, domain: str = EVENT_TIME, combine_fn: Any = None,
                 label: Optional[str] = None) -> None:
        super().__init__(label)
        if isinstance(period_seconds, bool) or not isinstance(period_seconds, Real):
            raise TypeError(f"period_seconds={period_seconds!r} must be a number of seconds")
        if not period_seconds > 0 or not math.isfinite(period_seconds):
            raise ValueError(f"period_seconds={period_seconds} must be a finite number > 0")
        if domain not in (EVENT_TIME, PROCESSING_TIME):
            raise ValueError(f"domain={domain!r} must be 'event' or 'processing'")
        period_micros = round(period_seconds * 1_000_000)
        if period_micros < 1000:
            raise ValueError(
                f"period_seconds={period_seconds} is shorter than 1 millisecond, the "
                "resolution of Beam timers; use period_seconds >= 0.001")
        if domain == PROCESSING_TIME and period_seconds != int(period_seconds):
            raise ValueError(
                f"period_seconds={period_seconds}: processing-time windows take whole "
                "seconds (Beam's AfterProcessingTime keeps only those); use "
                f"period_seconds={max(1, round(period_seconds))}"
            )
        self.period_seconds = period_seconds
        self.domain = domain
        if domain == EVENT_TIME:
            self._apply: beam.PTransform = ApplyWindowPolicy(
                EventTimePolicy(period_micros), combine_fn)
        else:
            self._apply = _ProcessingTimeWindow(int(period_seconds), as_combine_fn(combine_fn))

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return keyed | f"{self.domain.capitalize()}TimePolicy" >> self._apply
