"""One micro-batch over the fused stages (driver side): RDDs, keyed state, watermarks.

Stages run in the plan's topological order. A stateless stage runs as in batch
(``mapPartitions`` with the SDK harness), lazily, over what its inputs received this batch.
A GroupByKey (a ``group:`` buffer) and a stateful stage are *keyed steps*: the batch's
elements, keyed by their encoded key, and the step's state RDD (one encoded blob per
partition) are partitioned together by ``crc32`` of the key, so each key meets its own state
in one task (:mod:`~runners.spark.streaming.grouping`, :mod:`~runners.spark.streaming.
stateful`). That result is locally checkpointed (lineage stays one batch long), its
report collected (watermark holds, state size; a Spark job, shared with the batch's sinks
when nothing downstream needs it sooner: :mod:`~runners.spark.streaming.batch_end`), and
its new state becomes the next batch's state RDD.

Why state as a partitioned RDD re-shuffled with each batch, rather than Spark's
``mapWithState``-style cogroup: PySpark has neither ``zipPartitions`` nor a partitioner-
preserving union, so a cogroup shuffles both sides anyway; partitioning the union once is
the same cost and one concept. State stays small per key (encoded, expired windows
collected), so the shuffle is cheap next to the batch's data.

Watermarks follow Beam's DirectRunner (``watermark_manager``): a stage's input watermark is
the minimum of its inputs' output watermarks (never moving back); its output watermark is
its input watermark, or for a GroupByKey min(input watermark, the keys' holds).
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from pyspark import StorageLevel

from runners.spark import shuffle
from runners.spark import side_inputs as side_input_tables
from runners.spark.beam_internals import ENCODED_IMPULSE_VALUE, IMPULSE_BUFFER
from runners.spark.bundles import StageTask, process_partition
from runners.spark.components import SharedComponents, iter_encoded
from runners.spark.planning import (
    RESHUFFLE_STAGE,
    TEST_STREAM_STAGE,
    ExecutionPlan,
    StageSpec,
)
from runners.spark.streaming import coders as _coders  # noqa: F401 (registers the coder)
from runners.spark.streaming.batch_end import BatchEnd, DeferredStep, urgent_groups
from runners.spark.streaming.grouping import BatchTimes, process_group_partition
from runners.spark.streaming.keyed_step import KeyedStep
from runners.spark.streaming.stateful import process_stateful_partition
from runners.spark.streaming.unbounded import CarriedResiduals


class BatchStages:
    """Runs the plan's stages once per micro-batch, keeping keyed state between batches.

    Args:
      spark_context: the SparkContext.
      plan: the fused stages (planned for streaming).
      components: the pipeline's broadcast components.
      metrics: the run's MonitoringInfo accumulator.
      parallelism: key partitions of every keyed step (fixed for the run: state lives there).
      bundle_size: as in batch.
    """

    def __init__(self, spark_context: Any, plan: ExecutionPlan, components: SharedComponents,
                 metrics: Any, parallelism: int, bundle_size: Optional[int]) -> None:
        self.sc = spark_context
        self.plan = plan
        self.components = components
        self.metrics = metrics
        self.parallelism = parallelism
        self.bundle_size = bundle_size
        self.steps: Dict[Any, KeyedStep] = {}
        self.stage_watermarks: Dict[int, Timestamp] = {}
        self._writers: Dict[bytes, List[int]] = {}
        for stage in plan.stages:
            for _, buffer_id in stage.outputs:
                self._writers.setdefault(buffer_id, []).append(stage.index)
        self._side_buffers = {spec.buffer_id for stage in plan.stages
                              for spec in stage.side_inputs}
        # Side inputs see every element their buffer received so far: collected chunks of
        # past batches (the RDDs that made them are freed), and this batch's RDDs.
        self._side_history: Dict[bytes, List[bytes]] = {}
        self._side_pending: Dict[bytes, List[Any]] = {}
        #: Residuals of splittable DoFns, carried to the next batch.
        self.unbounded = CarriedResiduals(spark_context, parallelism)
        self._batch_persisted: List[Any] = []
        self._batch_end = BatchEnd()
        #: GroupByKeys reported at once (a later stage needs their watermark this batch).
        self._urgent = urgent_groups(plan, self.unbounded.reads)
        self._impulse_done = False
        self._broadcasts: List[Any] = []  # side input tables, freed at the end of each batch

    # ----- watermarks
    def buffer_watermark(self, buffer_id: bytes, sources: Dict[bytes, Timestamp]) -> Timestamp:
        if buffer_id == IMPULSE_BUFFER:
            return MAX_TIMESTAMP if self._impulse_done else MIN_TIMESTAMP
        if buffer_id in self.plan.groups:
            step = self.steps.get(buffer_id)
            return step.output_watermark if step else MIN_TIMESTAMP
        if buffer_id in sources:
            return sources[buffer_id]
        writers = self._writers.get(buffer_id, [])
        return min((self.stage_watermarks.get(index, MIN_TIMESTAMP) for index in writers),
                   default=MAX_TIMESTAMP)

    def watermarks_final(self, sources: Dict[bytes, Timestamp]) -> bool:
        """True once every stage's and every GroupByKey's output watermark is at the end."""
        return (all(wm >= MAX_TIMESTAMP for wm in self.stage_watermarks.values())
                and all(step.output_watermark >= MAX_TIMESTAMP for step in self.steps.values()))

    # ----- one batch
    def run_batch(self, source_chunks: Dict[bytes, List[bytes]],
                  source_watermarks: Dict[bytes, Timestamp], clock: float) -> None:
        """Process one micro-batch: the sources' chunks, then watermark advances and timers.

        Buffers known to be empty this batch are tracked, so steps with nothing to do (no
        input, and no state or no watermark/clock change) start no Spark job.
        """
        written: Dict[bytes, List[Any]] = {}
        empty: Dict[bytes, bool] = {}
        self.unbounded.next_batch()
        for stage in self.plan.stages:
            if stage.kind == TEST_STREAM_STAGE:
                for _, buffer_id in stage.outputs:
                    chunks = source_chunks.get(buffer_id, [])
                    rdd = self.sc.parallelize(chunks, 1) if chunks else self.sc.emptyRDD()
                    written.setdefault(buffer_id, []).append(rdd)
                    empty[buffer_id] = empty.get(buffer_id, True) and not chunks
                    if chunks:
                        self._remember_side_input(buffer_id, rdd)
                self.stage_watermarks[stage.index] = min(
                    (source_watermarks[b] for _, b in stage.outputs), default=MAX_TIMESTAMP)
                continue
            sources, inputs_empty = [], True
            for index, spec in enumerate(stage.inputs):
                rdd, is_empty = self._read(spec.buffer_id, written, empty, clock)
                sources.append((index, spec, rdd))
                inputs_empty = inputs_empty and is_empty
            input_watermark = min(
                (self.buffer_watermark(spec.buffer_id, source_watermarks)
                 for spec in stage.inputs), default=MAX_TIMESTAMP)
            rdd, output_empty = self._run_stage(stage, sources, inputs_empty, input_watermark,
                                                clock)
            self.stage_watermarks[stage.index] = self._stage_output_watermark(stage, input_watermark)
            readers = sum(self.plan.readers.get(b, 0) for _, b in stage.outputs)
            if not output_empty and (
                    readers > 1 or any(b in self._side_buffers for _, b in stage.outputs)):
                rdd = rdd.persist(StorageLevel.MEMORY_AND_DISK)
                self._batch_persisted.append(rdd)
            for index, (_, buffer_id) in enumerate(stage.outputs):
                chunks = (self.sc.emptyRDD() if output_empty
                          else rdd.filter(functools.partial(_has_tag, index)).values())
                written.setdefault(buffer_id, []).append(chunks)
                empty[buffer_id] = empty.get(buffer_id, True) and output_empty
                if not output_empty:
                    self._remember_side_input(buffer_id, chunks)
            if not readers and not output_empty:
                self._batch_end.sinks.append(rdd)
        self._impulse_done = True
        self._finish_batch(source_watermarks)
        self._collect_side_inputs(list(self._side_pending))  # before their inputs are freed
        for rdd in self._batch_persisted:
            rdd.unpersist(blocking=False)
        self._batch_persisted = []
        for broadcast in self._broadcasts:
            broadcast.unpersist()
        self._broadcasts = []

    def _finish_batch(self, source_watermarks: Dict[bytes, Timestamp]) -> None:
        """Write the sinks and report the deferred steps (one Spark job); then the stages
        after a deferred GroupByKey see its new output watermark."""
        finished = self._batch_end.finish(self.sc, _report_of, _is_not_kind_out,
                                          self.parallelism)
        for deferred, reports in finished:
            self._advance(deferred.step, deferred.result, reports, deferred.input_watermark,
                          deferred.holds, deferred.clock)
        if any(deferred.holds for deferred, _ in finished):
            for stage in self.plan.stages:
                if stage.kind != TEST_STREAM_STAGE:
                    input_watermark = min(
                        (self.buffer_watermark(spec.buffer_id, source_watermarks)
                         for spec in stage.inputs), default=MAX_TIMESTAMP)
                    self.stage_watermarks[stage.index] = self._stage_output_watermark(
                        stage, input_watermark)

    def _stage_output_watermark(self, stage: StageSpec, input_watermark: Timestamp) -> Timestamp:
        if self.unbounded.reads(stage):  # held by the residuals' watermarks
            return self.unbounded.output_watermark(
                stage.index, input_watermark, self.stage_watermarks.get(stage.index, MIN_TIMESTAMP))
        step = self.steps.get(stage.index)
        return step.output_watermark if step is not None else input_watermark

    def _remember_side_input(self, buffer_id: bytes, rdd: Any) -> None:
        if buffer_id in self._side_buffers:
            self._side_pending.setdefault(buffer_id, []).append(rdd)

    def _collect_side_inputs(self, buffer_ids: List[bytes]) -> None:
        """Collect this batch's RDDs of these side-input buffers into their history, in one
        Spark job (an RDD is never re-read in a later batch: what it came from is freed)."""
        pending = [(buffer_id, rdd) for buffer_id in buffer_ids
                   for rdd in self._side_pending.pop(buffer_id, [])]
        if not pending:
            return
        tagged = [rdd.map(functools.partial(_tag, index)) for index, (_, rdd) in enumerate(pending)]
        union = tagged[0] if len(tagged) == 1 else self.sc.union(tagged)
        for index, chunk in union.collect():
            self._side_history.setdefault(pending[index][0], []).append(chunk)

    def _read(self, buffer_id: bytes, written: Dict[bytes, List[Any]],
              empty: Dict[bytes, bool], clock: float) -> Tuple[Any, bool]:
        """This batch's chunks of a buffer (a GroupByKey's panes for a ``group:`` buffer),
        and whether they are known to be empty."""
        if buffer_id == IMPULSE_BUFFER:
            if self._impulse_done:
                return self.sc.emptyRDD(), True
            return self.sc.parallelize([ENCODED_IMPULSE_VALUE], 1), False
        rdds = written.get(buffer_id, [])
        rdd = (self.sc.emptyRDD() if not rdds else rdds[0] if len(rdds) == 1
               else self.sc.union(rdds))
        is_empty = empty.get(buffer_id, True)
        group = self.plan.groups.get(buffer_id)
        if group is None:
            return rdd, is_empty
        writers_watermark = min(
            (self.stage_watermarks.get(index, MIN_TIMESTAMP)
             for index in self._writers.get(buffer_id, [])), default=MAX_TIMESTAMP)
        step = self._step(buffer_id, group.transform_name)
        keyed = rdd.mapPartitions(functools.partial(
            _keyed_elements, group.input_coder_id, self.components, None))
        run = functools.partial(process_group_partition, group, self.components)
        result, output_empty = self._keyed_batch(step, keyed, is_empty, writers_watermark,
                                                 clock, run, holds=True,
                                                 defer=buffer_id not in self._urgent)
        if output_empty:
            return self.sc.emptyRDD(), True
        return result.filter(_is_kind_out).map(_payload), False

    def _step(self, key: Any, name: str) -> KeyedStep:
        if key not in self.steps:
            self.steps[key] = KeyedStep(name, self.sc.emptyRDD())
        return self.steps[key]

    def _keyed_batch(self, step: KeyedStep, keyed: Any, input_empty: bool,
                     upstream_watermark: Timestamp, clock: float, run: Any,
                     holds: bool, defer: bool) -> Tuple[Any, bool]:
        """Run a keyed step over the batch with its state: (its result, or None when it had
        nothing to do; whether its output is known to be empty).

        A deferred step is reported at the end of the batch (:meth:`_finish_batch`); until
        then its output watermark is its input watermark if it holds none.
        """
        new_input = max(step.input_watermark, upstream_watermark)
        if step.is_idle(input_empty, new_input, clock):
            step.skip(new_input, clock)
            return None, True
        times = BatchTimes(step.input_watermark.micros, step.output_watermark.micros,
                           new_input.micros, clock)
        records = self.sc.union([step.state, keyed]).partitionBy(
            self.parallelism, _partition_of)
        result = records.mapPartitionsWithIndex(functools.partial(run, times))
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        result.localCheckpoint()
        if defer:
            self._batch_end.steps.append(DeferredStep(step, result, new_input, holds, clock))
            if not holds:
                step.input_watermark = step.output_watermark = new_input
            return result, False
        reports = result.filter(_is_not_kind_out).map(_report_of).collect()
        self._advance(step, result, reports, new_input, holds, clock)
        return result, not step.outputs

    @staticmethod
    def _advance(step: KeyedStep, result: Any, reports: List[Any], input_watermark: Timestamp,
                 holds: bool, clock: float) -> None:
        metas = [payload for kind, payload in reports if kind == "meta"]
        step.advance(result, metas, input_watermark, holds, clock)
        step.state_bytes = sum(payload for kind, payload in reports if kind == "state")

    def _run_stage(self, stage: StageSpec, sources, inputs_empty: bool,
                   input_watermark: Timestamp, clock: float) -> Tuple[Any, bool]:
        """The stage's tagged output RDD for this batch, and whether it is known empty."""
        if stage.kind == RESHUFFLE_STAGE:
            (_, spec, source), = sources
            if inputs_empty:
                return self.sc.emptyRDD(), True
            rdd = shuffle.reshuffle(source, spec.coder_id, stage.output_coder_id or spec.coder_id,
                                    self.components, self.parallelism)
            return rdd.map(functools.partial(_tag, 0)), False
        if stage.keyed:
            step = self._step(stage.index, stage.name)
            if step.is_idle(inputs_empty, max(step.input_watermark, input_watermark), clock):
                step.skip(max(step.input_watermark, input_watermark), clock)
                return self.sc.emptyRDD(), True
            task = StageTask(stage, self.components, self._side_input_table(stage),
                             self.metrics, self.bundle_size)
            keyed = [rdd.mapPartitions(functools.partial(
                _keyed_elements, spec.coder_id, self.components, index))
                for index, spec, rdd in sources]
            union = keyed[0] if len(keyed) == 1 else self.sc.union(keyed)
            run = functools.partial(process_stateful_partition, task)
            result, output_empty = self._keyed_batch(step, union, inputs_empty,
                                                     input_watermark, clock, run,
                                                     holds=False, defer=True)
            if output_empty:
                return self.sc.emptyRDD(), True
            return result.filter(_is_kind_out).map(_payload), False
        if self.unbounded.reads(stage):
            task = StageTask(stage, self.components, self._side_input_table(stage),
                             self.metrics, self.bundle_size)
            return self.unbounded.run(stage, task, sources, inputs_empty, clock)
        if inputs_empty:
            return self.sc.emptyRDD(), True
        task = StageTask(stage, self.components, self._side_input_table(stage), self.metrics,
                         self.bundle_size)
        tagged = [rdd.map(functools.partial(_tag, index)) for index, _, rdd in sources]
        records = tagged[0] if len(tagged) == 1 else self.sc.union(tagged)
        return records.mapPartitions(functools.partial(_stateless_partition, task)), False

    def _side_input_table(self, stage: StageSpec) -> Any:
        """Side inputs see every element their buffer received so far, in all batches."""
        if not stage.side_inputs:
            return None
        table: Dict[bytes, List[bytes]] = {}
        self._collect_side_inputs([spec.buffer_id for spec in stage.side_inputs])
        for spec in stage.side_inputs:
            chunks = self._side_history.get(spec.buffer_id, [])
            coder = self.components.coder(spec.coder_id)
            for state_key, values in side_input_tables.materialize(spec, chunks, coder).items():
                table.setdefault(state_key, []).extend(values)
        broadcast = self.sc.broadcast(table)
        self._broadcasts.append(broadcast)
        return broadcast

    def release(self) -> None:
        for step in self.steps.values():
            step.release()
        self.unbounded.release()
        for rdd in self._batch_persisted:
            rdd.unpersist(blocking=False)

    def snapshot(self) -> Dict[str, Any]:
        """Everything carried between batches, as plain data, for a checkpoint: one Spark
        job collects every keyed step's state records, (partition, blob) each. Stages are
        named, not numbered: the fused stages' order may differ in another driver."""
        names = {stage.index: stage.name for stage in self.plan.stages}
        steps = list(self.steps.items())
        tagged = [step.state.map(functools.partial(_tag, position))
                  for position, (_, step) in enumerate(steps)]
        states: Dict[int, List[Tuple[int, bytes]]] = {position: []
                                                      for position in range(len(steps))}
        if tagged:
            union = tagged[0] if len(tagged) == 1 else self.sc.union(tagged)
            for position, (partition, (_, blob)) in union.collect():
                states[position].append((partition, blob))
        return {
            "parallelism": self.parallelism,
            "impulse_done": self._impulse_done,
            "stage_watermarks": {names[index]: watermark.micros
                                 for index, watermark in self.stage_watermarks.items()},
            # A GroupByKey's step is keyed by its buffer id, a stateful stage's by its name.
            "steps": [{"group": key if isinstance(key, bytes) else None,
                       "stage": None if isinstance(key, bytes) else names[key],
                       "state": states[position], **step.snapshot()}
                      for position, (key, step) in enumerate(steps)],
            "side_inputs": {buffer_id: list(chunks)
                            for buffer_id, chunks in self._side_history.items()},
            "unbounded": self.unbounded.snapshot(),
        }

    def restore(self, snapshot: Dict[str, Any]) -> None:
        """Resume from :meth:`snapshot` (before the first batch). The checkpoint's key
        partitions are kept: state records are placed by their partition number."""
        indexes = {stage.name: stage.index for stage in self.plan.stages}
        self.parallelism = snapshot["parallelism"]
        self.unbounded.parallelism = self.parallelism
        self._impulse_done = snapshot["impulse_done"]
        self.stage_watermarks = {indexes[name]: Timestamp(micros=micros)
                                 for name, micros in snapshot["stage_watermarks"].items()}
        for entry in snapshot["steps"]:
            records = [(partition, ("state", blob)) for partition, blob in entry["state"]]
            state = (self.sc.parallelize(records, len(records)) if records
                     else self.sc.emptyRDD())
            key = entry["group"] if entry["group"] is not None else indexes[entry["stage"]]
            self._step(key, entry["name"]).restore(entry, state)
        self._side_history = {buffer_id: list(chunks)
                              for buffer_id, chunks in snapshot["side_inputs"].items()}
        self.unbounded.restore(snapshot["unbounded"])


def _stateless_partition(task: StageTask, records):
    """``process_partition``, from this module so workers register the micros coder first."""
    return process_partition(task, records)


def _keyed_elements(coder_id: str, components: SharedComponents, index: Optional[int], chunks):
    """(encoded key, ("element", encoded element or (input index, encoded element)))."""
    coder_impl = components.coder_impl(coder_id)
    key_impl = components.coder(coder_id).key_coder().get_impl()
    for chunk in chunks:
        for element, encoded in iter_encoded(coder_impl, chunk):
            payload = encoded if index is None else (index, encoded)
            yield key_impl.encode(element.value[0]), ("element", payload)


def _partition_of(key: Any) -> int:
    """State records carry their partition number; elements the bytes of their key."""
    return key if isinstance(key, int) else shuffle.key_partition(key)


def _tag(index: int, chunk: bytes) -> Tuple[int, bytes]:
    return index, chunk


def _has_tag(index: int, record) -> bool:
    return record[0] == index


def _is_kind_out(record) -> bool:
    return record[0] == "out"


def _is_not_kind_out(record) -> bool:
    return record[0] != "out"


def _report_of(record) -> Tuple[str, Any]:
    """A meta record as it is; a state record as its size (a state record is
    ("state", (partition, ("state", blob))))."""
    if record[0] == "state":
        return "state", len(record[1][1][1])
    return record


def _payload(record) -> Any:
    return record[1]

