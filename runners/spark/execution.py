"""Executing an execution plan on Spark (driver side).

Each stage becomes an RDD: its inputs are the RDDs of the buffers it reads (a union when
several stages write one buffer, as a Flatten does; a one-element RDD for the impulse; a
GroupByKey's grouped output for a ``group:`` buffer), partitioned by key first when the
stage is stateful, and the stage runs over them with ``mapPartitions``
(:func:`runners.spark.bundles.process_partition`). A stage's RDD is persisted when more
than one reader uses what it wrote, so its side effects and metrics happen once.

Spark evaluates lazily: jobs run only to collect side inputs (the driver materializes them
before building the consuming stage) and, at the end, to evaluate the stages nobody reads
(sinks, ``assert_that``), all in one job.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Dict, List, Optional

from pyspark import StorageLevel

from runners.spark import side_inputs as side_input_tables
from runners.spark import shuffle
from runners.spark.beam_internals import ENCODED_IMPULSE_VALUE, IMPULSE_BUFFER
from runners.spark.bundles import StageTask, process_partition
from runners.spark.components import SharedComponents
from runners.spark.planning import RESHUFFLE_STAGE, ExecutionPlan, StageSpec


#: Stage descriptors larger than this are broadcast instead of shipped with every task
#: (they carry the stage's pickled DoFns, which can hold large objects).
BROADCAST_DESCRIPTOR_BYTES = 256 << 10


class RunCancelled(RuntimeError):
    """The run was cancelled before it could start its next Spark job."""


class PlanExecution:
    """One run of an :class:`ExecutionPlan` on a SparkContext.

    Args:
      spark_context: the SparkContext to run on.
      plan: the fused stages.
      metrics: accumulator receiving each task's serialized MonitoringInfos.
      parallelism: partitions of every shuffle.
      bundle_size: at most this many elements per bundle, or None (a partition per bundle).
    """

    def __init__(self, spark_context: Any, plan: ExecutionPlan, metrics: Any, parallelism: int,
                 bundle_size: Optional[int]) -> None:
        self.spark_context = spark_context
        self.plan = plan
        self.metrics = metrics
        self.parallelism = parallelism
        self.bundle_size = bundle_size
        self._writers: Dict[bytes, List[Any]] = {}  # buffer id -> RDDs written to it
        self._buffers: Dict[bytes, Any] = {}  # buffer id -> the RDD its readers read
        self._broadcasts: List[Any] = []  # side input tables, large descriptors
        self._persisted: List[Any] = []
        self._side_input_chunks: Dict[bytes, List[bytes]] = {}  # buffer id -> collected chunks
        self.components: Optional[SharedComponents] = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Start no further Spark job (running ones are cancelled through their job group)."""
        self._cancelled.set()

    def _before_job(self) -> None:
        if self._cancelled.is_set():
            raise RunCancelled("the pipeline was cancelled")

    def run(self) -> None:
        """Build every stage's RDD and run the jobs; raises what a task raised."""
        self.components = SharedComponents.create(self.spark_context, self.plan.components)
        stage_rdds = [self._stage_rdd(stage) for stage in self.plan.stages]
        sinks = [rdd for rdd, stage in zip(stage_rdds, self.plan.stages)
                 if not self._is_read(stage)]
        if sinks:
            union = sinks[0] if len(sinks) == 1 else self.spark_context.union(sinks)
            self._before_job()
            union.foreachPartition(_drain)

    def release(self) -> None:
        """Free cached RDDs and broadcasts (call when the run has ended, either way)."""
        for rdd in self._persisted:
            rdd.unpersist(blocking=False)
        for broadcast in self._broadcasts:
            broadcast.unpersist()
        if self.components is not None:
            self.components.release()
        self._persisted, self._broadcasts = [], []
        self._side_input_chunks = {}

    def _is_read(self, stage: StageSpec) -> bool:
        return any(self.plan.readers.get(buffer_id, 0) for _, buffer_id in stage.outputs)

    def _stage_rdd(self, stage: StageSpec) -> Any:
        sources = [(index, spec, self._buffer(spec.buffer_id))
                   for index, spec in enumerate(stage.inputs)]
        if stage.kind == RESHUFFLE_STAGE:
            (_, spec, source), = sources
            rdd = shuffle.reshuffle(source, spec.coder_id, stage.output_coder_id or spec.coder_id,
                                    self.components, self.parallelism)
            return self._register_outputs(stage, rdd.map(functools.partial(_tag, 0)))
        if stage.keyed:
            records = shuffle.partition_by_key(sources, self.components, self.parallelism,
                                               self.spark_context)
        else:
            tagged = [rdd.map(functools.partial(_tag, index)) for index, _, rdd in sources]
            records = tagged[0] if len(tagged) == 1 else self.spark_context.union(tagged)
        descriptor = None
        if len(stage.descriptor) > BROADCAST_DESCRIPTOR_BYTES:
            descriptor = self.spark_context.broadcast(stage.descriptor)
            self._broadcasts.append(descriptor)
        task = StageTask(stage, self.components, self._side_input_table(stage), self.metrics,
                         self.bundle_size, descriptor)
        rdd = records.mapPartitions(functools.partial(process_partition, task))
        return self._register_outputs(stage, rdd)

    def _register_outputs(self, stage: StageSpec, rdd: Any) -> Any:
        readers = sum(self.plan.readers.get(buffer_id, 0) for _, buffer_id in stage.outputs)
        if readers > 1:
            rdd = rdd.persist(StorageLevel.MEMORY_AND_DISK)
            self._persisted.append(rdd)
        for index, (_, buffer_id) in enumerate(stage.outputs):
            chunks = rdd.values() if len(stage.outputs) == 1 else (
                rdd.filter(functools.partial(_has_tag, index)).values())
            self._writers.setdefault(buffer_id, []).append(chunks)
        return rdd

    def _buffer(self, buffer_id: bytes) -> Any:
        """The RDD of encoded element chunks a reader of ``buffer_id`` sees."""
        if buffer_id in self._buffers:
            return self._buffers[buffer_id]
        if buffer_id == IMPULSE_BUFFER:
            rdd = self.spark_context.parallelize([ENCODED_IMPULSE_VALUE], 1)
        else:
            writers = self._writers.get(buffer_id, [])
            if not writers:
                rdd = self.spark_context.emptyRDD()
            else:
                rdd = writers[0] if len(writers) == 1 else self.spark_context.union(writers)
            group = self.plan.groups.get(buffer_id)
            if group is not None:
                rdd = shuffle.group_by_key(rdd, group, self.components, self.parallelism)
            if self.plan.readers.get(buffer_id, 0) > 1 and len(writers) > 1:
                # Several readers of a union: cache it once rather than union it per reader.
                rdd = rdd.persist(StorageLevel.MEMORY_AND_DISK)
                self._persisted.append(rdd)
        self._buffers[buffer_id] = rdd
        return rdd

    def _side_input_table(self, stage: StageSpec) -> Any:
        if not stage.side_inputs:
            return None
        self._collect_side_inputs([spec.buffer_id for spec in stage.side_inputs])
        table: Dict[bytes, List[bytes]] = {}
        for spec in stage.side_inputs:
            chunks = self._side_input_chunks[spec.buffer_id]
            coder = self.components.coder(spec.coder_id)
            for state_key, values in side_input_tables.materialize(spec, chunks, coder).items():
                table.setdefault(state_key, []).extend(values)
        broadcast = self.spark_context.broadcast(table)
        self._broadcasts.append(broadcast)
        return broadcast

    def _collect_side_inputs(self, buffer_ids: List[bytes]) -> None:
        """Collect the side-input buffers not collected yet, all in one Spark job (each job
        costs ~0.1 s, and WriteToText alone reads the same buffers 2-3 times)."""
        missing = sorted(set(buffer_ids) - set(self._side_input_chunks))
        if not missing:
            return
        self._before_job()
        if len(missing) == 1:
            self._side_input_chunks[missing[0]] = self._buffer(missing[0]).collect()
            return
        tagged = [self._buffer(buffer_id).map(functools.partial(_tag, index))
                  for index, buffer_id in enumerate(missing)]
        collected: Dict[bytes, List[bytes]] = {buffer_id: [] for buffer_id in missing}
        for index, chunk in self.spark_context.union(tagged).collect():
            collected[missing[index]].append(chunk)
        self._side_input_chunks.update(collected)


def _tag(index: int, chunk: bytes):
    return index, chunk


def _has_tag(index: int, record) -> bool:
    return record[0] == index


def _drain(records) -> None:
    for _ in records:
        pass

