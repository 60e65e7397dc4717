"""A round that holds little, run in one Spark task: no shuffle, no stage boundary.

A round's job costs what Spark charges per stage and task whatever they hold: measured on a
2-core machine (``local[2]``), a job of one task ~45 ms, each shuffle stage after it 60-170
ms more, so a TestStream round through a GroupByKey, a CombinePerKey and a stateful DoFn (six
stages, eleven tasks) took ~700 ms for a handful of elements. On a master with one executor
(``local[N]``) every key partition's store is on that executor, so such a round can run in
a single task of one Spark job: the task runs the planned pass's stages in order, in its
Python worker, with the same code as the distributed round (a stage's bundles, a keyed
step's partitions one after the other, each on its own store and version, the key
partitioning of the map side of a shuffle), and hands the driver the same reports.

A round is *compact* (:func:`CompactRound`, built by the round graph) when the master is a
local one and its sources hold little: TestStream events and the impulse (on the driver, at
most :data:`COMPACT_ROUND_BYTES`), and splittable DoFns only those that planned the batch's
reads (the Kafka reader: at most :data:`COMPACT_ROUND_RECORDS` records, read in the one
task, their residuals carried as in a distributed round); otherwise it runs as Spark
stages. Whether a replayed batch runs compact is decided by its logged plan, so its
bundles are named as before (exactly-once sinks recognise them).
``--streaming_compact_rounds=false`` turns it off.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple

from runners.spark.execution.shuffle import deal_elements, join_dealt, keyed_records
from runners.spark.planning.execution_plan import RESHUFFLE_STAGE, GroupSpec, StageSpec
from runners.spark.streaming.grouping import process_group_partition
from runners.spark.streaming.keyed_batch import KeyedBatch
from runners.spark.streaming.side_input_readiness import ReadinessCheck, split_ready
from runners.spark.streaming.stateful import process_stateful_partition
from runners.spark.streaming.unbounded import process_splittable_partition
from runners.spark.worker import side_inputs as side_input_tables
from runners.spark.worker.bundles import StageTask, process_partition
from runners.spark.worker.components import SharedComponents
from runners.spark.worker.records import Elements, SideInputChunk

#: A round whose TestStream events hold at most this many encoded bytes may run compact ...
COMPACT_ROUND_BYTES = 1 << 20
#: ... and whose planned reads (Kafka) read at most this many records.
COMPACT_ROUND_RECORDS = 5000


@dataclasses.dataclass(frozen=True)
class CompactStage:
    """One running stage of a compact round.

    Args:
      spec: the stage.
      task: what its bundles need (SDK and keyed stages; side inputs are laid out in the
        task, from ``side_history`` and this round's data).
      batch: a keyed stage's batch (versions, times), or None.
      readiness: the side-input readiness check of its main input, or None.
      released: main elements held earlier whose side inputs are ready now (for a
        splittable DoFn: its due residuals).
      side_history: each side input's elements kept from earlier rounds.
      splittable: a splittable DoFn's ``(batch, stale finalizations before, counted
        PCollections)`` (:func:`~runners.spark.streaming.unbounded.
        process_splittable_partition`), or None.
    """

    spec: StageSpec
    task: Optional[StageTask] = None
    batch: Optional[KeyedBatch] = None
    readiness: Optional[ReadinessCheck] = None
    released: Tuple[Elements, ...] = ()
    side_history: Tuple[Tuple[bytes, Tuple[bytes, ...]], ...] = ()
    splittable: Optional[Tuple[int, int, FrozenSet[str]]] = None


@dataclasses.dataclass(frozen=True)
class CompactGroup:
    """A GroupByKey that runs in the round: its spec and its batch."""

    spec: GroupSpec
    batch: KeyedBatch


@dataclasses.dataclass(frozen=True)
class CompactRound:
    """Everything the one task of a compact round runs (picklable; see the module docs).

    Args:
      stages: the running stages, in the plan's (topological) order.
      groups: the running GroupByKeys, by their ``group:`` buffer id.
      sources: the sources' encoded chunks, by buffer id.
      components: the pipeline's components.
      parallelism: key partitions of every keyed step.
      side_buffers: side-input buffers whose new elements go to the driver.
    """

    stages: Tuple[CompactStage, ...]
    groups: Tuple[Tuple[bytes, CompactGroup], ...]
    sources: Tuple[Tuple[bytes, Tuple[bytes, ...]], ...]
    components: SharedComponents
    parallelism: int
    side_buffers: Tuple[bytes, ...]


class _Table:
    """A side-input table as a task's ``StageTask.side_inputs`` reads it (``.value``, and
    ``.digest``: which pooled processors may serve it)."""

    def __init__(self, value: Dict[bytes, List[bytes]]) -> None:
        self.value = value
        self.digest = side_input_tables.table_digest(value)


class _Execution:
    """The round's buffers while its one task runs it."""

    def __init__(self, round_: CompactRound) -> None:
        self.round = round_
        self.groups = dict(round_.groups)
        self.written: Dict[bytes, List[bytes]] = {buffer_id: list(chunks)
                                                  for buffer_id, chunks in round_.sources}
        self.grouped: Dict[bytes, List[bytes]] = {}
        self.reports: List[Any] = []

    def run(self) -> List[Any]:
        for stage in self.round.stages:
            self._stage(stage)
        for buffer_id in self.groups:  # a GroupByKey nobody reads still runs and reports
            self._group(buffer_id)
        for buffer_id in self.round.side_buffers:
            self.reports.extend(SideInputChunk(buffer_id, chunk)
                                for chunk in self.written.get(buffer_id, []))
        return self.reports

    def _chunks(self, buffer_id: bytes) -> List[bytes]:
        if buffer_id in self.groups:
            return self._group(buffer_id)
        return self.written.get(buffer_id, [])

    def _group(self, buffer_id: bytes) -> List[bytes]:
        if buffer_id not in self.grouped:
            group = self.groups[buffer_id]
            inputs = [Elements(0, chunk) for chunk in self.written.get(buffer_id, [])]
            self.grouped[buffer_id] = self._take_outputs(self._by_partition(
                inputs, (group.spec.input_coder_id,), False,
                lambda partition, records: process_group_partition(
                    group.spec, self.round.components, group.batch, partition, records)))
        return self.grouped[buffer_id]

    def _by_partition(self, records: List[Any], coder_ids: Tuple[str, ...], key_prefixed: bool,
                      run: Any) -> List[Any]:
        """Key-partition ``records`` as a shuffle's map side does (reports to partition 0),
        then run each key partition in turn; returns what they output."""
        partitions: List[List[Any]] = [[] for _ in range(self.round.parallelism)]
        for partition, record in keyed_records(coder_ids, self.round.components,
                                               self.round.parallelism, key_prefixed,
                                               iter(records)):
            partitions[partition].append(record)
        outputs: List[Any] = []
        for partition, keyed in enumerate(partitions):
            outputs.extend(run(partition, iter(keyed)))
        return outputs

    def _take_outputs(self, outputs: List[Any], stage: Optional[StageSpec] = None) -> List[bytes]:
        """Reports to the driver; elements to the buffers ``stage`` writes, or (a
        GroupByKey's, ``stage`` None) returned."""
        port_0: List[bytes] = []
        for record in outputs:
            if type(record) is not Elements:
                self.reports.append(record)
            elif stage is None:
                port_0.append(record.data)
            else:
                self.written.setdefault(stage.outputs[record.port][1], []).append(record.data)
        return port_0

    def _stage(self, stage: CompactStage) -> None:
        spec = stage.spec
        records: List[Any] = list(stage.released)
        for port, input_spec in enumerate(spec.inputs):
            records.extend(Elements(port, chunk) for chunk in self._chunks(input_spec.buffer_id))
        if stage.readiness is not None:
            records = list(split_ready(stage.readiness, self.round.components, iter(records)))
        task = self._with_side_inputs(stage)
        if spec.kind == RESHUFFLE_STAGE:
            input_spec = spec.inputs[0]
            dealt = deal_elements(input_spec.coder_id, spec.output_coder_id or input_spec.coder_id,
                                  self.round.components, 0, iter(records))
            outputs = list(join_dealt(value for _, value in dealt))
        elif stage.splittable is not None:
            outputs = list(process_splittable_partition(task, spec.index, *stage.splittable,
                                                        iter(records)))
        elif spec.keyed:
            outputs = self._by_partition(
                records, tuple(input_spec.coder_id for input_spec in spec.inputs),
                spec.key_prefixed,
                lambda partition, keyed: process_stateful_partition(task, stage.batch,
                                                                    partition, keyed))
        else:
            outputs = list(process_partition(task, iter(records)))
        self._take_outputs(outputs, spec)

    def _with_side_inputs(self, stage: CompactStage) -> Optional[StageTask]:
        """The stage's task, its side inputs laid out from their history and this round."""
        if stage.task is None or not stage.spec.side_inputs:
            return stage.task
        history = dict(stage.side_history)
        table: Dict[bytes, List[bytes]] = {}
        for side in stage.spec.side_inputs:
            chunks = list(history.get(side.buffer_id, ())) + self.written.get(side.buffer_id, [])
            coder = self.round.components.coder(side.coder_id)
            for state_key, values in side_input_tables.materialize(side, chunks, coder).items():
                table.setdefault(state_key, []).extend(values)
        task = copy.copy(stage.task)
        task.side_inputs = _Table(table)
        return task


def run_compact_round(round_: CompactRound, unused_partition: int,
                      records: Any) -> Iterator[Any]:
    """The one task of a compact round: its reports for the driver."""
    for _ in records:  # PySpark reuses a Python worker only if it read all of its input
        pass
    yield from _Execution(round_).run()
