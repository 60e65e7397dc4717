"""Replay recorded events as a stream: a TestStream that releases each at its arrival time.

A file of events is a batch; the same events *arriving* one by one are a stream. This module
turns arrival-ordered records (from :mod:`pipelines.generator`, or a file it wrote) into a
Beam :class:`~apache_beam.testing.test_stream.TestStream`, so that any runner that executes
TestStream (the DirectRunner, and our SparkRunner) shows real streaming behaviour, with early,
on-time and late panes, and no input of the user's.

The plan, step by step:

* Records are grouped by arrival time into ticks of ``tick_seconds`` (one TestStream element
  batch per tick): the processing-time clock advances by the gap between ticks, so
  processing-time triggers (early firings) fire as they would live.
* Each element is the event's JSON, as its producer sent it, timestamped with its event time.
* After each tick the watermark advances *heuristically*, as a source without perfect
  knowledge does: to the greatest event time seen so far minus ``watermark_lag_seconds``
  (never backwards). A record whose event time is already behind the watermark when it
  arrives is *late*; :func:`late_records` names them in advance.
* At the end the clock advances one more tick, the watermark passes the newest event time
  and then goes to infinity, which closes every window.

Example:

>>> from pipelines.generator import GeneratedRecord
>>> records = [GeneratedRecord(100.0, 100.5, {"n": 1}),
...            GeneratedRecord(130.0, 131.0, {"n": 2}),
...            GeneratedRecord(105.0, 140.0, {"n": 3})]
>>> [(step.processing_time, step.watermark) for step in plan_replay(records, watermark_lag_seconds=10)]
[(0.0, 90.0), (30.0, 120.0), (39.0, None)]
>>> [record.fields["n"] for record in late_records(records, watermark_lag_seconds=10)]
[3]
>>> stream = Replay(records, watermark_lag_seconds=10)   # a PTransform: p | stream
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import TimestampedValue

from pipelines.generator import GeneratedRecord

#: Defaults: one-second ticks; a watermark ten seconds behind the newest event time.
DEFAULT_TICK_SECONDS = 1.0
DEFAULT_WATERMARK_LAG_SECONDS = 10.0


class ReplayStep(NamedTuple):
    """One tick of a replay.

    ``processing_time``: seconds since the replay began at which ``records`` arrive.
    ``watermark``: where the watermark moves after them (event time, seconds since the
    epoch), or None when it does not move.
    """

    processing_time: float
    records: Tuple[GeneratedRecord, ...]
    watermark: Optional[float]


def _validate(tick_seconds: float, watermark_lag_seconds: float) -> None:
    if not tick_seconds > 0:
        raise ValueError(f"tick_seconds={tick_seconds!r} must be positive")
    if not watermark_lag_seconds >= 0:
        raise ValueError(f"watermark_lag_seconds={watermark_lag_seconds!r} must not be negative")


def plan_replay(
    records: Sequence[GeneratedRecord],
    *,
    tick_seconds: float = DEFAULT_TICK_SECONDS,
    watermark_lag_seconds: float = DEFAULT_WATERMARK_LAG_SECONDS,
) -> List[ReplayStep]:
    """Group records into ticks by arrival time and compute the watermark after each tick.

    Records are taken in arrival order (a stable sort, so equal arrivals keep their order).
    """
    _validate(tick_seconds, watermark_lag_seconds)
    ordered = sorted(records, key=lambda record: record.arrival_time)
    if not ordered:
        return []
    origin = ordered[0].arrival_time
    ticks: List[Tuple[int, List[GeneratedRecord]]] = []
    for record in ordered:
        tick = int(math.floor((record.arrival_time - origin) / tick_seconds))
        if ticks and ticks[-1][0] == tick:
            ticks[-1][1].append(record)
        else:
            ticks.append((tick, [record]))
    steps = []
    newest_event_time = -math.inf
    watermark = -math.inf
    for tick, batch in ticks:
        newest_event_time = max(newest_event_time, max(record.event_time for record in batch))
        candidate = newest_event_time - watermark_lag_seconds
        moved = candidate if candidate > watermark else None
        watermark = max(watermark, candidate)
        steps.append(ReplayStep(tick * tick_seconds, tuple(batch), moved))
    return steps


def late_records(
    records: Sequence[GeneratedRecord],
    *,
    tick_seconds: float = DEFAULT_TICK_SECONDS,
    watermark_lag_seconds: float = DEFAULT_WATERMARK_LAG_SECONDS,
) -> List[GeneratedRecord]:
    """The records whose event time is behind the watermark when they arrive in the replay.

    Whether such a record still counts depends on the pipeline's allowed lateness: it lands
    in a LATE pane if its window's end plus the allowed lateness is still ahead of the
    watermark, and is dropped (and counted) otherwise.
    """
    late = []
    watermark = -math.inf
    for step in plan_replay(records, tick_seconds=tick_seconds,
                            watermark_lag_seconds=watermark_lag_seconds):
        late.extend(record for record in step.records if record.event_time < watermark)
        if step.watermark is not None:
            watermark = step.watermark
    return late


def to_test_stream(steps: Sequence[ReplayStep], *, final_advance_seconds: float = 1.0) -> TestStream:
    """Build the TestStream for a replay plan: elements, clock advances, watermark moves.

    Each element is the event's JSON (:meth:`GeneratedRecord.event_json`: as its producer sent
    it, without the arrival time, which the replay expresses by *when* it releases it),
    timestamped with its event time. After the last step the clock advances ``final_advance_seconds`` (so that
    pending processing-time firings happen) and the watermark goes to infinity.
    """
    stream = TestStream(coder=beam.coders.StrUtf8Coder())
    clock = 0.0
    for step in steps:
        if step.processing_time > clock:
            stream.advance_processing_time(step.processing_time - clock)
            clock = step.processing_time
        stream.add_elements(
            [TimestampedValue(record.event_json(), record.event_time) for record in step.records])
        if step.watermark is not None:
            stream.advance_watermark_to(step.watermark)
    if final_advance_seconds > 0:
        stream.advance_processing_time(final_advance_seconds)
    if steps:
        # End of input: first past every event time (windows and event-time timers close at
        # finite times), then to infinity. One jump straight to infinity would also close
        # everything, but outputs of stateful steps' timers fired in that jump reach a
        # downstream GroupByKey after its windows expired on Beam's DirectRunner (2.77).
        newest = max(record.event_time for step in steps for record in step.records)
        last = max((step.watermark for step in steps if step.watermark is not None),
                   default=-math.inf)
        if newest + 1 > last:
            stream.advance_watermark_to(newest + 1)
    return stream.advance_watermark_to_infinity()


class Replay(beam.PTransform):
    """Release recorded events as an unbounded stream of JSON lines, at their arrival times.

    Apply to the pipeline: ``lines = pipeline | Replay(records)``. The output is a
    PCollection of str (one JSON line per event) in the global window, each element
    timestamped with its event time; run the pipeline with ``--streaming``.
    """

    def __init__(
        self,
        records: Sequence[GeneratedRecord],
        *,
        tick_seconds: float = DEFAULT_TICK_SECONDS,
        watermark_lag_seconds: float = DEFAULT_WATERMARK_LAG_SECONDS,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(label)
        _validate(tick_seconds, watermark_lag_seconds)
        self._steps = plan_replay(records, tick_seconds=tick_seconds,
                                  watermark_lag_seconds=watermark_lag_seconds)
        self._final_advance = tick_seconds

    def expand(self, pbegin):
        return pbegin | "TestStream" >> to_test_stream(
            self._steps, final_advance_seconds=self._final_advance)
