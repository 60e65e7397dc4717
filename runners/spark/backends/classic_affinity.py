"""Where a keyed step's tasks run on a classic cluster: on the executor that holds their store.

A key partition's store is a cache on the executor that last ran the partition's task
(:mod:`~runners.spark.streaming.state_store`); a task that lands elsewhere rebuilds it from
the checkpoint location, which costs a reload (never a failure). Spark gives plain RDD
partitions no affinity, and PySpark has no API for preferred locations, so each keyed step
(a *place*) gets an *anchor*: a persisted RDD with one tiny element per key partition. The
step's task for partition ``i`` zips the anchor's partition ``i`` with its input, so Spark
schedules it where that block is cached (process-local, as Spark's StateStoreRDD asks its
StateStoreCoordinator for the executor that last loaded a store): the executor that ran the
partition's first task keeps it from batch to batch. When that executor goes away its
blocks go with it; the next task runs anywhere, rebuilds the store there and caches the
anchor's partition there, which becomes the partition's new home.

On a local master there is one executor: nothing is zipped (``enabled`` is False) and tasks
run as they are.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Iterable, Iterator, List

from pyspark import StorageLevel
from pyspark.serializers import BatchedSerializer, CPickleSerializer

from runners.spark.backends.base import Dataset, IndexedPartitionFunction, PartitionAffinity
from runners.spark.backends.classic_dataset import ClassicDataset


class AnchoredAffinity(PartitionAffinity):
    """The anchors of one streaming run's keyed steps (see the module docstring).

    Args:
      spark_context: the run's SparkContext.
      partitions: key partitions of every keyed step.
      enabled: False on a local master (one executor: nothing to place).
    """

    def __init__(self, spark_context: Any, partitions: int, enabled: bool) -> None:
        self.spark_context = spark_context
        self.partitions = partitions  # the streaming loop sets it when it resumes
        self.enabled = enabled
        self._anchors: Dict[str, Any] = {}

    def run(self, place: str, dataset: Dataset, function: IndexedPartitionFunction) -> Dataset:
        if not self.enabled:
            return dataset.map_partitions_with_index(function)
        # One element per partition on both sides, in batches of one, as RDD.zip needs.
        packed = dataset.rdd.mapPartitions(_as_one_list, preservesPartitioning=True)._reserialize(
            BatchedSerializer(CPickleSerializer(), 1))
        return ClassicDataset(self._anchor(place).zip(packed).mapPartitionsWithIndex(
            functools.partial(_unzipped, function)))

    def _anchor(self, place: str) -> Any:
        anchor = self._anchors.get(place)
        if anchor is None:
            anchor = self.spark_context.parallelize(range(self.partitions), self.partitions)
            anchor.persist(StorageLevel.MEMORY_ONLY)
            self._anchors[place] = anchor
        return anchor

    def run_at_every_place(self, function: IndexedPartitionFunction) -> List[Any]:
        """On a cluster one task per anchored partition, each where the partition's store
        lives; on a local master one task."""
        parts: List[Any] = [anchor.mapPartitionsWithIndex(function)
                            for anchor in self._anchors.values()]
        if not parts:
            parts = [self.spark_context.parallelize([0], 1).mapPartitionsWithIndex(function)]
        union = parts[0] if len(parts) == 1 else self.spark_context.union(parts)
        return union.collect()

    def release(self) -> None:
        for anchor in self._anchors.values():
            anchor.unpersist(blocking=False)
        self._anchors = {}


def _as_one_list(records: Iterable[Any]) -> Iterator[List[Any]]:
    yield list(records)


def _unzipped(function: IndexedPartitionFunction, partition: int,
              pairs: Iterable[Any]) -> Iterable[Any]:
    return function(partition, (record for _, records in pairs for record in records))
