"""A GroupByKey in streaming: per-key trigger state kept in the partition's store.

Runs in a Spark task, over one key partition of a micro-batch: the batch's elements of that
partition (:class:`~runners.spark.worker.records.KeyedElements`) and the keys of the partition's
store that are due (a timer or a window expiry at or before the new input watermark, a
processing-time timer at or before the clock). Only those keys are read and written; the
others stay in the store untouched. For each such key, as the DirectRunner's
``_StreamingGroupAlsoByWindowEvaluator`` does, with Beam's ``GeneralTriggerDriver`` (for a
non-merging WindowFn without its merge bookkeeping: :class:`TriggerDrivers`):

1. the batch's elements go through ``process_elements`` at the watermarks the step had
   *before* this batch (elements are processed before the watermark advance they came with,
   as the DirectRunner holds a transform's input watermark below its pending elements);
2. then timers due at the new input watermark (event time) or the batch's clock (processing
   time) fire, earliest first, each cleared before it fires, until none is due;
3. expired windows are garbage-collected; the key's state, its next wakes and its watermark
   hold are written back (or the key deleted when it holds nothing).

Yields the panes as :class:`~runners.spark.worker.records.Elements`, the reports it received, and
its own :class:`~runners.spark.worker.records.StepReport`.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List

from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from runners.spark.beam_internals import (
    InMemoryUnmergedState,
    TimeDomain,
    create_trigger_driver,
    create_unmerged_trigger_driver,
)
from runners.spark.planning.execution_plan import GroupSpec
from runners.spark.state.encoding import (
    TriggerStateCodec,
    expire_windows,
    has_window_ids,
    is_empty,
    processing_micros,
    trigger_wakes,
)
from runners.spark.state.store import KeyState
from runners.spark.streaming.keyed_batch import MAX_TIMER_ROUNDS, BatchClock, KeyedBatch
from runners.spark.worker.components import SharedComponents, encode_chunks
from runners.spark.worker.errors import failing_as_task
from runners.spark.worker.records import Elements, KeyedElements, unpack_keyed


class TriggerDrivers:
    """The trigger driver for each key's state.

    A non-merging WindowFn's keys keep their state per window, with the unmerged driver
    (:func:`~runners.spark.beam_internals.create_unmerged_trigger_driver`: the same panes,
    less work per key); a key whose state is kept under window ids (written by Beam's
    merging driver, e.g. in a checkpoint of an earlier version) stays with Beam's driver.
    """

    def __init__(self, windowing: Any, clock: Any) -> None:
        self.merging = create_trigger_driver(windowing, False, clock=clock)
        self.unmerged = (None if windowing.windowfn.is_merging()
                         else create_unmerged_trigger_driver(windowing, clock))

    def for_state(self, state: Any) -> Any:
        if self.unmerged is None or has_window_ids(state):
            return self.merging
        return self.unmerged


def process_group_partition(spec: GroupSpec, components: SharedComponents, batch: KeyedBatch,
                            partition: int, records: Iterable[Any]) -> Iterator[Any]:
    input_coder = components.coder(spec.input_coder_id)
    input_impl = input_coder.get_impl()
    output_impl = components.coder_impl(spec.output_coder_id)
    key_impl = input_coder.key_coder().get_impl()
    windowing = components.windowing(spec.windowing_strategy_id)
    codec = TriggerStateCodec(windowing.windowfn.get_window_coder(),
                              input_coder.wrapped_value_coder.value_coder())
    times = batch.times
    drivers = TriggerDrivers(windowing, BatchClock(times.processing_time))
    # How far past its timestamp a new element's window reaches (sessions: the gap), so a
    # merged window is kept while a kept element could still merge into it.
    # (The merging driver keeps even non-merging windows under ids: their reach is 0.)
    merge_reach = (getattr(windowing.windowfn, "gap_size", None)
                   if windowing.windowfn.is_merging() else 0)

    elements: Dict[bytes, List[Any]] = {}
    reports: List[Any] = []
    inputs = 0
    for record in records:
        if type(record) is KeyedElements:
            for key, encoded in unpack_keyed(record.data):
                elements.setdefault(key, []).append(input_impl.decode_nested(encoded))
                inputs += 1
        else:
            reports.append(record)

    input_before = times.timestamp("input_before")
    output_before = times.timestamp("output_before")
    input_after = times.timestamp("input_after")
    panes: List[Any] = []
    # the store's errors (lost or corrupt state, storage faults) reach the driver whole
    with failing_as_task(batch.step), batch.open_state(partition) as store:
        due = store.due(times.input_after, processing_micros(times.processing_time))
        for encoded_key in sorted(set(elements) | due):
            found = store.get(encoded_key)
            state = codec.decode(found.blob) if found is not None else InMemoryUnmergedState()
            key_driver = drivers.for_state(state)
            values = elements.get(encoded_key)
            key = values[0].value[0] if values else key_impl.decode(encoded_key)
            if values:
                for pane in key_driver.process_elements(
                        state, [value.with_value(value.value[1]) for value in values],
                        output_before, input_before):
                    panes.append(pane.with_value((key, pane.value)))
            for pane in _fire_timers(key_driver, state, input_after, times.processing_time):
                panes.append(pane.with_value((key, pane.value)))
            expire_windows(state, input_after, windowing.allowed_lateness, merge_reach)
            if is_empty(state):
                store.delete(encoded_key)
                continue
            event_wake, processing_wake = trigger_wakes(state, windowing.allowed_lateness,
                                                        merge_reach)
            hold = state.get_earliest_hold()
            store.put(encoded_key, KeyState(
                codec.encode(state), event_wake, processing_wake,
                None if hold >= MAX_TIMESTAMP else hold.micros))
    for chunk in encode_chunks(output_impl, iter(panes)):
        yield Elements(0, chunk)
    yield from reports
    yield batch.report(partition, store, inputs, len(panes))


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
