"""One round of a micro-batch: the stages over the batch's data, as one Spark job.

A round is a :class:`~runners.spark.execution.stage_pass.StageGraph` pass with streaming's own
sources and keyed steps:

* sources: the TestStream's events of this batch, the impulse (first batch only), and the
  splittable DoFns' residuals carried from the previous batch (:mod:`~runners.spark.
  streaming.unbounded`);
* a keyed step (GroupByKey, stateful stage) runs when it has input, or a timer or window
  expiry due at its new input watermark or the clock; its input is partitioned by key (packed
  per partition: :func:`runners.spark.execution.shuffle.partition_by_key`) and each task works
  on its key partition's store on the executor (:mod:`~runners.spark.streaming.grouping`,
  :mod:`~runners.spark.streaming.stateful`); state never moves;
* side inputs see what their buffers received so far, kept on the driver while their windows
  live (:mod:`~runners.spark.streaming.side_input_history`).

A stage with nothing to do is not built; a round with nothing to do runs no job. The keyed
steps' watermarks come from before the round (:class:`Round`): the job computes everything
the batch's data leads to, and the loop runs another round only when the watermarks it
moved make a keyed step due (TestStream, so panes match the DirectRunner's).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from apache_beam.utils.timestamp import MIN_TIMESTAMP, Duration, Timestamp

from runners.spark.backends.base import Dataset, PartitionAffinity
from runners.spark.beam_internals import ENCODED_IMPULSE_VALUE, IMPULSE_BUFFER, split_buffer_id
from runners.spark.execution import shuffle
from runners.spark.execution.run_context import RunContext
from runners.spark.execution.stage_pass import PassPlan, StageGraph
from runners.spark.planning.execution_plan import (
    RESHUFFLE_STAGE,
    TEST_STREAM_STAGE,
    GroupSpec,
    StageSpec,
)
from runners.spark.state.encoding import processing_micros
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.streaming.compact_round import (
    COMPACT_ROUND_BYTES,
    COMPACT_ROUND_RECORDS,
    CompactGroup,
    CompactRound,
    CompactStage,
    run_compact_round,
)
from runners.spark.streaming.grouping import process_group_partition
from runners.spark.streaming.keyed_batch import BatchTimes, KeyedBatch, StepDurability
from runners.spark.streaming.keyed_step import KeyedStep
from runners.spark.streaming.side_input_history import SideInputHistory
from runners.spark.streaming.side_input_readiness import (
    HeldElementsStore,
    ReadinessCheck,
    all_done,
    side_input_watermarks,
    split_ready,
)
from runners.spark.streaming.stateful import process_stateful_partition
from runners.spark.streaming.unbounded import CarriedResiduals
from runners.spark.streaming.watermarks import Watermarks
from runners.spark.worker.records import Elements, HeldElements, SideInputChunk, StepReport


@dataclasses.dataclass
class StreamingState:
    """What the loop carries from batch to batch on the driver (state itself is on the
    executors)."""

    plan: Any
    run: str  # the run's id: its stores live in <executor local dir>/beam-state-<run>
    storage: Optional[DurableStorage]  # the checkpoint location, or None
    state_directory: Optional[str]  # <checkpoint location>/state, or None
    steps: Dict[Any, KeyedStep]
    residuals: CarriedResiduals
    watermarks: Watermarks
    side_inputs: SideInputHistory
    placement: PartitionAffinity  # where each keyed step's partitions run
    held: HeldElementsStore  # main elements waiting for their side inputs
    round_number: int = 0  # rounds run so far: the next round's store version
    #: small rounds on a local master run in one task (:mod:`~runners.spark.streaming.
    #: compact_round`)
    compact_rounds: bool = True
    #: stages whose splittable DoFn plans its batches, and the records this batch's plan
    #: reads (None: a DoFn does not say)
    planned_stages: FrozenSet[int] = frozenset()
    planned_records: Optional[int] = 0

    @classmethod
    def create(cls, context: RunContext, run: str, storage: Optional[DurableStorage],
               state_directory: Optional[str]) -> "StreamingState":
        plan = context.plan
        steps: Dict[Any, KeyedStep] = {}  # in the order data reaches them
        for stage in plan.stages:
            for spec in stage.inputs:
                group = plan.groups.get(spec.buffer_id)
                if group is not None and spec.buffer_id not in steps:
                    steps[spec.buffer_id] = KeyedStep(group.transform_name, holds=True)
            if stage.keyed:
                steps[stage.index] = KeyedStep(stage.name, holds=False)
        for buffer_id, group in plan.groups.items():  # a GroupByKey nothing reads
            if buffer_id not in steps:
                steps[buffer_id] = KeyedStep(group.transform_name, holds=True)
        residuals = CarriedResiduals(context.backend, context.parallelism)
        held = HeldElementsStore()
        return cls(plan, run, storage, state_directory, steps, residuals,
                   Watermarks(plan, steps, residuals, held), SideInputHistory(),
                   context.backend.partition_affinity(context.parallelism), held)

    def step_input(self, key: Any) -> Timestamp:
        if isinstance(key, bytes):
            return self.watermarks.group_input(key)
        stage = next(stage for stage in self.plan.stages if stage.index == key)
        return self.watermarks.stage_input(stage)

    def durability(self, step: KeyedStep, partitions: int) -> Optional[StepDurability]:
        """The step's durable state for its tasks (None without a checkpoint location)."""
        if self.storage is None:
            return None
        directory = self.storage.join(self.state_directory, step.directory)
        return StepDurability(self.storage, directory, step.partition_chains(partitions),
                              step.snapshots_due(), step.snapshots_overdue())

    def expire_side_inputs(self) -> None:
        """Drop the side-input elements no reader can ask for any more: its windows'
        ``max_timestamp + allowed lateness`` is behind the main input watermark of every
        stage that reads the side input (a main element of such a window would be late)."""
        for buffer_id in self.side_inputs.sizes():
            self.side_inputs.expire(buffer_id, self.side_input_readers_watermark(buffer_id).micros)

    def side_input_readers_watermark(self, buffer_id: bytes) -> Timestamp:
        """The earliest main input any reader of the side input may still process: its
        input watermark, or a main element it holds for its side inputs."""
        return min((self.watermarks.stage_input(stage) for stage in self.plan.stages
                    if any(spec.buffer_id == buffer_id for spec in stage.side_inputs)),
                   default=MIN_TIMESTAMP)

    def side_watermarks(self, stage: StageSpec) -> Tuple[int, ...]:
        """Each side input's watermark of ``stage`` now (micros)."""
        return side_input_watermarks(stage, self.watermarks.buffer)

    def release_held(self, stage: StageSpec
                     ) -> Tuple[Tuple[Elements, ...], Optional[ReadinessCheck]]:
        """For a round of ``stage`` (a ParDo with side inputs): the main elements held
        earlier whose side inputs are ready now (taken from the store), and the check that
        holds this round's elements not yet ready (None: every side input is done)."""
        side_watermarks = self.side_watermarks(stage)
        taken = self.held.take(stage.index, side_watermarks)
        released = tuple(Elements(port, chunk) for port, chunks in sorted(taken.items())
                         for chunk in chunks)
        if all_done(side_watermarks):
            return released, None
        return released, ReadinessCheck.of(stage, side_watermarks)

    def releasable(self, stage: StageSpec) -> bool:
        """Held main elements of ``stage`` whose side inputs are ready now."""
        return (bool(stage.side_inputs) and self.held.holds(stage.index)
                and self.held.releasable(stage.index, self.side_watermarks(stage)))

    def side_input_sizes(self) -> Dict[str, int]:
        """Side-input elements kept, per side input (its PCollection's name)."""
        pcollections = self.plan.components.pcollections
        return {pcollections[split_buffer_id(buffer_id)[1]].unique_name: size
                for buffer_id, size in self.side_inputs.sizes().items()}


@dataclasses.dataclass
class Round:
    """One round: its number (the store version its keyed steps move to), the batch's clock
    and its source data."""

    number: int
    clock: float
    test_stream_chunks: Dict[bytes, List[bytes]]
    impulse: bool
    #: step key -> its input watermark in this round (computed when the round starts)
    step_inputs: Dict[Any, Timestamp] = dataclasses.field(default_factory=dict)


class RoundGraph(StageGraph):
    """The stages of one streaming round (see the module docstring)."""

    def __init__(self, context: RunContext, state: StreamingState, round_: Round) -> None:
        super().__init__(context)
        self.state = state
        self.round = round_
        self.clock_micros = processing_micros(round_.clock)
        self.ran: Dict[Any, KeyedStep] = {}
        self._released: set = set()  # stages whose held main elements this round releases
        self.compact = False  # the round ran in one task
        # Fewer, fuller tasks would merge key partitions and lose their placement.
        self.coalesce_terminals = not state.placement.enabled
        self._side_collected: set = set()

    # ----- sources
    def source_dataset(self, buffer_id: bytes) -> Optional[Dataset]:
        if buffer_id == IMPULSE_BUFFER:
            return self.backend.source([Elements(0, ENCODED_IMPULSE_VALUE)], 1)
        chunks = self.round.test_stream_chunks.get(buffer_id)
        if chunks is not None or buffer_id in self._test_stream_buffers():
            return self.backend.source([Elements(0, chunk) for chunk in chunks or []], 1)
        return None

    def source_may_have_data(self, buffer_id: bytes) -> bool:
        if buffer_id == IMPULSE_BUFFER:
            return self.round.impulse
        return bool(self.round.test_stream_chunks.get(buffer_id))

    def _test_stream_buffers(self) -> set:
        return {buffer_id for stage in self.plan.stages if stage.kind == TEST_STREAM_STAGE
                for _, buffer_id in stage.outputs}

    # ----- keyed steps
    def _step_runs(self, key: Any, input_live: bool) -> bool:
        step = self.state.steps[key]
        return input_live or step.is_due(self.round.step_inputs[key], self.clock_micros)

    def _keyed_batch(self, key: Any) -> KeyedBatch:
        step = self.state.steps[key]
        input_after = max(step.input_watermark, self.round.step_inputs[key])
        times = BatchTimes(step.input_watermark.micros, step.output_watermark.micros,
                           input_after.micros, self.round.clock)
        self.ran[key] = step
        partitions = self.context.parallelism
        return KeyedBatch(step.name, self.state.run, times, step.version, self.round.number,
                          self.state.durability(step, partitions),
                          step.partition_commits(partitions))

    def _keyed_input(self, records: Dataset, coder_ids: List[str], live: bool,
                     key_prefixed: bool = False) -> Dataset:
        parallelism = self.context.parallelism
        if not live:  # due timers only: a task per key partition, with no input
            return self.backend.source([], parallelism)
        return shuffle.partition_by_key(records, coder_ids, self.components, parallelism,
                                        key_prefixed)

    def group_runs(self, buffer_id: bytes, input_live: bool) -> bool:
        return self._step_runs(buffer_id, input_live)

    def group_dataset(self, buffer_id: bytes, spec: GroupSpec, records: Dataset) -> Dataset:
        live = buffer_id in self.pass_plan.live
        keyed = self._keyed_input(records, [spec.input_coder_id], live)
        batch = self._keyed_batch(buffer_id)
        return self.state.placement.run(batch.step, keyed, functools.partial(
            process_group_partition, spec, self.components, batch))

    def stage_runs(self, stage: StageSpec, input_live: bool) -> bool:
        input_live = input_live or self.state.releasable(stage)
        if stage.keyed:
            return self._step_runs(stage.index, input_live)
        if self.state.residuals.reads(stage):
            return input_live or self.state.residuals.has_due(stage, self.round.clock)
        return input_live

    def stage_input(self, stage: StageSpec, records: Dataset) -> Dataset:
        """Main elements whose side inputs are not ready for their windows are held (they
        leave as reports); those held earlier and ready now join the input."""
        if not stage.side_inputs or self.state.residuals.reads(stage):
            return records
        released, readiness = self.state.release_held(stage)
        if released:
            self._released.add(stage.index)
            records = self.backend.union([records, self.backend.source(list(released), 1)])
        if readiness is None:
            return records
        return records.map_partitions(functools.partial(split_ready, readiness,
                                                        self.components))

    def _input_is_live(self, stage: StageSpec) -> bool:
        return (any(spec.buffer_id in self.pass_plan.live or spec.buffer_id in self.pass_plan.groups
                    for spec in stage.inputs) or stage.index in self._released)

    def keyed_stage_dataset(self, stage: StageSpec, records: Dataset) -> Dataset:
        live = self._input_is_live(stage)
        keyed = self._keyed_input(records, [spec.coder_id for spec in stage.inputs], live,
                                  stage.key_prefixed)
        task = self.context.stage_task(stage, self.side_input_table(stage))
        batch = self._keyed_batch(stage.index)
        return self.state.placement.run(batch.step, keyed, functools.partial(
            process_stateful_partition, task, batch))

    def stage_dataset(self, stage: StageSpec, records: Dataset) -> Dataset:
        if not self.state.residuals.reads(stage):
            return super().stage_dataset(stage, records)
        task = self.context.stage_task(stage, self.side_input_table(stage))
        return self.state.residuals.stage_dataset(stage, task, records,
                                                  self._input_is_live(stage), self.round.clock)

    # ----- side inputs
    def side_buffers_to_keep(self) -> List[bytes]:
        return sorted({spec.buffer_id for stage in self.plan.stages
                       for spec in stage.side_inputs})

    def extra_terminals(self) -> List[Dataset]:
        """What side inputs received in this round without a reader running: to the driver,
        with the job's reports."""
        return [self.buffer_chunks(buffer_id).map(functools.partial(side_input_chunk, buffer_id))
                for buffer_id in self.side_buffers_to_keep()
                if buffer_id in self.pass_plan.live and buffer_id not in self._side_collected]

    def side_input_chunks(self, stage: StageSpec) -> Dict[bytes, List[bytes]]:
        """What each side input received so far: this round's new chunks are collected (one
        job) into the history."""
        wanted = [spec.buffer_id for spec in stage.side_inputs]
        fresh = [buffer_id for buffer_id in wanted
                 if buffer_id in self.pass_plan.live and buffer_id not in self._side_collected]
        collected = self.collect_buffers(fresh)
        for spec in stage.side_inputs:
            if spec.buffer_id in collected:
                self.state.side_inputs.add_chunks(
                    spec.buffer_id, collected.pop(spec.buffer_id), self.components,
                    spec.coder_id, side_input_lateness(self.plan, spec.buffer_id))
                self._side_collected.add(spec.buffer_id)
        # Expired elements are dropped between rounds (the loop): main elements this round
        # releases may still read them.
        return {buffer_id: self.state.side_inputs.chunks(buffer_id) for buffer_id in wanted}

    # ----- a small round in one task
    def run_pass(self) -> List[Any]:
        plan = self.pass_plan or self.plan_pass()
        if plan.is_empty():
            return []
        compact = self._compact_round() if self._may_run_compact() else None
        if compact is None:
            return super().run_pass()
        self.compact = True
        steps = ([step for stage in plan.running for step in stage.steps]
                 + [self.plan.groups[buffer_id].transform_name for buffer_id in plan.groups])
        with self.context.names.job(f"{self.pass_name(plan)} (in one task)", steps):
            return self.context.collect(self.backend.source([0], 1).map_partitions_with_index(
                functools.partial(run_compact_round, compact)))

    def pass_name(self, plan: PassPlan) -> str:
        return f"round {self.round.number}: {super().pass_name(plan)}"

    def _may_run_compact(self) -> bool:
        """Local master, small sources: TestStream events on the driver, and splittable
        DoFns only those that planned how little they read this batch."""
        state = self.state
        if not state.compact_rounds or state.placement.enabled:
            return False
        splittable = [stage for stage in self.pass_plan.running if state.residuals.reads(stage)]
        if splittable and (state.planned_records is None
                           or state.planned_records > COMPACT_ROUND_RECORDS
                           or any(stage.index not in state.planned_stages
                                  for stage in splittable)):
            return False
        size = sum(len(chunk) for chunks in self.round.test_stream_chunks.values()
                   for chunk in chunks)
        return size <= COMPACT_ROUND_BYTES

    def _compact_round(self) -> CompactRound:
        plan = self.pass_plan
        sources: Dict[bytes, List[bytes]] = {}
        if IMPULSE_BUFFER in plan.live and self.round.impulse:
            sources[IMPULSE_BUFFER] = [ENCODED_IMPULSE_VALUE]
        for buffer_id, chunks in self.round.test_stream_chunks.items():
            if buffer_id in plan.live:
                sources[buffer_id] = list(chunks)
        groups = tuple((buffer_id, CompactGroup(self.plan.groups[buffer_id],
                                                self._keyed_batch(buffer_id)))
                       for buffer_id in sorted(plan.groups))
        stages = tuple(self._compact_stage(stage) for stage in plan.running)
        return CompactRound(stages, groups, tuple((buffer_id, tuple(chunks))
                                                  for buffer_id, chunks in sources.items()),
                            self.components, self.context.parallelism,
                            tuple(self.side_buffers_to_keep()))

    def _compact_stage(self, stage: StageSpec) -> CompactStage:
        task = None if stage.kind == RESHUFFLE_STAGE else self.context.stage_task(stage)
        if self.state.residuals.reads(stage):
            carried, splittable = self.state.residuals.compact_input(stage, self.round.clock)
            return CompactStage(stage, task, released=carried, splittable=splittable)
        batch = self._keyed_batch(stage.index) if stage.keyed else None
        released: Tuple[Elements, ...] = ()
        readiness: Optional[ReadinessCheck] = None
        if stage.side_inputs:
            released, readiness = self.state.release_held(stage)
        history = tuple((spec.buffer_id, tuple(self.state.side_inputs.chunks(spec.buffer_id)))
                        for spec in stage.side_inputs)
        return CompactStage(stage, task, batch, readiness, released, history)

    # ----- after the job
    def apply(self, reports: List[Any]) -> None:
        """Take the round's reports: keyed steps that ran advance (those that did not only
        move their watermarks), splittable DoFns' residuals replace the ones they ran."""
        by_step: Dict[str, List[StepReport]] = {}
        for report in reports:
            if isinstance(report, StepReport):
                by_step.setdefault(report.step, []).append(report)
        for key, step in self.state.steps.items():
            input_watermark = self.round.step_inputs[key]
            if key in self.ran:
                step.apply(by_step.get(step.name, []), input_watermark, self.round.clock)
            else:
                step.skip(input_watermark)
        self.state.residuals.apply(reports)
        specs = {spec.buffer_id: spec for stage in self.plan.stages for spec in stage.side_inputs}
        for report in reports:
            if isinstance(report, HeldElements):
                self.state.held.add(report)
            elif isinstance(report, SideInputChunk):
                spec = specs[report.buffer_id]
                self.state.side_inputs.add_chunks(
                    report.buffer_id, [report.data], self.components, spec.coder_id,
                    side_input_lateness(self.plan, report.buffer_id))


def side_input_chunk(buffer_id: bytes, record: Any) -> Any:
    """The ``Elements`` a side input received, for the driver to keep; a report as it is."""
    return SideInputChunk(buffer_id, record.data) if type(record) is Elements else record


def side_input_lateness(plan: Any, buffer_id: bytes) -> Duration:
    """The allowed lateness of the PCollection a side-input buffer materializes."""
    _, pcollection_id = split_buffer_id(buffer_id)
    components = plan.components
    strategy_id = components.pcollections[pcollection_id].windowing_strategy_id
    return Duration(micros=components.windowing_strategies[strategy_id].allowed_lateness * 1000)
