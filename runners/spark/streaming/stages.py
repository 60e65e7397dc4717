"""One micro-batch over the fused stages (driver side): RDDs, keyed state, watermarks.

Stages run in the plan's topological order. A stateless stage runs as in batch
(``mapPartitions`` with the SDK harness), lazily, over what its inputs received this batch.
A GroupByKey (a ``group:`` buffer) and a stateful stage are *keyed steps*: the batch's
elements, keyed by their encoded key, and the step's state RDD (one encoded blob per
partition) are partitioned together by ``crc32`` of the key, so each key meets its own state
in one task (:mod:`~runners.spark.streaming.grouping`, :mod:`~runners.spark.streaming.
stateful`). That result is locally checkpointed (lineage stays one batch long), its
metadata collected (a Spark job), and its new state becomes the next batch's state RDD.

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
from runners.spark.streaming.grouping import BatchTimes, process_group_partition
from runners.spark.streaming.stateful import process_stateful_partition
from runners.spark.streaming.unbounded import CarriedResiduals


class KeyedStep:
    """A GroupByKey or stateful stage across batches: its state RDD and watermarks."""

    def __init__(self, name: str, empty_state: Any) -> None:
        self.name = name
        self.state = empty_state
        self.input_watermark = MIN_TIMESTAMP
        self.output_watermark = MIN_TIMESTAMP
        self.hold = MAX_TIMESTAMP
        self.keys = 0  # keys (or state cells and timers) held
        self.state_bytes = 0  # encoded state held
        self.inputs = 0  # elements received in the last batch
        self.outputs = 0  # elements emitted in the last batch
        self.clock: Optional[float] = None
        self.next_processing_timer: Optional[float] = None
        self._result: Any = None

    def is_idle(self, input_empty: bool, input_watermark: Timestamp, clock: float) -> bool:
        """Nothing to do this batch: no input, and no state or nothing that can fire."""
        return input_empty and (self.keys == 0 or (
            input_watermark == self.input_watermark and clock == self.clock))

    def skip(self, input_watermark: Timestamp, clock: float) -> None:
        self.input_watermark = input_watermark
        self.output_watermark = min(input_watermark, self.hold)
        self.inputs = self.outputs = 0
        self.clock = clock

    def advance(self, result: Any, metas: List[Dict[str, Any]], input_watermark: Timestamp,
                holds: bool, clock: float) -> None:
        if self._result is not None:
            self._result.unpersist(blocking=False)
        self._result = result
        self.state = result.filter(_is_kind_state).map(_payload)
        self.input_watermark = input_watermark
        self.hold = min((Timestamp(micros=meta["hold"]) for meta in metas
                         if holds and meta["hold"] is not None), default=MAX_TIMESTAMP)
        self.output_watermark = min(input_watermark, self.hold)
        self.keys = sum(meta["keys"] for meta in metas)
        self.inputs = sum(meta["inputs"] for meta in metas)
        self.outputs = sum(meta["outputs"] for meta in metas)
        self.clock = clock
        pending = [meta["next_processing_timer"] for meta in metas
                   if meta["next_processing_timer"] is not None]
        self.next_processing_timer = min(pending) if pending else None

    def release(self) -> None:
        if self._result is not None:
            self._result.unpersist(blocking=False)

    def snapshot(self) -> Dict[str, Any]:
        """The step's watermarks, hold and clock as plain data (its state RDD is collected
        by :meth:`BatchStages.snapshot`), for a checkpoint."""
        return {"name": self.name, "input_watermark": self.input_watermark.micros,
                "output_watermark": self.output_watermark.micros, "hold": self.hold.micros,
                "keys": self.keys, "state_bytes": self.state_bytes,
                "clock": self.clock, "next_processing_timer": self.next_processing_timer}

    def restore(self, snapshot: Dict[str, Any], state: Any) -> None:
        """Resume from :meth:`snapshot`, with ``state`` the RDD of its state records."""
        self.state = state
        self.input_watermark = Timestamp(micros=snapshot["input_watermark"])
        self.output_watermark = Timestamp(micros=snapshot["output_watermark"])
        self.hold = Timestamp(micros=snapshot["hold"])
        self.keys = snapshot["keys"]
        self.state_bytes = snapshot["state_bytes"]
        self.clock = snapshot["clock"]
        self.next_processing_timer = snapshot["next_processing_timer"]


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
        sinks: List[Any] = []
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
                sinks.append(rdd)
        self._impulse_done = True
        if sinks:
            union = sinks[0] if len(sinks) == 1 else self.sc.union(sinks)
            union.foreachPartition(_drain)
        self._collect_side_inputs(list(self._side_pending))  # before their inputs are freed
        for rdd in self._batch_persisted:
            rdd.unpersist(blocking=False)
        self._batch_persisted = []
        for broadcast in self._broadcasts:
            broadcast.unpersist()
        self._broadcasts = []

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
        result = self._keyed_batch(step, keyed, is_empty, writers_watermark, clock, run,
                                   holds=True)
        if result is None or not step.outputs:
            return self.sc.emptyRDD(), True
        return result.filter(_is_kind_out).map(_payload), False

    def _step(self, key: Any, name: str) -> KeyedStep:
        if key not in self.steps:
            self.steps[key] = KeyedStep(name, self.sc.emptyRDD())
        return self.steps[key]

    def _keyed_batch(self, step: KeyedStep, keyed: Any, input_empty: bool,
                     upstream_watermark: Timestamp, clock: float, run: Any,
                     holds: bool) -> Optional[Any]:
        """Run a keyed step over the batch with its state; None when it had nothing to do."""
        new_input = max(step.input_watermark, upstream_watermark)
        if step.is_idle(input_empty, new_input, clock):
            step.skip(new_input, clock)
            return None
        times = BatchTimes(step.input_watermark.micros, step.output_watermark.micros,
                           new_input.micros, clock)
        records = self.sc.union([step.state, keyed]).partitionBy(
            self.parallelism, _partition_of)
        result = records.mapPartitionsWithIndex(functools.partial(run, times))
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        result.localCheckpoint()
        reports = result.filter(_is_not_kind_out).map(_report_of).collect()
        metas = [payload for kind, payload in reports if kind == "meta"]
        step.advance(result, metas, new_input, holds, clock)
        step.state_bytes = sum(payload for kind, payload in reports if kind == "state")
        return result

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
            result = self._keyed_batch(step, union, inputs_empty, input_watermark, clock, run,
                                       holds=False)
            if result is None or not step.outputs:
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


def _is_kind_state(record) -> bool:
    return record[0] == "state"


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


def _drain(records) -> None:
    for _ in records:
        pass
