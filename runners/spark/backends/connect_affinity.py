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

The cogroup calls the task once per key partition, with its key partition (the group key),
the pointer's row, and the partition's input rows (none when only timers are due). On a
local master there is one executor and nothing to place (``enabled`` is False), but keyed
steps still run through the cogroup: a Connect task's partition id is not its key
partition once the step's output is unioned with other outputs or coalesced.
"""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any, Dict, List

from pyspark.storagelevel import StorageLevel

from runners.spark.backends import connect_rows as rows
from runners.spark.backends.base import IndexedPartitionFunction, PartitionAffinity
from runners.spark.backends.connect_tasks import (
    PartitionTask,
    PlacedTask,
    PointerTask,
    RecordsWriter,
)

_LOGGER = logging.getLogger(__name__)

#: The pointer's column naming its run and place (what keeps pointers apart in Spark's cache).
_PLACE = "place"


class PointerAffinity(PartitionAffinity):
    """The pointers of one streaming run's keyed steps (see the module docstring).

    Args:
      backend: the session's :class:`~runners.spark.backends.connect.ConnectBackend` (which
        imports this module: named here, not imported), whose datasets :meth:`run` takes.
      partitions: key partitions of every keyed step.
      enabled: False on a local master (one executor: nothing to place, and
        :meth:`run_at_every_place` runs one task).
    """

    def __init__(self, backend: Any, partitions: int, enabled: bool) -> None:
        self.backend = backend
        self.partitions = partitions  # the streaming loop sets it when it resumes
        self.enabled = enabled
        self._pointers: Dict[str, Any] = {}
        self._run = uuid.uuid4().hex

    def run(self, place: str, dataset: Any, function: IndexedPartitionFunction) -> Any:
        # Also on one executor (nothing to place): the cogroup hands the task its key
        # partition, where a task's partition id would be another once the step's output is
        # unioned with other outputs or coalesced.
        partitions = self.partitions
        if dataset.partitions != partitions:
            if not dataset.known_empty:
                raise ValueError(f"a keyed step's input must be made by partition_by("
                                 f"{partitions}), not in {dataset.partitions} partitions")
            dataset = self.backend.keyed_empty(partitions)
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
        if not self.enabled or not self._pointers:
            return self.backend.collect(self.backend.source([0], 1).map_partitions_with_index(
                function))
        task = PointerTask(function, self.backend.binary)
        frames = [pointer.mapInArrow(task, self.backend.records_schema)
                  for pointer in self._pointers.values()]
        union = functools.reduce(lambda left, right: left.union(right), frames)
        return self.backend.collect(self.backend.records(union))

    def release(self) -> None:
        pointers, self._pointers = list(self._pointers.values()), {}
        for pointer in pointers:
            try:
                pointer.unpersist()
            except Exception as error:  # a session gone: its cache went with it
                _LOGGER.warning("could not free a keyed step's pointer: %s", error)
