"""A stateful stage (state and timers of a DoFn) in streaming, over one key partition.

The stage's input is partitioned by key, so a key's user state and timers always live in the
same partition; they are carried from micro-batch to micro-batch as one encoded blob per
partition (:func:`~runners.spark.streaming.state.encode_user_state`): the Fn API state cells
the SDK harness wrote, and the timers it set and that have not fired.

Per batch, in the task: the state cells are loaded into the bundle's state handler, the
batch's elements run as one bundle, then timers due at the new input watermark (event time)
or the loop's clock (processing time) fire, earliest first, round after round until none is
due (a timer may set another), as the DirectRunner extracts fired timers. Outputs are
tagged records like :mod:`~runners.spark.streaming.grouping`'s.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Tuple

from runners.spark.beam_internals import StateServicer
from runners.spark.bundles import PendingTimers, StageProcessor, StageTask
from runners.spark.components import join_chunks
from runners.spark.errors import TaskFailure
from runners.spark.metrics import pack
from runners.spark.side_inputs import TaskStateHandler
from runners.spark.streaming.grouping import MAX_TIMER_ROUNDS, BatchTimes, state_record
from runners.spark.streaming.state import decode_user_state, encode_user_state

#: descriptor digest -> idle processors, per Python worker process.
_POOL: Dict[str, List[StageProcessor]] = {}


def process_stateful_partition(task: StageTask, times: BatchTimes, partition: int,
                               records: Iterable[Tuple[Any, Tuple[str, Any]]]
                               ) -> Iterator[Tuple[str, Any]]:
    stage = task.stage
    output_index = {transform_id: index for index, (transform_id, _) in enumerate(stage.outputs)}
    idle = _POOL.get(task.digest)
    processor = idle.pop() if idle else StageProcessor(task.descriptor())
    table = task.side_inputs.value if task.side_inputs is not None else None
    handler = TaskStateHandler(table)
    processor.state.target = handler
    timers = PendingTimers(processor, stage)
    collected: List[Any] = []
    bundle: Dict[str, List[bytes]] = {}
    inputs = 0
    try:
        for _, (kind, payload) in records:
            if kind == "state":
                cells, encoded_timers = decode_user_state(payload)
                user_state: StateServicer = handler._user_state
                for state_key, values in cells.items():
                    user_state._state[state_key] = list(values)
                timers.add(encoded_timers)
            else:
                index, element = payload
                bundle.setdefault(stage.inputs[index].transform_id, []).append(element)
                inputs += 1
        outputs: List[Tuple[int, bytes]] = []
        data = {transform_id: list(join_chunks(iter(pieces)))
                for transform_id, pieces in bundle.items()}
        if data:
            outputs.extend(_run(processor, data, {}, timers, collected, output_index))
        for _ in range(MAX_TIMER_ROUNDS):
            due = timers.take_due(times.input_after, times.processing_time)
            if not due:
                break
            outputs.extend(_run(processor, {}, due, timers, collected, output_index))
        else:
            raise RuntimeError(
                f"timers of stage {stage.name!r} kept firing for {MAX_TIMER_ROUNDS} rounds "
                f"at watermark {times.timestamp('input_after')}")
    except TaskFailure:
        processor.processor.shutdown()
        raise
    except Exception as error:
        processor.processor.shutdown()
        raise TaskFailure.wrap(stage.name, error) from None
    else:
        _POOL.setdefault(task.digest, []).append(processor)
    finally:
        processor.state.target = TaskStateHandler()
        if collected and task.metrics is not None:
            task.metrics.add(pack(collected))
    for index, chunk in outputs:
        yield "out", (index, chunk)
    cells = {key: list(values) for key, values in handler._user_state._state.items() if values}
    yield "state", state_record(partition, encode_user_state(cells, timers.encoded()))
    yield "meta", {"hold": None, "keys": len(cells) + timers.count(), "inputs": inputs,
                   "outputs": len(outputs),
                   "next_processing_timer": timers.next_processing_time()}


def _run(processor: StageProcessor, data, fired, timers: PendingTimers, collected, output_index):
    """One bundle (and its bounded residuals); returns tagged output chunks."""
    results = []
    while True:
        outputs, timers_set, residuals, infos = processor.run_bundle(data, fired)
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
