"""Where a keyed step's tasks run behind Spark Connect: on the executor that holds their store.

A key partition's store is a cache on the executor that last ran the partition's task
(:mod:`~runners.spark.streaming.state_store`); a task that lands elsewhere rebuilds it from
the checkpoint location. Classic Spark keeps a partition on its executor by zipping the
task's input with a persisted *anchor* RDD (:mod:`~runners.spark.backends.classic_affinity`);
Connect has no RDD and no ``zip``, but a persisted DataFrame keeps both things the anchor
relies on:

* its cached partitions stay on the executors that computed them, and Spark schedules a task
  that reads a cached partition there (block locality);
* a cached relation keeps the output partitioning of its plan, so a *pointer* DataFrame
  (one row per key partition, ``repartitionById`` into the step's partitions, persisted),
  cogrouped with the batch's input repartitioned the same way, is planned with no exchange
  on the pointer's side: Spark zips the pointer's cached partition ``i`` with the input's
  partition ``i`` in one task.

Measured on a Connect server driving the 2-worker cluster of ``tests/cluster_fixtures.py``
(8 key partitions, 6 batches of 20,000 rows): every key partition's task ran on the executor
caching its pointer block, in every batch, the blocks spread 4 and 4 in an irregular order
(0, 1, 0, 1, 0, 1, 1, 0) that the tasks followed exactly. When an executor goes away its
blocks go with it: the next task runs anywhere, rebuilds the store there and caches the
pointer's partition there, which becomes the partition's new home.

The cogroup calls the task once per key partition: with the pointer's row, and the
partition's input rows (none when only timers are due). On a local master there is one
executor: nothing is placed (``enabled`` is False) and tasks run as they are.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Tuple

import pyarrow as pa
from pyspark.storagelevel import StorageLevel

from runners.spark.backends import connect_rows as rows
from runners.spark.backends.base import Dataset, IndexedPartitionFunction, PartitionAffinity
from runners.spark.backends.connect_tasks import PartitionTask, RecordsWriter

#: The pointer's column naming its run and place (what keeps pointers apart in Spark's cache).
_PLACE = "place"


class PointerAffinity(PartitionAffinity):
    """The pointers of one streaming run's keyed steps (see the module docstring).

    Args:
      backend: the session's :class:`~runners.spark.backends.connect.ConnectBackend`.
      partitions: key partitions of every keyed step.
      enabled: False on a local master (one executor: nothing to place).
    """

    def __init__(self, backend: Any, partitions: int, enabled: bool) -> None:
        self.backend = backend
        self.partitions = partitions  # the streaming loop sets it when it resumes
        self.enabled = enabled
        self._pointers: Dict[str, Any] = {}
        self._run = uuid.uuid4().hex

    def run(self, place: str, dataset: Dataset, function: IndexedPartitionFunction) -> Dataset:
        if not self.enabled:
            return dataset.map_partitions_with_index(function)
        partitions = self.partitions
        if getattr(dataset, "partitions", None) != partitions:
            # Only a dataset made in the key partitions' layout gets here otherwise (a keyed
            # step's input with nothing in it): its task index is the key partition.
            dataset = dataset.map_partitions_with_index(_in_partition).partition_by(partitions)
        task = PlacedTask(PartitionTask(dataset.reader, dataset.steps + ((True, function),),
                                        RecordsWriter(self.backend.binary),
                                        self.backend.working_directory()),
                          self.backend.binary).function()
        placed = self._pointer(place).groupBy(rows.PARTITION).cogroup(
            dataset.partitioned_frame.groupBy(rows.PARTITION)).applyInArrow(
            task, self.backend.records_schema)
        return self.backend.records(placed)

    def _pointer(self, place: str) -> Any:
        pointer = self._pointers.get(place)
        if pointer is None:
            # Spark shares one cache among equal plans: each place's pointer names itself, or
            # two steps computing their pointers in one job would cache one partition on two
            # executors and keep one (measured: a store rebuilt in a steady batch).
            tag = f"{self._run}-{len(self._pointers)}"
            pointer = self.backend.session.range(0, self.partitions, 1, 1).selectExpr(
                f"CAST(id AS INT) AS {rows.PARTITION}", f"'{tag}' AS {_PLACE}").repartitionById(
                self.partitions, rows.PARTITION).persist(StorageLevel.MEMORY_ONLY)
            self._pointers[place] = pointer
        return pointer

    def run_at_every_place(self, function: IndexedPartitionFunction) -> List[Any]:
        """On a cluster one task per pointed partition, each where the partition's store
        lives (a narrow read of the cached pointer); on a local master one task."""
        if not self._pointers:
            return self.backend.collect(self.backend.source([0], 1).map_partitions_with_index(
                function))
        task = PointerTask(function, self.backend.binary)
        frames = [pointer.mapInArrow(task, self.backend.records_schema)
                  for pointer in self._pointers.values()]
        union = functools.reduce(lambda left, right: left.union(right), frames)
        return self.backend.collect(self.backend.records(union))

    def release(self) -> None:
        for pointer in self._pointers.values():
            pointer.unpersist()
        self._pointers = {}


def _in_partition(partition: int, records: Iterable[Any]) -> Iterator[Any]:
    return ((partition, record) for record in records)


class PlacedTask:
    """What the cogroup runs for one key partition: the partition's input through the
    dataset's functions and the step's, in the driver's working directory where the workers
    see it (as :class:`~runners.spark.backends.connect_tasks.PartitionTask`)."""

    def __init__(self, task: PartitionTask, binary: pa.DataType) -> None:
        self.task = task
        self.schema = pa.schema([pa.field(rows.RECORD, binary)])  # as the writer makes it

    def run(self, key: Tuple[Any, ...], pointer: pa.Table, records: pa.Table) -> pa.Table:
        """The key partition ``key[0]`` (an Arrow scalar): its pointer row (ignored) and its
        input rows."""
        batches = list(self.task.run_at(key[0].as_py(), records.to_batches()))
        return pa.Table.from_batches(batches, schema=self.schema)

    def function(self) -> Callable[[Tuple[Any, ...], pa.Table, pa.Table], pa.Table]:
        """What ``applyInArrow`` takes: Spark counts its arguments (``self`` too, in a
        bound method or a callable object) to choose whether to pass the group key."""
        return functools.partial(_placed, self)


def _placed(task: PlacedTask, key: Tuple[Any, ...], pointer: pa.Table,
            records: pa.Table) -> pa.Table:
    return task.run(key, pointer, records)


class PointerTask:
    """``function(partition, no records)`` once per key partition of a pointer's partition."""

    def __init__(self, function: IndexedPartitionFunction, binary: pa.DataType) -> None:
        self.function = function
        self.binary = binary

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        results: List[Any] = []
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                results.extend(self.function(partition, iter(())))
        return rows.write_records(results, self.binary)
