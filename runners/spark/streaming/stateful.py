"""A stateful stage (state and timers of a DoFn) in streaming, over one key partition.

The stage's input is partitioned by key, so a key's user state and timers always live in the
same partition's store (:mod:`~runners.spark.state.store`), one entry per key:
the Fn API state cells the SDK harness wrote for it and its timers that have not fired
(:func:`~runners.spark.state.encoding.encode_user_state`).

Per batch, in the task: the keys of the batch's elements and the keys whose timers are due
(event time at the new input watermark, processing time at the loop's clock) are read from
the store into the bundle's state handler; the batch's elements run as one bundle, in key
order; then due timers fire, earliest first, round after round until none is due (a timer
may set another), as the DirectRunner extracts fired timers; each key read or written is
stored back (or deleted once it holds nothing). Outputs are ``Elements`` on the stage's
output ports, then the reports received and this partition's ``StepReport``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Set, Tuple

from runners.spark.beam_internals import beam_fn_api_pb2
from runners.spark.dependencies.working_directory import in_driver_directory
from runners.spark.state.encoding import (
    decode_user_state,
    encode_user_state,
    processing_micros,
)
from runners.spark.state.store import KeyState
from runners.spark.streaming.keyed_batch import MAX_TIMER_ROUNDS, KeyedBatch
from runners.spark.worker.bundles import PendingTimers, StageTask, checkin, checkout
from runners.spark.worker.components import join_chunks
from runners.spark.worker.errors import failing_as_task
from runners.spark.worker.metrics import pack
from runners.spark.worker.records import Elements, KeyedElements, unpack_keyed
from runners.spark.worker.side_inputs import TaskStateHandler


def process_stateful_partition(task: StageTask, batch: KeyedBatch, partition: int,
                               records: Iterable[Any]) -> Iterator[Any]:
    """One key partition of the stage in this batch, in the driver's working directory."""
    with in_driver_directory(task.environment.working_directory):
        yield from _process_stateful_partition(task, batch, partition, records)


def _process_stateful_partition(task: StageTask, batch: KeyedBatch, partition: int,
                                records: Iterable[Any]) -> Iterator[Any]:
    stage = task.stage
    output_index = {transform_id: index for index, (transform_id, _) in enumerate(stage.outputs)}
    by_key: Dict[bytes, List[Tuple[int, bytes]]] = {}
    reports: List[Any] = []
    inputs = 0
    for record in records:
        if type(record) is KeyedElements:
            for key, element in unpack_keyed(record.data):
                by_key.setdefault(key, []).append((record.port, element))
                inputs += 1
        else:
            reports.append(record)
    # Timers carry the key itself: encode it as the SDK encodes its state keys' keys.
    key_impl = task.components.coder_impl(stage.key_coder_id)
    times = batch.times
    processor = checkout(task)
    table = task.side_inputs.value if task.side_inputs is not None else None
    handler = TaskStateHandler(table)
    processor.state.target = handler
    timers = PendingTimers(processor, stage)
    collected: List[Any] = []
    outputs: List[Tuple[int, bytes]] = []
    try:
        with failing_as_task(stage.name, processor.processor.shutdown), \
                batch.open_state(partition) as store:
            keys: Set[bytes] = set(by_key)
            keys |= store.due(times.input_after, processing_micros(times.processing_time))
            for key in keys:
                found = store.get(key)
                if found is not None:
                    cells, encoded_timers = decode_user_state(found.blob)
                    handler.load_user_state(cells)
                    timers.add(encoded_timers)
            data: Dict[str, List[bytes]] = {}
            for key in sorted(by_key):
                for port, element in by_key[key]:
                    data.setdefault(stage.inputs[port].transform_id, []).append(element)
            if data:
                data = {transform_id: list(join_chunks(iter(pieces)))
                        for transform_id, pieces in data.items()}
                outputs.extend(_run(processor, data, {}, timers, collected, output_index,
                                    task.namer))
            for _ in range(MAX_TIMER_ROUNDS):
                due = timers.take_due(times.input_after, times.processing_time)
                if not due:
                    break
                outputs.extend(_run(processor, {}, due, timers, collected, output_index,
                                    task.namer))
            else:
                raise RuntimeError(
                    f"timers of stage {stage.name!r} kept firing for {MAX_TIMER_ROUNDS} "
                    f"rounds at watermark {times.timestamp('input_after')}")
            cells = _cells_by_key(handler.user_state(), _store_key(key_impl, stage.key_prefixed))
            pending = timers.by_key(key_impl.encode)
            for key in sorted(keys | set(cells) | set(pending)):
                key_cells = cells.get(key, {})
                key_timers = pending.get(key)
                if not key_cells and key_timers is None:
                    store.delete(key)
                    continue
                store.put(key, KeyState(
                    encode_user_state(key_cells, key_timers.encoded if key_timers else {}),
                    key_timers.event if key_timers else None,
                    key_timers.processing if key_timers else None))
        checkin(task, processor)
    finally:
        processor.state.target = TaskStateHandler()
    if collected and task.metrics is not None:
        yield from task.metrics.report(pack(collected))
    for index, chunk in outputs:
        yield Elements(index, chunk)
    yield from reports
    yield batch.report(partition, store, inputs, len(outputs))


def _store_key(key_impl: Any, key_prefixed: bool) -> Callable[[bytes], bytes]:
    """The store's key (the key as the shuffle encoded it, by which elements and timers are
    looked up and partitions split) of a state cell's key, which the SDK harness encodes
    nested: the same bytes when the key is length-prefixed, else re-encoded (a ``str`` key's
    nested encoding carries its length, the shuffle's does not)."""
    if key_prefixed:
        return lambda key: key
    return lambda key: key_impl.encode(key_impl.decode_nested(key))


def _cells_by_key(cells: Dict[bytes, List[bytes]],
                  store_key: Callable[[bytes], bytes]) -> Dict[bytes, Dict[bytes, List[bytes]]]:
    """User-state cells grouped by the store key of the key in their state key."""
    grouped: Dict[bytes, Dict[bytes, List[bytes]]] = {}
    for state_key, values in cells.items():
        parsed = beam_fn_api_pb2.StateKey.FromString(state_key)
        key = store_key(getattr(parsed, parsed.WhichOneof("type")).key)
        grouped.setdefault(key, {})[state_key] = values
    return grouped


def _run(processor, data, fired, timers: PendingTimers, collected, output_index, namer=None):
    """One bundle (and its bounded residuals); returns (output index, chunk) pairs."""
    results = []
    while True:
        outputs, timers_set, residuals, infos = processor.run_bundle(data, fired, None, namer)
        collected.extend(infos)
        timers.add(timers_set)
        for transform_id, chunks in outputs.items():
            results.extend((output_index[transform_id], chunk) for chunk in chunks)
        if not residuals:
            return results
        data, fired = {}, {}
        for residual in residuals:
            data.setdefault(processor.residual_input(residual.application), []).append(
                residual.application.element)
