"""Where a keyed step's tasks run on a classic cluster: on the executor that holds their store.

A key partition's store is a cache on the executor that last ran the partition's task
(:mod:`~runners.spark.state.store`); a task that lands elsewhere rebuilds it from
the checkpoint location, which costs a reload (never a failure). Spark gives plain RDD
partitions no affinity, and PySpark has no API for preferred locations, so each keyed step
(a *place*) gets an *anchor*: a persisted RDD with one tiny element per key partition. The
step's task for partition ``i`` zips the anchor's partition ``i`` with its input, so Spark
schedules it where that block is cached (process-local, as Spark's StateStoreRDD asks its
StateStoreCoordinator for the executor that last loaded a store): the executor that ran the
partition's first task keeps it from batch to batch. When that executor goes away its
blocks go with it; the next task runs anywhere, rebuilds the store there and caches the
anchor's partition there, which becomes the partition's new home.

An executor that joins later (dynamic allocation, a worker added) holds no anchor block, so
no keyed task would ever go there. Between batches, at most once every few batches
(:mod:`~runners.spark.backends.spreading`), :meth:`AnchoredAffinity.spread` asks the
driver's JVM for the executors; when the set changed, it reads where each anchor partition
is cached (the DAG scheduler's own preferred locations) and, where the spread is uneven,
replaces the place's anchor by one whose partitions *prefer* an executor each
(``SparkContext.makeRDD`` with an ``executor_<host>_<id>`` location per partition, Spark's
ExecutorCacheTaskLocation): the partitions chosen to move prefer a new executor, the others
the one they are on, so only the moved ones rebuild their store. The anchor is a Python RDD
over that JVM RDD: the zipped task takes the anchor's cached block first, and falls back on
the preference only while nothing is cached (a new anchor, or its executor lost).
Measured on the 2-worker cluster of ``tests/cluster_fixtures.py``: every partition ran
exactly where its preference named; a worker joining a job of 2 steps x 4 partitions on the
other, the 2 partitions of each step chosen moved, 4 stores rebuilt once each, and stayed.

On a local master there is one executor: nothing is zipped (``enabled`` is False) and tasks
run as they are.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from pyspark import RDD, StorageLevel
from pyspark.serializers import BatchedSerializer, CPickleSerializer

from runners.spark.backends.base import (
    Dataset,
    IndexedPartitionFunction,
    JobNames,
    PartitionAffinity,
)
from runners.spark.backends.classic_dataset import ClassicDataset
from runners.spark.backends.spreading import SpreadCheck, plan_moves, spread_note

_LOGGER = logging.getLogger(__name__)

#: How Spark names one executor as a task's preferred location (ExecutorCacheTaskLocation).
_EXECUTOR_LOCATION = "executor_"


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
        self._check = SpreadCheck()

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

    def spread(self, batch: int, holders: Mapping[str, Mapping[int, str]],
               names: Optional[JobNames] = None) -> None:
        """See the module docstring. No job runs, and ``holders`` (the tasks' reports) is not
        needed: the driver's JVM knows where each anchor block is cached, by the executor ids
        Spark places tasks by."""
        if not self.enabled or not self._anchors or not self._check.due(batch):
            return
        driver = self.spark_context._jsc.sc()
        executors = frozenset(_strings(driver.getExecutorIds()))
        if not self._check.wanted(executors):
            return
        locations = _executor_locations(driver)
        if set(locations) != executors:
            return  # the status store has not heard of every executor yet: look again
        notes = []
        for place, anchor in list(self._anchors.items()):
            cached = self._anchor_locations(anchor, locations)
            moves = plan_moves(cached, locations.values())
            if moves:
                self._anchors[place] = self._placed_anchor({**cached, **moves})
                anchor.unpersist(blocking=False)
                notes.append(spread_note(place, {partition: _shown(location)
                                                 for partition, location in moves.items()},
                                         {partition: _shown(location)
                                          for partition, location in cached.items()}))
        if notes:
            _LOGGER.info("streaming: executors %s: key partitions move (each rebuilds its store "
                         "once, on its new executor): %s", sorted(executors), "; ".join(notes))
            self._check.tried()
        else:
            self._check.settle(executors)

    def _anchor_locations(self, anchor: Any, live: Mapping[str, str]) -> Dict[int, str]:
        """Partition -> the live executor (of ``live``: id -> location) its next task
        prefers: where the anchor's block is cached, else what the anchor asks for (the DAG
        scheduler's order)."""
        driver, rdd = self.spark_context._jsc.sc(), anchor._jrdd.rdd()
        found = {}
        for partition in range(self.partitions):
            preferred = [live[location.rpartition("_")[2]]
                         for location in _strings(driver.getPreferredLocs(rdd, partition))
                         if location.startswith(_EXECUTOR_LOCATION)
                         and location.rpartition("_")[2] in live]
            if preferred:
                found[partition] = preferred[0]
        return found

    def _placed_anchor(self, locations: Mapping[int, str]) -> Any:
        """An anchor whose partition ``i`` is computed first on ``locations[i]`` (anywhere
        when missing), then cached there."""
        context = self.spark_context
        jvm = context._jvm
        serializer = CPickleSerializer()
        pairs = [jvm.scala.Tuple2(bytearray(serializer.dumps(partition)),
                                  _scala_seq(jvm, [locations[partition]]
                                             if partition in locations else []))
                 for partition in range(self.partitions)]
        byte_arrays = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
        placed = context._jsc.sc().makeRDD(_scala_seq(jvm, pairs), byte_arrays)
        # A Python RDD over it: the one cached, with no preference of its own, so a zipped
        # task asks the DAG scheduler for its cached block before the JVM RDD's preference.
        anchor = RDD(placed.toJavaRDD(), context, serializer)._reserialize(
            BatchedSerializer(CPickleSerializer(), 1))
        anchor.persist(StorageLevel.MEMORY_ONLY)
        return anchor

    def release(self) -> None:
        for anchor in self._anchors.values():
            anchor.unpersist(blocking=False)
        self._anchors = {}


def _as_one_list(records: Iterable[Any]) -> Iterator[List[Any]]:
    yield list(records)


def _unzipped(function: IndexedPartitionFunction, partition: int,
              pairs: Iterable[Any]) -> Iterable[Any]:
    return function(partition, (record for _, records in pairs for record in records))


def _executor_locations(driver: Any) -> Dict[str, str]:
    """Executor id -> its preferred-location string, for the live executors (the driver's
    status store: what Spark's UI lists)."""
    summaries = driver.statusStore().executorList(True)
    found = {}
    for index in range(summaries.size()):
        summary = summaries.apply(index)
        executor = summary.id()
        if executor != "driver":
            host = summary.hostPort().rsplit(":", 1)[0]
            found[executor] = f"{_EXECUTOR_LOCATION}{host}_{executor}"
    return found


def _shown(location: str) -> str:
    """``executor_<host>_<id>`` as ``<id>@<host>`` (as tasks name their executor).

    >>> _shown("executor_10.0.0.7_12")
    '12@10.0.0.7'
    """
    host, _, executor = location[len(_EXECUTOR_LOCATION):].rpartition("_")
    return f"{executor}@{host}"


def _strings(scala_seq: Any) -> List[str]:
    """A Scala sequence's elements as strings, in one call to the JVM."""
    text = scala_seq.mkString("\n")
    return text.split("\n") if text else []


def _scala_seq(jvm: Any, items: Sequence[Any]) -> Any:
    java_list = jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()
