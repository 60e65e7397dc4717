"""Accumulating-and-retracting panes, which Beam does not have: :class:`WithRetractions`.

In accumulating mode every pane of a key and window carries the total so far, so each pane
supersedes the previous one. A downstream consumer that only keeps "the latest" is fine; one
that *combines* the panes (sums them, re-keys them, counts them per bucket) double counts.
The Dataflow model's answer is *retraction*: with each new pane, also emit the previous
value, marked as retracted, so every consumer can undo what it did with it.

Output: one :class:`Refinement` per value, in the window of the pane it belongs to.
For each accumulating pane of ``(key, window)`` WithRetractions emits, in this order,

1. a retraction (``retraction=True``) of the value previously emitted for that key and
   window, unless this is the window's first pane;
2. for merging windows (sessions): a retraction of the last value of every window of the
   same key that this pane's window *merged away* (contains), placed in that old window;
3. the new value (``retraction=False``).

We chose two records per pane rather than one record holding old and new values because a
retraction must be able to travel on its own: a consumer that re-keys by the value
(e.g. "how many users have a score of 10?") must send the retraction of 8 to key 8 and the
new 10 to key 10. With :attr:`Refinement.signed_value` (``-value`` for retractions),
``sum(signed_value)`` over all refinements of a key and window equals the latest pane's
value at every point; across the windows a session merged, the sum over the old windows
is 0 and the merged window holds the total.

"Retractable" values are those for which that sum makes sense: numbers (int, float,
Decimal, Fraction, complex) or objects with ``__neg__`` and ``__add__``
(see :func:`triggers.validation.is_retractable`).

Ordering: the state that remembers each window's last emitted value is per key, in the
global window (Beam's per-window state could not see the windows a session merged away).
Panes are ordered by :attr:`PaneInfo.index`, not by arrival: a pane whose index is not newer
than the last one emitted for its window, or a pane of a window already merged away, is
superseded (an accumulating pane includes everything before it), so it is skipped and
counted (namespace ``retractions``, name ``superseded_panes``), never silently.
A window's memory is released when the watermark passes its end plus the allowed lateness.

Example:

>>> import apache_beam as beam
>>> with beam.Pipeline() as p:
...     refinements = (p | beam.Create([("a", 1)]) | WithRetractions())
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Duration, Timestamp

from triggers.panes import timestamp_seconds


class Refinement(NamedTuple):
    """One refinement of a key's aggregate in one window.

    ``value`` is the aggregate as the pane carried it; ``retraction`` says it withdraws a
    value emitted before. ``window_start``/``window_end`` are seconds (None for the global
    window); ``pane_index`` is the index of the pane that caused this refinement.
    """

    key: Any
    value: Any
    retraction: bool
    window_start: Optional[float]
    window_end: Optional[float]
    pane_index: int

    @property
    def signed_value(self) -> Any:
        """``-value`` for a retraction, ``value`` otherwise: sum these downstream."""
        return -self.value if self.retraction else self.value


class _Pane(NamedTuple):
    value: Any
    window: Optional[Tuple[int, int]]  # (start, end) in microseconds; None = global
    index: int
    timestamp: Timestamp


def _window_key(window: beam_window.BoundedWindow) -> Optional[Tuple[int, int]]:
    if isinstance(window, beam_window.IntervalWindow):
        return (window.start.micros, window.end.micros)
    if isinstance(window, beam_window.GlobalWindow):
        return None
    raise TypeError(
        f"WithRetractions supports the global window and interval windows (fixed, sliding, "
        f"sessions); got a {type(window).__name__}."
    )


class _CapturePaneFn(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam,
                timestamp=beam.DoFn.TimestampParam, pane=beam.DoFn.PaneInfoParam):
        key, value = element
        yield key, _Pane(value, _window_key(window), pane.index, timestamp)


class _RetractFn(beam.DoFn):
    """Per key (global window): remember each window's last value; retract it when replaced."""

    # window key -> (value, pane index, pane timestamp) of the last value emitted.
    EMITTED = ReadModifyWriteStateSpec("emitted", PickleCoder())
    # window key -> True for windows merged away (their late panes are superseded).
    MERGED_AWAY = ReadModifyWriteStateSpec("merged_away", PickleCoder())
    RELEASE = TimerSpec("release", TimeDomain.WATERMARK)
    RELEASE_AT = ReadModifyWriteStateSpec("release_at", PickleCoder())

    def __init__(self, merging: bool, allowed_lateness_micros: int) -> None:
        self._merging = merging
        self._lateness = allowed_lateness_micros
        self._superseded = Metrics.counter("retractions", "superseded_panes")

    def _release_time(self, window: Optional[Tuple[int, int]]) -> Optional[int]:
        # One microsecond past end + lateness: the first watermark at which the GroupByKey
        # upstream drops the window's data (it drops when watermark > end + lateness).
        if window is None:
            return None
        return window[1] + self._lateness + 1

    def process(self, element, emitted=beam.DoFn.StateParam(EMITTED),
                merged_away=beam.DoFn.StateParam(MERGED_AWAY),
                release=beam.DoFn.TimerParam(RELEASE),
                release_at=beam.DoFn.StateParam(RELEASE_AT)):
        key, pane = element
        windows = emitted.read() or {}
        gone = merged_away.read() or {}
        previous = windows.get(pane.window)
        if pane.window in gone or (previous is not None and pane.index <= previous[1]):
            self._superseded.inc()
            return
        if previous is not None:
            yield self._refinement(key, pane.window, previous, retraction=True, index=pane.index)
        if self._merging and pane.window is not None:
            start, end = pane.window
            for old in [w for w in windows if w != pane.window and start <= w[0] and w[1] <= end]:
                yield self._refinement(key, old, windows.pop(old), retraction=True,
                                       index=pane.index)
                gone[old] = True
            merged_away.write(gone)
        windows[pane.window] = (pane.value, pane.index, pane.timestamp)
        emitted.write(windows)
        yield self._refinement(key, pane.window, windows[pane.window], retraction=False,
                               index=pane.index)
        when = self._release_time(pane.window)
        current = release_at.read()
        if when is not None and (current is None or when < current):
            release.set(Timestamp(micros=when))
            release_at.write(when)

    @on_timer(RELEASE)
    def release_windows(self, timer_time=beam.DoFn.TimestampParam,
                        emitted=beam.DoFn.StateParam(EMITTED),
                        merged_away=beam.DoFn.StateParam(MERGED_AWAY),
                        release=beam.DoFn.TimerParam(RELEASE),
                        release_at=beam.DoFn.StateParam(RELEASE_AT)):
        now = timer_time.micros
        windows = {w: v for w, v in (emitted.read() or {}).items()
                   if w is None or self._release_time(w) > now}
        gone = {w: v for w, v in (merged_away.read() or {}).items() if self._release_time(w) > now}
        pending = [self._release_time(w) for w in list(windows) + list(gone) if w is not None]
        if windows:
            emitted.write(windows)
        else:
            emitted.clear()
        if gone:
            merged_away.write(gone)
        else:
            merged_away.clear()
        if pending:
            release.set(Timestamp(micros=min(pending)))
            release_at.write(min(pending))
        else:
            release_at.clear()
        return []

    @staticmethod
    def _refinement(key, window, emitted, retraction: bool, index: int):
        value, _, timestamp = emitted
        start = end = None
        if window is not None:
            start = timestamp_seconds(Timestamp(micros=window[0]))
            end = timestamp_seconds(Timestamp(micros=window[1]))
        refinement = Refinement(key, value, retraction, start, end, index)
        return beam_window.TimestampedValue(refinement, timestamp)


class _RefinementWindows(beam_window.NonMergingWindowFn):
    """Put each refinement back into the interval window its pane belonged to."""

    def assign(self, context):
        refinement = context.element
        return [beam_window.IntervalWindow(refinement.window_start, refinement.window_end)]

    def get_window_coder(self):
        return beam.coders.coders.IntervalWindowCoder()


class WithRetractions(beam.PTransform):
    """Turn accumulating panes ``(key, value)`` into :class:`Refinement` records.

    Input: the output of an ACCUMULATING windowed GroupByKey/Combine. Output: Refinements,
    each in the window of the pane it refines (global or interval windows), with the
    input's allowed lateness; see the module docstring for the order and the guarantee.
    """

    def expand(self, pcoll):
        windowing = pcoll.windowing
        window_fn = windowing.windowfn
        lateness = Duration.of(windowing.allowed_lateness)
        retract = _RetractFn(window_fn.is_merging(), lateness.micros)
        refinements = (
            pcoll
            | "CapturePane" >> beam.ParDo(_CapturePaneFn())
            | "InGlobalWindow" >> beam.WindowInto(beam_window.GlobalWindows())
            | "Retract" >> beam.ParDo(retract)
        )
        if isinstance(window_fn, beam_window.GlobalWindows):
            return refinements
        return refinements | "InPaneWindow" >> beam.WindowInto(
            _RefinementWindows(), allowed_lateness=lateness)
