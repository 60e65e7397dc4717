"""One pass over a plan's fused stages as Spark datasets: how every stage runs, in batch and
in each streaming micro-batch.

A pass is planned before it is built, as Beam's FnApiRunner plans stages before running
them: :meth:`StageGraph.plan_pass` decides on the driver, without Spark, which stages run and
which buffers may hold data (a micro-batch skips what has nothing to do, and an idle one runs
no job at all); :meth:`StageGraph.run_pass` then makes each running stage a dataset of the
run's backend (:mod:`runners.spark.backends`: RDDs on classic Spark, DataFrames on Spark
Connect), in the plan's topological order, and runs the pass's one Spark job.

* A stage's input is the union of what its input buffers received, each element chunk
  labelled with the stage input it feeds (:class:`~runners.spark.worker.records.Elements`); it runs
  over each partition (:func:`~runners.spark.worker.bundles.process_partition`: one partition,
  one bundle of Beam's SDK harness). A Reshuffle stage is a shuffle of the runner's.
* A ``group:`` buffer is a GroupByKey the runner performs on what its writers wrote; a
  stateful stage's input is partitioned by key first. How (batch: a shuffle by key and
  Beam's trigger driver over all of a key's elements; streaming: keyed state kept per
  partition) is the subclass's (:meth:`group_dataset`, :meth:`keyed_stage_dataset`).
* Reports for the driver (:mod:`runners.spark.worker.records`) travel with the data: a stage read by
  exactly one reader hands them on to it (a stage read only as one side input, to the job
  that collects that side input); a stage read by several is computed once for all of them
  (:meth:`~runners.spark.backends.base.Backend.compute_once`), and its reports go straight to
  the pass's job. That job collects the reports of
  every stage nobody reads (sinks): one Spark job per pass.
* Side inputs are collected (a Spark job, before their reader is built), laid out per
  window and broadcast (:mod:`runners.spark.worker.side_inputs`).
* A stage the subclass runs in the driver (:meth:`StageGraph.runs_in_driver`: batch runs
  WriteImpl's one-element stages there, :mod:`runners.spark.text_io.sink_stages`) runs on
  records the driver holds (the impulse, what such stages wrote) with the tasks' own code;
  what it writes stays on the driver for side inputs and stages of its kind, and is a dataset
  of those records for Spark stages that read it. Its metrics are taken at once.

Nothing here calls Spark but through the backend: the same pass runs on classic Spark and
on Spark Connect.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, List, Optional, Set, Tuple

from runners.spark.backends.base import Dataset
from runners.spark.backends.stage_labels import stage_label
from runners.spark.beam_internals import ENCODED_IMPULSE_VALUE, IMPULSE_BUFFER
from runners.spark.execution import shuffle
from runners.spark.execution.run_context import RunContext
from runners.spark.planning.execution_plan import (
    RESHUFFLE_STAGE,
    TEST_STREAM_STAGE,
    GroupSpec,
    StageSpec,
)
from runners.spark.worker import side_inputs as side_input_tables
from runners.spark.dependencies.worker import JobEnvironment
from runners.spark.worker.bundles import process_partition
from runners.spark.worker.records import Elements, is_report, relabel


@dataclasses.dataclass
class PassPlan:
    """Which stages run in a pass, and who reads what (driver-side, no Spark)."""

    running: List[StageSpec]
    #: buffers that may receive data in this pass
    live: Set[bytes]
    #: group buffers whose GroupByKey runs in this pass
    groups: Set[bytes]
    #: producer ("stage", index) or ("group", buffer id) -> its readers in this pass:
    #: ("stage", index), ("group", buffer id) or ("side", buffer id)
    readers: Dict[Tuple[str, Any], List[Tuple[str, Any]]]

    def is_empty(self) -> bool:
        return not self.running and not self.groups


class StageGraph:
    """Builds and runs one pass over the plan's stages (see the module docstring).

    Subclasses say where sources come from and how keyed steps run; the defaults here are
    batch's, except the GroupByKey and the keyed stage (abstract).
    """

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.backend = context.backend
        self.plan = context.plan
        self.components = context.components
        self._outputs: Dict[Tuple[str, Any], Dataset] = {}  # producer -> its output
        self._carriers: Dict[Tuple[str, Any], Tuple[str, Any]] = {}  # producer -> reader
        self._terminals: List[Dataset] = []
        self._computed_once: List[Dataset] = []
        self._side_reports: List[Any] = []  # what the jobs collecting side inputs brought
        self._stages = {stage.index: stage for stage in self.plan.stages}
        self._side_chunks: Dict[bytes, List[bytes]] = {}
        self._broadcasts: List[Any] = []
        #: producer -> the Beam steps its output computes since the last shuffle (what
        #: the Spark stage that ends there runs: see :mod:`~runners.spark.backends.stage_labels`)
        self._steps: Dict[Tuple[str, Any], Tuple[str, ...]] = {}
        self._terminal_steps: List[str] = []
        self.pass_plan: Optional[PassPlan] = None
        #: Merge the pass's final partitions into ``parallelism`` tasks when there are more.
        self.coalesce_terminals = True
        #: producer -> its records, for a stage run in the driver
        self._held: Dict[Tuple[str, Any], List[Elements]] = {}

    # ----- what subclasses decide
    def source_dataset(self, buffer_id: bytes) -> Optional[Dataset]:
        """``Elements`` for a buffer the runner fills itself, or None."""
        if buffer_id == IMPULSE_BUFFER:
            return self.backend.source([Elements(0, ENCODED_IMPULSE_VALUE)], 1)
        return None

    def source_may_have_data(self, buffer_id: bytes) -> bool:
        return True

    def group_runs(self, buffer_id: bytes, input_live: bool) -> bool:
        return input_live

    def group_dataset(self, buffer_id: bytes, spec: GroupSpec, records: Dataset) -> Dataset:
        raise NotImplementedError

    def stage_runs(self, stage: StageSpec, input_live: bool) -> bool:
        return input_live

    def keyed_stage_dataset(self, stage: StageSpec, records: Dataset) -> Dataset:
        raise NotImplementedError

    def stage_dataset(self, stage: StageSpec, records: Dataset) -> Dataset:
        """A stage that is neither keyed nor a Reshuffle (a splittable DoFn may override)."""
        task = self.context.stage_task(stage, self.side_input_table(stage))
        return records.map_partitions(functools.partial(process_partition, task))

    def runs_in_driver(self, stage: StageSpec) -> bool:
        """Whether ``stage`` may run in the driver, its inputs being there (none by default)."""
        return False

    def stage_input(self, stage: StageSpec, records: Dataset) -> Dataset:
        """A stage's input records as the stage receives them (streaming holds main
        elements whose side inputs are not ready)."""
        return records

    def side_buffers_to_keep(self) -> List[bytes]:
        """Side-input buffers whose data a pass must hand to the driver even when no reader
        runs in it (streaming keeps them for later batches; batch runs every reader)."""
        return []

    def extra_terminals(self) -> List[Dataset]:
        """Reports the pass's job collects besides the stages' own."""
        return []

    def pass_name(self, plan: PassPlan) -> str:
        """What the pass's Spark job does, for its description."""
        return "run " + ", ".join(step for stage in plan.running for step in stage.steps)

    def side_input_chunks(self, stage: StageSpec) -> Dict[bytes, List[bytes]]:
        """Every encoded element chunk of the stage's side-input buffers (batch: all of
        them; the buffers not collected yet in one job: WriteToText alone reads the same
        buffers 2-3 times, and a job costs ~0.1 s)."""
        wanted = [spec.buffer_id for spec in stage.side_inputs]
        missing = [buffer_id for buffer_id in wanted if buffer_id not in self._side_chunks]
        self._side_chunks.update(self.collect_buffers(missing))
        return {buffer_id: self._side_chunks[buffer_id] for buffer_id in wanted}

    # ----- planning
    def plan_pass(self) -> PassPlan:
        live: Set[bytes] = set()
        groups: Set[bytes] = set()
        running: List[StageSpec] = []
        readers: Dict[Tuple[str, Any], List[Tuple[str, Any]]] = {}
        writers: Dict[bytes, List[Tuple[str, Any]]] = {}

        def buffer_live(buffer_id: bytes) -> bool:
            if buffer_id in self.plan.groups:
                return buffer_id in groups
            return buffer_id in live

        def read(buffer_id: bytes, reader: Tuple[str, Any]) -> None:
            if buffer_id in self.plan.groups:
                readers.setdefault(("group", buffer_id), []).append(reader)
            else:
                for writer in writers.get(buffer_id, []):
                    readers.setdefault(writer, []).append(reader)

        def plan_group(buffer_id: bytes) -> None:
            if buffer_id in self.plan.groups and buffer_id not in groups:
                if self.group_runs(buffer_id, buffer_id in live):
                    groups.add(buffer_id)
                    for writer in writers.get(buffer_id, []):
                        readers.setdefault(writer, []).append(("group", buffer_id))

        for buffer_id in self._source_buffers():
            if self.source_may_have_data(buffer_id):
                live.add(buffer_id)
        for stage in self.plan.stages:
            if stage.kind == TEST_STREAM_STAGE:
                continue
            for spec in stage.inputs:
                plan_group(spec.buffer_id)
            input_live = any(buffer_live(spec.buffer_id) for spec in stage.inputs)
            if not self.stage_runs(stage, input_live):
                continue
            running.append(stage)
            for spec in stage.inputs:
                if buffer_live(spec.buffer_id):
                    read(spec.buffer_id, ("stage", stage.index))
            for spec in stage.side_inputs:
                if buffer_live(spec.buffer_id):
                    read(spec.buffer_id, ("side", spec.buffer_id))
            for _, buffer_id in stage.outputs:
                live.add(buffer_id)
                writers.setdefault(buffer_id, []).append(("stage", stage.index))
        running_side_inputs = {spec.buffer_id for stage in running for spec in stage.side_inputs}
        for buffer_id in self.side_buffers_to_keep():
            if buffer_live(buffer_id) and buffer_id not in running_side_inputs:
                read(buffer_id, ("side", buffer_id))
        self.pass_plan = PassPlan(running, live, groups, readers)
        return self.pass_plan

    def _source_buffers(self) -> List[bytes]:
        buffers = {IMPULSE_BUFFER}
        for stage in self.plan.stages:
            if stage.kind == TEST_STREAM_STAGE:
                buffers.update(buffer_id for _, buffer_id in stage.outputs)
        return sorted(buffers)

    # ----- building and running
    def run_pass(self) -> List[Any]:
        """Build the planned pass and run its Spark job; returns the reports it collected
        (nothing runs, and no job, when no stage has anything to do)."""
        plan = self.pass_plan or self.plan_pass()
        if plan.is_empty():
            return []
        names = self.context.names
        try:
            with names.job(self.pass_name(plan)):
                for stage in plan.running:
                    producer = ("stage", stage.index)
                    if self.runs_in_driver(stage) and self._held_input(stage) is not None:
                        self._outputs[producer] = self._driver_stage(stage)
                        continue  # its reports are taken: nothing to hand on
                    self._outputs[producer] = self._stage(stage)
                    self._hand_on(producer)
                for buffer_id in plan.groups:  # a GroupByKey nobody reads still reports
                    if ("group", buffer_id) not in self._outputs:
                        self._group(buffer_id)
                self._terminals.extend(self.extra_terminals())
                reports = list(self._side_reports)
                if not self._terminals:
                    return reports
                union = self.backend.union(self._terminals)
                if self.coalesce_terminals:
                    # A Python task costs ~0.1 s however little it does: fewer, fuller tasks.
                    union = union.coalesce(self.context.parallelism)
                with names.call_site(stage_label(self._terminal_steps)):
                    return reports + self.context.collect(union)
        finally:
            self.release_pass()

    def release_pass(self) -> None:
        for held in self._broadcasts + self._computed_once:
            held.unpersist()
        self._broadcasts, self._terminals, self._computed_once = [], [], []
        self._side_reports = []
        self._outputs, self._carriers, self._side_chunks = {}, {}, {}
        self._steps, self._terminal_steps = {}, []
        self._held = {}

    def _stage(self, stage: StageSpec) -> Dataset:
        records = self.stage_input(stage, self._input(stage))
        upstream = tuple(step for spec in stage.inputs for producer in self._producers(
            spec.buffer_id) for step in self._steps.get(producer, ()))
        if stage.kind != RESHUFFLE_STAGE and not stage.keyed:
            self._steps[("stage", stage.index)] = upstream + stage.steps
            return self.stage_dataset(stage, records)
        # Its input is shuffled first: the Spark stage before it ends with that shuffle.
        self._steps[("stage", stage.index)] = stage.steps
        with self.context.names.call_site(stage_label(upstream, then=" + ".join(stage.steps))):
            if stage.keyed:
                return self.keyed_stage_dataset(stage, records)
            spec = stage.inputs[0]
            return shuffle.reshuffle(records, spec.coder_id, stage.output_coder_id or spec.coder_id,
                                     self.components, self.context.parallelism,
                                     by_size=stage.deal_by_size)

    def _held_input(self, stage: StageSpec) -> Optional[List[Elements]]:
        """The stage's input records when the driver holds all of them (the impulse, what
        stages run in the driver wrote), each on its input's port; else None."""
        records: List[Elements] = []
        for port, spec in enumerate(stage.inputs):
            if spec.buffer_id == IMPULSE_BUFFER:
                if IMPULSE_BUFFER in self.pass_plan.live:
                    records.append(Elements(port, ENCODED_IMPULSE_VALUE))
                continue
            if spec.buffer_id in self.plan.groups:
                return None
            producers = self._writers(spec.buffer_id)
            if any(producer not in self._held for producer in producers):
                return None
            records.extend(Elements(port, chunk) for chunk in self._held_chunks(spec.buffer_id))
        return records

    def _held_chunks(self, buffer_id: bytes) -> List[bytes]:
        return [record.data for producer in self._writers(buffer_id) if producer in self._held
                for record in self._held[producer]
                if self._written(producer)[record.port] == buffer_id]

    def _driver_stage(self, stage: StageSpec) -> Dataset:
        """Run ``stage`` in the driver on its held input, with the tasks' code and the
        stage's side inputs; keep what it writes, and take its metrics."""
        records = self._held_input(stage)
        task = self.context.stage_task(stage, self.side_input_table(stage))
        # Beam's own steps only: no staged packages or main session to load here, and the
        # driver is in its own directory.
        task.environment = JobEnvironment()
        produced = self.context.metrics.take(list(process_partition(task, iter(records))))
        held = [record for record in produced if type(record) is Elements]
        self._side_reports.extend(record for record in produced if type(record) is not Elements)
        self._held[("stage", stage.index)] = held
        self._steps[("stage", stage.index)] = ()
        return self.backend.source(held, 1)

    def _input(self, stage: StageSpec) -> Dataset:
        """The stage's input records: each input buffer's elements on the input's port."""
        parts = []
        for port, spec in enumerate(stage.inputs):
            parts.extend(self._buffer_parts(spec.buffer_id, port, ("stage", stage.index)))
        return self._union(parts)

    def _union(self, parts: List[Dataset]) -> Dataset:
        return self.backend.union(parts) if parts else self.backend.empty()

    def _buffer_parts(self, buffer_id: bytes, port: int,
                      reader: Tuple[str, Any]) -> List[Dataset]:
        source = self.source_dataset(buffer_id)
        if source is not None:
            if not self.pass_plan or buffer_id not in self.pass_plan.live:
                return []
            return [source if port == 0 else source.map(functools.partial(relabel, port))]
        if buffer_id in self.plan.groups:
            if buffer_id not in self.pass_plan.groups:
                return []
            if ("group", buffer_id) not in self._outputs:
                self._group(buffer_id)
        return [self._edge(producer, buffer_id, port, reader)
                for producer in self._producers(buffer_id)]

    def _producers(self, buffer_id: bytes) -> List[Tuple[str, Any]]:
        """Who wrote ``buffer_id`` in this pass (built so far): its GroupByKey, or stages."""
        if buffer_id in self.plan.groups:
            producer = ("group", buffer_id)
            return [producer] if producer in self._outputs else []
        return self._writers(buffer_id)

    def _writers(self, buffer_id: bytes) -> List[Tuple[str, Any]]:
        return [producer for producer in self._outputs
                if producer[0] == "stage" and buffer_id in self._written(producer)]

    def _written(self, producer: Tuple[str, Any]) -> List[bytes]:
        return [buffer_id for _, buffer_id in self._stages[producer[1]].outputs]

    def _edge(self, producer: Tuple[str, Any], buffer_id: bytes, port: int,
              reader: Tuple[str, Any]) -> Dataset:
        """The producer's elements of ``buffer_id``, on ``port``; its reports too when this
        reader carries them on. (A stage may write one buffer from several outputs: the
        outputs of a Flatten's inputs.)"""
        output = self._outputs[producer]
        ports = (frozenset([0]) if producer[0] == "group" else frozenset(
            index for index, written in enumerate(self._written(producer))
            if written == buffer_id))
        with_reports = self._carriers.get(producer) == reader
        wanted = output.filter(functools.partial(_wanted, ports, with_reports))
        if ports == frozenset([port]):
            return wanted
        return wanted.map(functools.partial(relabel, port))

    def _group(self, buffer_id: bytes) -> None:
        writers = self._writers(buffer_id)
        records = self._union([self._edge(producer, buffer_id, 0, ("group", buffer_id))
                               for producer in writers])
        spec = self.plan.groups[buffer_id]
        upstream = [step for producer in writers for step in self._steps.get(producer, ())]
        with self.context.names.call_site(stage_label(upstream, then=spec.transform_name)):
            self._outputs[("group", buffer_id)] = self.group_dataset(buffer_id, spec, records)
        self._steps[("group", buffer_id)] = (spec.transform_name,)
        self._hand_on(("group", buffer_id))

    def _hand_on(self, producer: Tuple[str, Any]) -> None:
        """Decide where the producer's reports go: on with its only reader (the job that
        collects a side input, when that is all that reads it), or (read by several, or by
        nobody) straight to the pass's job.

        An output read several times is computed once for all of its readers (and jobs);
        one read only as one side input is computed by the job that collects it, once:
        nothing reads it again."""
        readers = self.pass_plan.readers.get(producer, [])
        output = self._outputs[producer]
        if len(set(readers)) == 1 and (len(readers) == 1 or readers[0][0] == "side"):
            self._carriers[producer] = readers[0]
            return
        if readers:
            label = stage_label(self._steps.get(producer, ()), then=f"{len(readers)} readers")
            with self.context.names.call_site(label):
                output = self.backend.compute_once(output)
            self._computed_once.append(output)
            self._outputs[producer] = output
            self._steps[producer] = ()
        self._terminals.append(output.filter(is_report))
        self._terminal_steps.extend(self._steps.get(producer, ()))

    # ----- side inputs
    def buffer_chunks(self, buffer_id: bytes) -> Dataset:
        """What a buffer received in this pass, as a side input reads it: ``Elements`` on
        port 0, and the reports of a producer that only this side input reads."""
        return self._union(self._buffer_parts(buffer_id, 0, ("side", buffer_id)))

    def collect_buffers(self, buffer_ids: List[bytes]) -> Dict[bytes, List[bytes]]:
        """The chunks of these buffers in this pass, collected in one Spark job (the reports
        that come with them are kept for the pass's result)."""
        wanted = sorted(set(buffer_ids))
        collected: Dict[bytes, List[bytes]] = {buffer_id: [] for buffer_id in wanted}
        for buffer_id in list(wanted):  # written in the driver: no job
            producers = self._writers(buffer_id)
            if (buffer_id not in self.plan.groups and producers
                    and all(producer in self._held for producer in producers)):
                collected[buffer_id] = self._held_chunks(buffer_id)
                wanted.remove(buffer_id)
        if not wanted:
            return collected
        tagged = [self.buffer_chunks(buffer_id).map(functools.partial(on_position, position))
                  for position, buffer_id in enumerate(wanted)]
        union = self.backend.union(tagged)
        steps = [step for buffer_id in wanted for producer in self._producers(buffer_id)
                 for step in self._steps.get(producer, ())]
        with self.context.names.job("collect side inputs", steps):
            for item in self.context.collect(union):
                if is_report(item):
                    self._side_reports.append(item)
                else:
                    collected[wanted[item[0]]].append(item[1])
        return collected

    def side_input_table(self, stage: StageSpec) -> Optional[side_input_tables.SharedSideInputs]:
        """The stage's side inputs laid out per window, broadcast (None without any)."""
        if not stage.side_inputs:
            return None
        chunks = self.side_input_chunks(stage)
        table: Dict[bytes, List[bytes]] = {}
        for spec in stage.side_inputs:
            coder = self.components.coder(spec.coder_id)
            materialized = side_input_tables.materialize(spec, chunks.get(spec.buffer_id, []),
                                                         coder)
            for state_key, values in materialized.items():
                table.setdefault(state_key, []).extend(values)
        shared = side_input_tables.SharedSideInputs.create(self.backend, table)
        self._broadcasts.append(shared)
        return shared


def on_position(position: int, record: Any) -> Any:
    """``(position, encoded chunk)`` for the ``Elements`` of a side input; a report as it is."""
    return (position, record.data) if type(record) is Elements else record


def _wanted(ports: frozenset, with_reports: bool, record: Any) -> bool:
    if type(record) is Elements:
        return record.port in ports
    return with_reports
