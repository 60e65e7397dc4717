"""The data behind the pictures of a replayed run: pane diagram marks, per-batch records.

**The pane diagram** (Streaming 102 style): x is processing time (seconds since the replay
began), y is event time. Each input element is a dot at (arrival, event time), red when it
arrived behind the watermark (late); the heuristic watermark is a step line; each window is
a horizontal band; each pane is a marker at (fire time, its window, one lane per key) with
its value, shaped and coloured by timing (EARLY, ON_TIME, LATE).

**How fire times are known.** A pane record says *what* fired (key, window, value, timing,
index), not *when* in processing time: a DoFn reading the wall clock would not be
deterministic, and the TestStream's clock is not observable from a DoFn. The replay plan
(:func:`pipelines.replay.plan_replay`) is known, though, so fire times are *inferred*:

* the input's running aggregate per key and window after each tick is computed with the
  job's own WindowFn and CombineFn; panes are accumulating, so a pane's value is the
  aggregate of everything that had arrived when it fired;
* an ON_TIME pane fires in the tick where the replay's watermark passes the window's end:
  that time is **exact**;
* an EARLY or LATE pane fired after the tick where its value was first reached (not before
  its previous pane) and no later than the tick where the aggregate changed next: a
  **span**. The marker sits at its start and a bar shows the span; the legend says so.
  When the job fires a LATE pane per late element, that pane fires on the element's
  arrival: the span's start, **exact**. EARLY panes (processing-time firings) keep a span:
  inferring their tick would mean re-running the trigger; the content bounds are certain.
* a pane whose value matches no tick is not drawn, and is counted in the figure's title
  ("not placed"): e.g. two panes of one key and window fired within one tick (its
  intermediate total is no tick's), or a job whose panes are not accumulating.

**Throughput and watermark lag** take per-batch records (:class:`BatchRecord`: time,
events, watermark, newest event time), from a replay plan (:func:`replay_batches`) or, later,
from a streaming runner's per-batch metrics.

Example (the data behind the diagram):

>>> from pipelines.generator import GeneratedRecord
>>> from pipelines.replay import plan_replay
>>> from transforms.aggregations import SumFn
>>> from transforms.windows import fixed_windows
>>> records = [GeneratedRecord(5.0, 100.0, {"team": "red", "score": 2}),
...            GeneratedRecord(25.0, 101.0, {"team": "red", "score": 3})]
>>> steps = plan_replay(records, watermark_lag_seconds=1)
>>> panes = [{"key": "red", "value": 5, "window": {"start": 0.0, "end": 60.0},
...           "pane": {"timing": "ON_TIME", "index": 0}}]
>>> diagram = pane_diagram(steps, panes, elements=lambda r: [(r.fields["team"], r.fields["score"])],
...                        window_fn=fixed_windows(60), combine_fn=SumFn(), tick_seconds=1)
>>> diagram.panes[0].fire_time, diagram.panes[0].exact
(2.0, True)
"""

from __future__ import annotations

import math
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from apache_beam.transforms.core import CombineFn
from apache_beam.transforms.window import WindowFn
from apache_beam.utils.timestamp import Timestamp

from pictures.diagram import BatchRecord, InputPoint, PaneDiagram, PaneMark
from pipelines.generator import GeneratedRecord
from pipelines.replay import ReplayStep

Elements = Callable[[GeneratedRecord], Iterable[Tuple[Any, Any]]]


def _seconds(timestamp: Timestamp) -> float:
    return timestamp.micros / 1e6


def _ticks(steps: Sequence[ReplayStep], tick_seconds: float) -> List[Tuple[float, float]]:
    """(processing time, watermark after it) per tick, plus the final tick that closes all."""
    ticks, watermark = [], -math.inf
    for step in steps:
        if step.watermark is not None:
            watermark = step.watermark
        ticks.append((step.processing_time, watermark))
    if steps:
        # As pipelines.replay.to_test_stream ends: one more tick, then the watermark to infinity.
        ticks.append((steps[-1].processing_time + tick_seconds, math.inf))
    return ticks


def _same_value(left: Any, right: Any) -> bool:
    numbers = (int, float)
    if isinstance(left, numbers) and isinstance(right, numbers) and not isinstance(left, bool):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-9)
    return left == right


def _running_aggregates(steps, elements: Elements, window_fn: WindowFn, combine_fn: CombineFn
                        ) -> Dict[Tuple[Any, Tuple[float, float]], List[Tuple[int, Any]]]:
    """Per (key, window): [(tick index, aggregate after that tick)] for ticks that changed it."""
    accumulators: Dict[Tuple[Any, Tuple[float, float]], Any] = {}
    history: Dict[Tuple[Any, Tuple[float, float]], List[Tuple[int, Any]]] = {}
    for tick, step in enumerate(steps):
        touched = []
        for record in step.records:
            context = WindowFn.AssignContext(Timestamp.of(record.event_time))
            for key, value in elements(record):
                for window in window_fn.assign(context):
                    slot = (key, (_seconds(window.start), _seconds(window.end)))
                    if slot not in accumulators:
                        accumulators[slot] = combine_fn.create_accumulator()
                    accumulators[slot] = combine_fn.add_input(accumulators[slot], value)
                    touched.append(slot)
        for slot in dict.fromkeys(touched):
            output = combine_fn.extract_output(accumulators[slot])
            history.setdefault(slot, []).append((tick, output))
    return history


def _place(pane: dict, changes: List[Tuple[int, Any]], ticks: List[Tuple[float, float]],
           earliest_tick: int, late_on_arrival: bool
           ) -> Tuple[Optional[int], Optional[int], bool]:
    """(first tick, last tick, exact) of a pane's fire time; (None, None, False) if unknown."""
    end = pane["window"]["end"]
    closing = next(i for i, (_, watermark) in enumerate(ticks) if watermark >= end)
    timing = pane["pane"]["timing"]
    if timing == "ON_TIME":
        return closing, closing, True
    last = len(ticks) - 1
    for position, (tick, value) in enumerate(changes):
        # The value holds from its tick until the next change; a processing-time firing at
        # that next tick's clock advance still sees it (elements come after the advance).
        until = min(changes[position + 1][0] if position + 1 < len(changes) else last, last)
        first = max(tick, earliest_tick, closing + 1 if timing == "LATE" else 0)
        if first > until or not _same_value(value, pane["value"]):
            continue
        if timing == "EARLY":
            if first > closing:
                continue
            return first, min(until, closing), False
        if late_on_arrival:
            return first, first, True
        return first, until, False
    return None, None, False


def pane_diagram(
    steps: Sequence[ReplayStep],
    panes: Iterable[dict],
    *,
    elements: Elements,
    window_fn: WindowFn,
    combine_fn: CombineFn,
    tick_seconds: float,
    late_firings_per_element: bool = False,
) -> PaneDiagram:
    """Compute the pane diagram's marks for a replay and the panes it produced.

    ``elements`` maps a record to the job's ``(key, value)`` pairs (none for a record the job
    rejects or filters out); ``window_fn`` and ``combine_fn`` are the job's *where* and
    *what*. Panes must be accumulating (each pane carries its window's total so far).
    ``late_firings_per_element=True`` says the job fires a LATE pane for every late element
    (the jobs' ``late_every_count=1``): its fire time is then the element's arrival, exact.
    """
    steps = list(steps)
    ticks = _ticks(steps, tick_seconds)
    inputs, watermark = [], -math.inf
    for step in steps:
        for record in step.records:
            inputs.append(InputPoint(step.processing_time, record.event_time,
                                     record.event_time < watermark))
        if step.watermark is not None:
            watermark = step.watermark
    line = [(time, mark) for time, mark in ticks if math.isfinite(mark)]
    if steps:
        newest = max(record.event_time for step in steps for record in step.records)
        line.append((ticks[-1][0], max(newest + 1, line[-1][1] if line else -math.inf)))
    history = _running_aggregates(steps, elements, window_fn, combine_fn)
    ordered = sorted((dict(pane) for pane in panes if isinstance(pane.get("window"), dict)),
                     key=lambda p: (p["window"]["start"], p["window"]["end"], str(p["key"]),
                                    p["pane"]["index"]))
    marks, previous = [], {}
    for pane in ordered:
        window = (pane["window"]["start"], pane["window"]["end"])
        slot = (pane["key"], window)
        first = last = None
        exact = False
        if ticks:
            first, last, exact = _place(pane, history.get(slot, []), ticks,
                                        previous.get(slot, 0), late_firings_per_element)
        if first is not None:
            previous[slot] = first
        marks.append(PaneMark(pane["key"], pane["value"], window, pane["pane"]["timing"],
                              pane["pane"]["index"],
                              None if first is None else ticks[first][0],
                              None if last is None else ticks[last][0], exact))
    return PaneDiagram(inputs, line, marks, sorted({mark.window for mark in marks}),
                       sorted({mark.key for mark in marks}, key=str),
                       ticks[-1][0] if ticks else 0.0)


def replay_batches(steps: Sequence[ReplayStep]) -> List[BatchRecord]:
    """Per-tick batch records of a replay plan: events per tick, watermark, newest event time.

    >>> from pipelines.generator import GeneratedRecord
    >>> from pipelines.replay import plan_replay
    >>> steps = plan_replay([GeneratedRecord(100.0, 0.0, {}), GeneratedRecord(90.0, 0.5, {}),
    ...                      GeneratedRecord(130.0, 2.0, {})], watermark_lag_seconds=10)
    >>> for batch in replay_batches(steps):
    ...     print(batch)
    BatchRecord(time=0.0, events=2, watermark=90.0, newest_event_time=100.0)
    BatchRecord(time=2.0, events=1, watermark=120.0, newest_event_time=130.0)
    """
    batches, watermark, newest = [], None, -math.inf
    for step in steps:
        newest = max([newest] + [record.event_time for record in step.records])
        if step.watermark is not None:
            watermark = step.watermark
        batches.append(BatchRecord(step.processing_time, len(step.records), watermark, newest))
    return batches


def typed_elements(event_type: type, pairs: Callable[[Any], Iterable[Tuple[Any, Any]]]
                   ) -> Elements:
    """An ``elements`` function for :func:`pane_diagram`: the record as ``event_type`` (fields
    checked as ``transforms.parsing.ParseJson`` checks JSON values; a record it would reject
    gives nothing), then ``pairs(event)``.

    >>> from pipelines.events import GameEvent
    >>> elements = typed_elements(GameEvent, lambda event: [(event.team, event.score)])
    >>> record = GeneratedRecord(1.0, 2.0, {"user": "ann", "team": "red", "score": 3,
    ...                                     "timestamp": 1.0})
    >>> list(elements(record)), list(elements(record._replace(fields={"team": "red"})))
    ([('red', 3)], [])
    """
    hints = typing.get_type_hints(event_type)
    defaults = getattr(event_type, "_field_defaults", {})

    def valid(kind: Any, value: Any) -> bool:
        if kind is bool:
            return isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))
        if isinstance(value, bool):
            return False
        if kind is int:
            return isinstance(value, int)
        if kind is float:
            return isinstance(value, (int, float)) and math.isfinite(value)
        return isinstance(value, str)

    def elements(record: GeneratedRecord) -> Iterable[Tuple[Any, Any]]:
        if record.raw is not None:
            return []
        values = {}
        for name in event_type._fields:
            if name not in record.fields:
                if name not in defaults:
                    return []
                values[name] = defaults[name]
            elif valid(hints.get(name, str), record.fields[name]):
                kind = hints.get(name, str)
                values[name] = kind(record.fields[name]) if kind in (bool, float) else \
                    record.fields[name]
            else:
                return []
        return list(pairs(event_type(**values)))

    return elements
