"""Side inputs in streaming: a main element waits until its side inputs are ready.

A ParDo with side inputs sees, for each main element's window, the side input's elements of
the side window that window maps to (the side input's ``window_mapping_fn``). In streaming
that side window may not be complete yet: as Beam's DirectRunner blocks such a bundle, the
runner holds the element until every side input is *ready* for it, that is, until the side
input's watermark reaches the end of the side window (for the global window: the end of
time, when the side input is done). Then it runs, seeing every pane the side input
produced for the window.

* In the task (:func:`split_ready`), at the stage's input (in streaming a ParDo with side
  inputs starts its stage, so the element's windows are the ones the ParDo sees): ready
  elements go on; the others leave as :class:`~runners.spark.worker.records.HeldElements` reports,
  grouped by the side watermarks they wait for.
* On the driver (:class:`HeldElementsStore`): held elements are kept per stage and per
  *ready-at* vector, so a batch touches only those whose side inputs became ready; they are
  released into the stage's input of the round in which they are, and until then hold the
  stage's output watermark at their earliest timestamp. They are part of a checkpoint.

A held element is released in the round after the one whose panes made its side input
ready: with a TestStream (or while draining) in the same micro-batch, which settles, as
the DirectRunner runs a blocked bundle once the watermark update that unblocks it is
committed; on the wall clock in the next micro-batch. Either way it sees every pane the
side input fired for its window until then: a main element in the global window waits for
the side input to be done, so it sees all of them, as many as the side input's trigger
fired over the batches its input arrived in (Beam's ``CombineGlobally`` default, which
asserts one, passes only when they all came in one).

Nothing is held when every side input is done (its watermark at the end of time): the
check is then skipped. Batch is unaffected (every side input is complete first).

>>> store = HeldElementsStore()
>>> store.add(HeldElements(stage=4, port=0, ready_at=(10_000_000,), timestamp=3_000_000,
...                        data=b"x", count=1))
>>> store.hold(4), store.releasable(4, (9_000_000,)), store.releasable(4, (10_000_000,))
(Timestamp(3), False, True)
>>> store.take(4, (10_000_000,)), store.holds(4)
({0: [b'x']}, False)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, Iterator, List, Tuple

from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from runners.spark.beam_internals import window_mapping_fn
from runners.spark.planning.execution_plan import StageSpec
from runners.spark.worker.components import SharedComponents, iter_encoded
from runners.spark.worker.records import Elements, HeldElements

_END = MAX_TIMESTAMP.micros


@dataclasses.dataclass(frozen=True)
class ReadinessCheck:
    """What a task needs to tell ready main elements from those to hold.

    Args:
      stage: the stage's index.
      coder_ids: the windowed coder of each input port's elements.
      mappings: each side input's window mapping function, serialized.
      side_watermarks: each side input's watermark in this round (micros).
    """

    stage: int
    coder_ids: Tuple[str, ...]
    mappings: Tuple[bytes, ...]
    side_watermarks: Tuple[int, ...]

    @classmethod
    def of(cls, stage: StageSpec, side_watermarks: Tuple[int, ...]) -> "ReadinessCheck":
        return cls(stage.index, tuple(spec.coder_id for spec in stage.inputs),
                   tuple(spec.window_mapping for spec in stage.side_inputs), side_watermarks)


def side_input_watermarks(stage: StageSpec, buffer_watermark: Any) -> Tuple[int, ...]:
    """Each side input's watermark (micros), from ``buffer_watermark(buffer id)``."""
    return tuple(buffer_watermark(spec.buffer_id).micros for spec in stage.side_inputs)


def all_done(side_watermarks: Tuple[int, ...]) -> bool:
    """Every side input is complete: nothing can wait for it."""
    return all(watermark >= _END for watermark in side_watermarks)


def split_ready(check: ReadinessCheck, components: SharedComponents,
                records: Iterable[Any]) -> Iterator[Any]:
    """The stage's input records with the elements not yet ready taken out, as
    :class:`HeldElements` (one per port and ready-at vector)."""
    mappings = [window_mapping_fn(mapping) if mapping else None for mapping in check.mappings]
    coders: Dict[int, Any] = {}
    held: Dict[Tuple[int, Tuple[int, ...]], List[Any]] = {}
    for record in records:
        if type(record) is not Elements:
            yield record
            continue
        coder = coders.get(record.port)
        if coder is None:
            coder = coders[record.port] = components.coder_impl(check.coder_ids[record.port])
        ready: List[bytes] = []
        for element, encoded in iter_encoded(coder, record.data):
            ready_at = tuple(
                max(_window_end(mapping(window) if mapping is not None else window)
                    for window in element.windows)
                for mapping in mappings)
            if _ready(ready_at, check.side_watermarks):
                ready.append(encoded)
                continue
            group = held.setdefault((record.port, ready_at), [_END, []])
            group[0] = min(group[0], element.timestamp.micros)
            group[1].append(encoded)
        if ready:
            yield Elements(record.port, b"".join(ready))
    for (port, ready_at), (timestamp, encoded) in held.items():
        yield HeldElements(check.stage, port, ready_at, timestamp, b"".join(encoded),
                           len(encoded))


def _window_end(window: Any) -> int:
    end = getattr(window, "end", None)
    return _END if end is None else min(end.micros, _END)


class HeldElementsStore:
    """Main elements held on the driver, per stage and ready-at vector."""

    def __init__(self) -> None:
        #: stage index -> {(port, ready_at): [earliest timestamp (micros), [chunks], count]}
        self._held: Dict[int, Dict[Tuple[int, Tuple[int, ...]], List[Any]]] = {}

    def add(self, report: HeldElements) -> None:
        group = self._held.setdefault(report.stage, {}).setdefault(
            (report.port, tuple(report.ready_at)), [_END, [], 0])
        group[0] = min(group[0], report.timestamp)
        group[1].append(report.data)
        group[2] += report.count

    def holds(self, stage: int) -> bool:
        return bool(self._held.get(stage))

    def hold(self, stage: int) -> Timestamp:
        """The earliest timestamp the stage holds (the end of time: none)."""
        groups = self._held.get(stage, {})
        return Timestamp(micros=min((group[0] for group in groups.values()), default=_END))

    def releasable(self, stage: int, side_watermarks: Tuple[int, ...]) -> bool:
        return any(_ready(ready_at, side_watermarks) for _, ready_at in self._held.get(stage, {}))

    def take(self, stage: int, side_watermarks: Tuple[int, ...]) -> Dict[int, List[bytes]]:
        """Remove and return (chunks per port) the stage's elements ready at these side
        watermarks."""
        groups = self._held.get(stage, {})
        released: Dict[int, List[bytes]] = {}
        for port, ready_at in [key for key in groups if _ready(key[1], side_watermarks)]:
            released.setdefault(port, []).extend(groups.pop((port, ready_at))[1])
        return released

    def count(self) -> int:
        """Main elements held."""
        return sum(group[2] for groups in self._held.values() for group in groups.values())

    # ----- checkpoints (plain data, stages by name)
    def snapshot(self, names: Dict[int, str]) -> Dict[str, List[List[Any]]]:
        return {names[stage]: [[port, list(ready_at), group[0], list(group[1]), group[2]]
                               for (port, ready_at), group in sorted(groups.items())]
                for stage, groups in self._held.items() if groups}

    def restore(self, snapshot: Dict[str, List[List[Any]]], indexes: Dict[str, int]) -> None:
        self._held = {
            indexes[name]: {(port, tuple(ready_at)): [timestamp, list(chunks), count]
                            for port, ready_at, timestamp, chunks, count in groups}
            for name, groups in snapshot.items()}


def _ready(ready_at: Tuple[int, ...], side_watermarks: Tuple[int, ...]) -> bool:
    return all(watermark >= at for watermark, at in zip(side_watermarks, ready_at))


__all__ = ["HeldElementsStore", "ReadinessCheck", "all_done", "side_input_watermarks",
           "split_ready"]
