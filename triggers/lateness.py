"""Data past the allowed lateness is dropped *and counted*: :class:`CountDroppedLateData`.

Beam Python's trigger driver drops an element when, at the GroupByKey, the input watermark
is already past its window's end plus the allowed lateness
(``GeneralTriggerDriver.process_elements``: ``if input_watermark > window.end +
allowed_lateness: continue``), silently and without a counter. A DoFn cannot read the
watermark, so this transform reproduces the decision instead of guessing it:

1. ``Identify``: window the input exactly as the aggregation does (same WindowFn, same
   allowed lateness) with a trigger that fires for every element, and give each
   (element, window) pair a unique id.
2. ``Keep``: a GroupByKey on that collection. Beam's own trigger driver decides, with the
   same rule and the same input watermark as the aggregation's GroupByKey, which
   (element, window) pairs it keeps; those come out, by id, in panes.
3. ``Reconcile``: per key (in the global window, so nothing expires there), every arrival
   waits for its "kept" record. An event-time timer at ``window end + allowed lateness +
   1 microsecond`` fires once the watermark has passed the point after which the
   GroupByKey drops the window's data; an arrival still not kept then was dropped: a
   :class:`DroppedElement` is emitted (a dead letter for late data) and counted in
   ``lateness/dropped_late_data`` (counted downstream of the timer: the DirectRunner
   does not report metrics updated inside ``on_timer``).

DirectRunner caveat (a Beam bug, apache-beam 2.77): in streaming, the DirectRunner's
``StateSampler.scoped_state`` caches the MetricsContainer of the first bundle a worker
thread ran for a step, so counter updates of that step's later bundles are never
committed: ``result.metrics()`` under-reports *every* user counter there, this one
included. The :class:`DroppedElement` output is exact on the DirectRunner.

Precision. The count is of (element, window) pairs, as Beam Java's
``droppedDueToLateness`` counts: an element dropped from three sliding windows counts 3.
It is exact when every kept pair's "kept" record reaches ``Reconcile`` before the timer
for its window fires. Beam's watermark guarantees it for data that was on time at the
GroupByKey; for data kept while late (within the allowed lateness) it relies on the runner
processing a stage's elements before the timers fired by a later watermark, which the
DirectRunner does (it feeds TestStream events one at a time, once the pipeline is
quiescent) and our Spark runner's micro-batches do (elements, then timers, per batch).
The counter is incremented only once a drop is certain, never ahead of time: a
dashboard never shows data as dropped that is still on its way. Merging windows (sessions)
are compared on the window assigned to the element before merging, which is what the
trigger driver compares too.

Example:

>>> import apache_beam as beam
>>> from apache_beam.transforms import window
>>> with beam.Pipeline() as p:
...     dropped = (p | beam.Create([("a", 1)])
...                  | CountDroppedLateData(window.FixedWindows(60), allowed_lateness=0))
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple, Optional

import apache_beam as beam
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as beam_window
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.trigger import AccumulationMode, AfterCount, Repeatedly
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer
from apache_beam.utils.timestamp import Duration, Timestamp

from triggers.panes import timestamp_seconds
from triggers.presets import check_lateness

#: Where to read the count: ``result.metrics()`` counter in this namespace, with this name.
NAMESPACE = "lateness"
DROPPED_LATE_DATA = "dropped_late_data"


class DroppedElement(NamedTuple):
    """An element dropped for lateness from one window (seconds; None for the global window)."""

    key: Any
    value: Any
    timestamp: float
    window_start: Optional[float]
    window_end: Optional[float]


class _Arrival(NamedTuple):
    id: str
    value: Any
    timestamp: Timestamp
    window_start: Optional[float]
    window_end: Optional[float]
    deadline_micros: Optional[int]  # end + lateness; None: the window never expires


class _IdentifyFn(beam.DoFn):
    def __init__(self, allowed_lateness_micros: int) -> None:
        self._lateness = allowed_lateness_micros

    def process(self, element, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam):
        key, value = element
        start = end = deadline = None
        if isinstance(window, beam_window.IntervalWindow):
            start, end = timestamp_seconds(window.start), timestamp_seconds(window.end)
            deadline = window.end.micros + self._lateness
        yield key, _Arrival(uuid.uuid4().hex, value, timestamp, start, end, deadline)


def _kept_ids(element):
    key, arrivals = element
    yield key, ("kept", [arrival.id for arrival in arrivals])


class _ReconcileFn(beam.DoFn):
    """Per key: arrivals not kept by the time their window expired were dropped."""

    WAITING = ReadModifyWriteStateSpec("waiting", PickleCoder())  # id -> _Arrival
    KEPT_FIRST = ReadModifyWriteStateSpec("kept_first", PickleCoder())  # ids kept before arrival
    EXPIRY = TimerSpec("expiry", TimeDomain.WATERMARK)
    EXPIRY_AT = ReadModifyWriteStateSpec("expiry_at", PickleCoder())

    def process(self, element, waiting=beam.DoFn.StateParam(WAITING),
                kept_first=beam.DoFn.StateParam(KEPT_FIRST),
                expiry=beam.DoFn.TimerParam(EXPIRY),
                expiry_at=beam.DoFn.StateParam(EXPIRY_AT)):
        _, (kind, payload) = element
        pending = waiting.read() or {}
        early_kept = kept_first.read() or set()
        if kind == "kept":
            for arrival_id in payload:
                if pending.pop(arrival_id, None) is None:
                    early_kept.add(arrival_id)
        elif payload.id in early_kept:
            early_kept.discard(payload.id)
        elif payload.deadline_micros is not None:
            pending[payload.id] = payload
            # +1: the GroupByKey drops only once watermark > deadline; a timer fires at
            # watermark >= its time.
            when = payload.deadline_micros + 1
            current = expiry_at.read()
            if current is None or when < current:
                expiry.set(Timestamp(micros=when))
                expiry_at.write(when)
        self._write(waiting, pending)
        self._write(kept_first, early_kept)

    @on_timer(EXPIRY)
    def expire(self, key=beam.DoFn.KeyParam, timer_time=beam.DoFn.TimestampParam,
               waiting=beam.DoFn.StateParam(WAITING), expiry=beam.DoFn.TimerParam(EXPIRY),
               expiry_at=beam.DoFn.StateParam(EXPIRY_AT)):
        now = timer_time.micros
        pending = waiting.read() or {}
        for arrival_id, arrival in sorted(pending.items(), key=lambda item: item[1].timestamp):
            if arrival.deadline_micros + 1 <= now:
                del pending[arrival_id]
                yield DroppedElement(key, arrival.value, timestamp_seconds(arrival.timestamp),
                                     arrival.window_start, arrival.window_end)
        self._write(waiting, pending)
        if pending:
            next_time = min(arrival.deadline_micros for arrival in pending.values()) + 1
            expiry.set(Timestamp(micros=next_time))
            expiry_at.write(next_time)
        else:
            expiry_at.clear()

    @staticmethod
    def _write(state, contents) -> None:
        if contents:
            state.write(contents)
        else:
            state.clear()


class _CountFn(beam.DoFn):
    # Counted here, not in the timer callback: the DirectRunner does not report metrics
    # updated inside on_timer.
    def __init__(self, namespace: str, name: str) -> None:
        self._dropped = Metrics.counter(namespace, name)

    def process(self, element):
        self._dropped.inc()
        yield element


class CountDroppedLateData(beam.PTransform):
    """Count (and emit) the ``(key, value)`` elements an aggregation drops for lateness.

    Apply it to the same un-windowed, keyed input as the aggregation, with the same
    ``where`` and ``allowed_lateness`` (seconds). Output: :class:`DroppedElement` records
    in the global window; the counter ``lateness/dropped_late_data`` (``namespace``/``name``)
    counts them. :class:`triggers.model.WindowedAggregation` applies it for you.
    """

    def __init__(self, where: beam_window.WindowFn, allowed_lateness: float = 0,
                 namespace: str = NAMESPACE, name: str = DROPPED_LATE_DATA,
                 label: Optional[str] = None) -> None:
        super().__init__(label)
        if not isinstance(where, beam_window.WindowFn):
            raise TypeError(f"where must be a Beam WindowFn (e.g. FixedWindows(60)), got {where!r}")
        check_lateness(allowed_lateness)
        self._where = where
        self._lateness = Duration.of(allowed_lateness)
        self._namespace = namespace
        self._name = name

    def expand(self, pcoll):
        identified = (
            pcoll
            | "WindowLikeTheAggregation" >> beam.WindowInto(
                self._where, trigger=Repeatedly(AfterCount(1)),
                accumulation_mode=AccumulationMode.DISCARDING,
                allowed_lateness=self._lateness)
            | "Identify" >> beam.ParDo(_IdentifyFn(self._lateness.micros))
        )
        kept = (identified
                | "Keep" >> beam.GroupByKey()
                | "KeptIds" >> beam.FlatMap(_kept_ids))
        arrived = identified | "Arrived" >> beam.Map(lambda kv: (kv[0], ("arrived", kv[1])))
        return (
            (arrived, kept)
            | "Both" >> beam.Flatten()
            | "InGlobalWindow" >> beam.WindowInto(beam_window.GlobalWindows())
            | "Reconcile" >> beam.ParDo(_ReconcileFn())
            | "Count" >> beam.ParDo(_CountFn(self._namespace, self._name))
        )
