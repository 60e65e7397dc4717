"""Where a keyed step's tasks run on a cluster: on the executor that holds their store.

A key partition's store is a cache on the executor that last ran the partition's task
(:mod:`~runners.spark.streaming.state_store`); a task that lands elsewhere rebuilds it from
the checkpoint location, which costs a reload (never a failure). Spark gives plain RDD
partitions no affinity, and PySpark has no API for preferred locations, so each keyed step
gets an *anchor*: a persisted RDD with one tiny element per key partition. The step's task
for partition ``i`` zips the anchor's partition ``i`` with its input, so Spark schedules it
where that block is cached (process-local, as Spark's StateStoreRDD asks its
StateStoreCoordinator for the executor that last loaded a store): the executor that ran the
partition's first task keeps it from batch to batch. When that executor goes away its
blocks go with it; the next task runs anywhere, rebuilds the store there and caches the
anchor's partition there, which becomes the partition's new home.

On a local master there is one executor: nothing is zipped (:attr:`StatePlacement.enabled`
is False) and tasks run as they are.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Iterable, Iterator, List

from pyspark import StorageLevel
from pyspark.serializers import BatchedSerializer, CPickleSerializer

from runners.spark.options import is_local_master
from runners.spark.streaming.keyed_batch import remove_run_partition


class StatePlacement:
    """The anchors of one streaming run's keyed steps (see the module docstring).

    Args:
      spark_context: the run's SparkContext.
      parallelism: key partitions of every keyed step.
    """

    def __init__(self, spark_context: Any, parallelism: int) -> None:
        self.spark_context = spark_context
        self.parallelism = parallelism
        self.enabled = not is_local_master(spark_context.master)
        self._anchors: Dict[str, Any] = {}

    def run(self, step: str, keyed: Any, task: Callable[[int, Iterable[Any]], Iterator[Any]]) -> Any:
        """``keyed.mapPartitionsWithIndex(task)``, each partition's task placed where the
        step's store of that partition lives."""
        if not self.enabled:
            return keyed.mapPartitionsWithIndex(task)
        # One element per partition on both sides, in batches of one, as RDD.zip needs.
        packed = keyed.mapPartitions(_as_one_list, preservesPartitioning=True)._reserialize(
            BatchedSerializer(CPickleSerializer(), 1))
        return self._anchor(step).zip(packed).mapPartitionsWithIndex(
            functools.partial(_unzipped, task))

    def _anchor(self, step: str) -> Any:
        anchor = self._anchors.get(step)
        if anchor is None:
            anchor = self.spark_context.parallelize(range(self.parallelism), self.parallelism)
            anchor.persist(StorageLevel.MEMORY_ONLY)
            self._anchors[step] = anchor
        return anchor

    def remove_state(self, run: str) -> int:
        """Remove ``run``'s stores from the executors (a Spark job: on a cluster one task per
        anchored partition, each where the partition's store lives; on a local master one
        task). Returns how many run directories were removed."""
        parts: List[Any] = [anchor.mapPartitionsWithIndex(
            functools.partial(remove_run_partition, run)) for anchor in self._anchors.values()]
        if not parts:
            parts = [self.spark_context.parallelize([0], 1).mapPartitionsWithIndex(
                functools.partial(remove_run_partition, run))]
        union = parts[0] if len(parts) == 1 else self.spark_context.union(parts)
        return sum(union.collect())

    def release(self) -> None:
        for anchor in self._anchors.values():
            anchor.unpersist(blocking=False)
        self._anchors = {}


def _as_one_list(records: Iterable[Any]) -> Iterator[List[Any]]:
    yield list(records)


def _unzipped(task: Callable[[int, Iterable[Any]], Iterator[Any]], partition: int,
              pairs: Iterable[Any]) -> Iterator[Any]:
    return task(partition, (record for _, records in pairs for record in records))
