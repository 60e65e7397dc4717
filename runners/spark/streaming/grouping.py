"""A GroupByKey in streaming: per-key trigger state carried from micro-batch to micro-batch.

Runs in Spark tasks, over one key partition of a batch: the partition's state record
(every key's encoded trigger state, see :mod:`~runners.spark.streaming.state`) and the
batch's elements of those keys. For each key, as the DirectRunner's
``_StreamingGroupAlsoByWindowEvaluator`` does, with Beam's ``GeneralTriggerDriver``:

1. the batch's elements go through ``process_elements`` at the watermarks the stage had
   *before* this batch (elements are processed before the watermark advance they came with,
   as the DirectRunner holds a transform's input watermark below its pending elements);
2. then timers due at the new input watermark (event time) or the batch's clock (processing
   time) fire, earliest first, each cleared before it fires, until none is due;
3. expired windows are garbage-collected; the key's watermark hold is reported.

Outputs are tagged records: ``("out", chunk)``, ``("state", (partition, blob))`` and one
``("meta", {...})`` per partition (hold, state size, inputs, panes, next timer).
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Dict, Iterable, Iterator, List, Tuple

from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from runners.spark.beam_internals import TimeDomain, create_trigger_driver
from runners.spark.components import SharedComponents, encode_chunks, iter_encoded
from runners.spark.planning import GroupSpec
from runners.spark.streaming import coders as _coders  # noqa: F401 (registers the coder)
from runners.spark.streaming.state import TriggerStateCodec, expire_windows, is_empty


#: Rounds of due timers one key may fire in one batch before the runner calls it a loop.
MAX_TIMER_ROUNDS = 10000


@dataclasses.dataclass(frozen=True)
class BatchTimes:
    """The times one stage sees in one micro-batch (Beam Timestamps, micros)."""

    input_before: int  # input watermark before the batch (elements are processed at it)
    output_before: int  # output watermark before the batch
    input_after: int  # input watermark after the batch's advance (timers fire up to it)
    processing_time: float  # the loop's clock, seconds

    def timestamp(self, name: str) -> Timestamp:
        return Timestamp(micros=getattr(self, name))


class BatchClock:
    """The trigger driver's processing-time clock: the batch's time, fixed for the batch."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def time(self) -> float:
        return self._seconds


def state_record(partition: int, blob: bytes) -> Tuple[int, Tuple[str, bytes]]:
    """A partition's state as a record of the next batch (keyed by its partition number)."""
    return partition, ("state", blob)


def process_group_partition(spec: GroupSpec, components: SharedComponents, times: BatchTimes,
                            partition: int, records: Iterable[Tuple[Any, Tuple[str, bytes]]]
                            ) -> Iterator[Tuple[str, Any]]:
    input_coder = components.coder(spec.input_coder_id)
    input_impl = input_coder.get_impl()
    output_impl = components.coder_impl(spec.output_coder_id)
    key_impl = input_coder.key_coder().get_impl()
    windowing = components.windowing(spec.windowing_strategy_id)
    codec = TriggerStateCodec(windowing.windowfn.get_window_coder(),
                              input_coder.wrapped_value_coder.value_coder())
    driver = create_trigger_driver(windowing, False, clock=BatchClock(times.processing_time))
    # How far past its timestamp a new element's window reaches (sessions: the gap), so a
    # merged window is kept while a kept element could still merge into it.
    # (The driver keeps even non-merging windows under ids: their reach is 0.)
    merge_reach = (getattr(windowing.windowfn, "gap_size", None)
                   if windowing.windowfn.is_merging() else 0)

    blobs: Dict[bytes, bytes] = {}
    elements: Dict[bytes, List[Any]] = {}
    inputs = 0
    for key, (kind, payload) in records:
        if kind == "state":
            blobs.update(pickle.loads(payload))
        else:
            element, _ = next(iter_encoded(input_impl, payload))
            elements.setdefault(key, []).append(element)
            inputs += 1

    input_before, output_before = times.timestamp("input_before"), times.timestamp(
        "output_before")
    input_after = times.timestamp("input_after")
    kept: Dict[bytes, bytes] = {}
    panes: List[Any] = []
    hold = MAX_TIMESTAMP
    next_processing_timer = None
    collected = 0
    for encoded_key in sorted(set(blobs) | set(elements)):
        state = codec.decode(blobs[encoded_key]) if encoded_key in blobs else None
        if state is None:
            from runners.spark.beam_internals import InMemoryUnmergedState
            state = InMemoryUnmergedState()
        values = elements.get(encoded_key)
        key = values[0].value[0] if values else key_impl.decode(encoded_key)
        if values:
            for pane in driver.process_elements(
                    state, [value.with_value(value.value[1]) for value in values],
                    output_before, input_before):
                panes.append(pane.with_value((key, pane.value)))
        for pane in _fire_timers(driver, state, input_after, times.processing_time):
            panes.append(pane.with_value((key, pane.value)))
        collected += expire_windows(state, input_after, windowing.allowed_lateness,
                                    merge_reach)
        if not is_empty(state):
            kept[encoded_key] = codec.encode(state)
            hold = min(hold, state.get_earliest_hold())
            for _, timers in state.timers.items():
                for (_, domain, _), timestamp in timers.items():
                    if domain == TimeDomain.REAL_TIME:
                        seconds = float(timestamp)
                        if next_processing_timer is None or seconds < next_processing_timer:
                            next_processing_timer = seconds

    for chunk in encode_chunks(output_impl, iter(panes)):
        yield "out", chunk
    yield "state", state_record(partition, pickle.dumps(kept, protocol=5))
    yield "meta", {"hold": hold.micros, "keys": len(kept), "inputs": inputs,
                   "outputs": len(panes), "collected_windows": collected,
                   "next_processing_timer": next_processing_timer}


def _fire_timers(driver: Any, state: Any, watermark: Timestamp,
                 processing_time: float) -> Iterator[Any]:
    """Fire due timers, clearing each before it fires, until none is due.

    Event-time timers fire first (earliest first), so a window the watermark has passed
    gets its ON_TIME pane before any processing-time firing of the same batch. A
    processing-time timer fires with the input *watermark* as the time the trigger sees:
    Beam's ``GeneralTriggerDriver.process_timer`` hands the trigger the timer's own
    timestamp, which for a processing-time timer is wall-clock time; compared with a
    window's end in event time it labels an early firing ON_TIME or LATE whenever the clock
    is past the window's end (every live stream: event time ~ wall clock). The trigger
    only checks a processing-time timer's domain, never its time, so nothing else changes.
    """
    for _ in range(MAX_TIMER_ROUNDS):
        due, _ = state.get_timers(watermark=watermark, processing_time=processing_time)
        if not due:
            return
        due.sort(key=lambda fired: (fired[1][1] != TimeDomain.WATERMARK, fired[1][2]))
        for window, (name, domain, timestamp, tag) in due:
            state.clear_timer(window, name, domain, dynamic_timer_tag=tag)
            seen = watermark if domain == TimeDomain.REAL_TIME else timestamp
            yield from driver.process_timer(window, name, domain, seen, state, watermark)
    raise RuntimeError(
        f"timers kept firing for {MAX_TIMER_ROUNDS} rounds at watermark {watermark}: "
        f"{state.get_timers(watermark=watermark, processing_time=processing_time)[0][:3]}")
