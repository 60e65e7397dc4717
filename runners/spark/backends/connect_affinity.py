"""Where a keyed step's tasks run behind Spark Connect: on the executor that holds their store.

A key partition's store is a cache on the executor that last ran the partition's task
(:mod:`~runners.spark.state.store`); a task that lands elsewhere rebuilds it from
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

An executor that joins later holds no pointer block, so no keyed task would go there.
Connect has no SparkContext to ask for executors, and no way to ask for one executor per
partition. Between batches, at most once every few batches, and rarely enough that looks
take 2% of the time (:mod:`~runners.spark.backends.spreading`),
:meth:`PointerAffinity.spread` runs a small job whose tasks say which executor they ran on
(~0.5 s on the test cluster); when the set changed and a place's partitions (as its tasks
last reported them) are spread unevenly over it, the place's pointer is made anew and
placed at once, by jobs of their own while every executor is idle: Spark deals the blocks
round the executors, and of a few deals the place keeps the best (:meth:`PointerAffinity.
_deal`). The partitions that land on another executor than before rebuild their store
there once; those that land where they were keep it.

The cogroup calls the task once per key partition, with its key partition (the group key),
the pointer's row, and the partition's input rows (none when only timers are due). On a
local master there is one executor and nothing to place (``enabled`` is False): each map
task of a keyed step's input also writes a *marker* row (no record) for every key
partition, and a ``mapInArrow`` task takes its key partition from its rows
(:class:`~runners.spark.backends.connect_tasks.MarkedTask`), not from its partition id,
which is another once the step's output is unioned with other outputs. No pointer, no
cogroup (which sorts both sides and reads the cached pointer in every task): the streaming
latency workload (10,000 events a batch) on one warm Connect server on ``local[2]``, the two
ways run in turn, p50 248-301 ms a batch through the cogroup, 210-218 ms with markers
(durable: 226-253, 198-206).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Tuple

import pyarrow as pa
from pyspark.storagelevel import StorageLevel

from runners.spark.backends import connect_rows as rows
from runners.spark.backends.base import IndexedPartitionFunction, JobNames, PartitionAffinity
from runners.spark.backends.connect_tasks import PartitionTask, PlacedTask, PointerTask
from runners.spark.backends.spreading import (
    SPREAD_PROBE_SHARE,
    SpreadCheck,
    plan_moves,
    spread_note,
)
from runners.spark.executor_identity import executor_name

_LOGGER = logging.getLogger(__name__)

#: The pointer's column naming its run and place (what keeps pointers apart in Spark's cache).
_PLACE = "place"
#: Placements of new pointers tried, at most, when partitions spread onto joined executors.
POINTER_DEALS = 4


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
        self._made = 0  # pointers made so far (each names itself by its number)
        self._check = SpreadCheck()

    def run(self, place: str, dataset: Any, function: IndexedPartitionFunction) -> Any:
        partitions = self.partitions
        if dataset.partitions != partitions and not dataset.known_empty:
            raise ValueError(f"a keyed step's input must be made by partition_by("
                             f"{partitions}), not in {dataset.partitions} partitions")
        if not self.enabled:
            return self._marked(dataset, function)
        pointer = self._pointer(place)
        if dataset.partitions != partitions:
            dataset = self.backend.keyed_empty(partitions)
            # Due timers only. Spark's optimizer turns an empty relation into one with no
            # partitioning, and the cogroup would then shuffle both sides into
            # spark.sql.shuffle.partitions tasks, placed anywhere (measured on the cluster:
            # 200 tasks, and the partitions' stores rebuilt where they ran); none of the
            # pointer's rows keeps the cached pointer's partitioning: no shuffle at all.
            frame = pointer.where(f"{rows.PARTITION} < 0").selectExpr(
                rows.PARTITION, f"CAST(NULL AS BINARY) AS {rows.RECORD}")
        else:
            frame = dataset.partitioned_frame
        # The cogroup is made when the dataset's frame is: the steps that follow the step's
        # in the same Spark stage run in its task.
        return self.backend.placed(pointer, frame, dataset.reader,
                                   dataset.steps + ((True, function),))

    def _marked(self, dataset: Any, function: IndexedPartitionFunction) -> Any:
        """On one executor: the input shuffled with marker rows (see the module docstring)."""
        if dataset.partitions != self.partitions:  # due timers only: the markers alone
            dataset = self.backend.source([], 1).partition_by(self.partitions)
        return self.backend.marked(dataset.marked_frame(), dataset.reader,
                                   dataset.steps + ((True, function),))

    def _pointer(self, place: str) -> Any:
        pointer = self._pointers.get(place)
        if pointer is None:
            pointer = self._pointers[place] = self._new_pointer()
            if self.backend.facts.adaptive:
                # Adaptive execution plans a cached relation's partitioning as unknown until
                # the relation is computed: the step's first query would shuffle both sides
                # of the cogroup into spark.sql.shuffle.partitions tasks, placed anywhere
                # (measured). Computed now, the pointer is cached with its partitioning, and
                # the cogroup plans no exchange from the first batch on.
                pointer.count()
        return pointer

    def _new_pointer(self) -> Any:
        # Spark shares one cache among equal plans: each pointer names itself, or two steps
        # computing their pointers in one job would cache one partition on two executors and
        # keep one (measured: a store rebuilt in a steady batch).
        tag = f"{self._run}-{self._made}"
        self._made += 1
        return self.backend.session.range(0, self.partitions, 1, 1).selectExpr(
            f"CAST(id AS INT) AS {rows.PARTITION}", f"'{tag}' AS {_PLACE}").repartitionById(
            self.partitions, rows.PARTITION).persist(StorageLevel.MEMORY_ONLY)

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

    def spread(self, batch: int, holders: Mapping[str, Mapping[int, str]],
               names: Optional[JobNames] = None) -> None:
        """See the module docstring."""
        if not self.enabled or not self._pointers or not self._check.due(batch):
            return
        started = time.monotonic()
        with _named(names, "which executors run tasks (key partitions move onto those that "
                           "joined)"):
            executors = self._executors()
        # Looks take a small share of the time at most (~25 s apart on the test cluster).
        self._check.seconds = (time.monotonic() - started) / SPREAD_PROBE_SHARE
        if not self._check.wanted(executors):
            return
        notes, renewed = [], {}
        for place in list(self._pointers):
            held = {partition: executor for partition, executor in holders.get(place, {}).items()
                    if partition < self.partitions}  # reports of before a re-split aside
            moves = plan_moves(held, executors)
            if moves:
                renewed[place] = held
                notes.append(spread_note(place, moves, held))
        if not renewed:
            self._check.settle(executors)
            return
        self._check.tried()
        with _named(names, "key partitions placed anew (some onto executors that joined)"):
            landed = self._deal(renewed, executors)
        _LOGGER.info("streaming: executors %s: key partitions to move: %s; their steps' "
                     "pointers made anew (the partitions placed elsewhere than before rebuild "
                     "their store once): %s", sorted(executors), "; ".join(notes),
                     "; ".join(f"{place}: {where}" for place, where in landed.items()))

    def _deal(self, places: Mapping[str, Mapping[int, str]],
              executors: FrozenSet[str]) -> Dict[str, Dict[int, str]]:
        """New pointers for ``places`` (place -> where its partitions are), placed now, while
        every executor is idle and its Python workers warm (the probe's); returns where
        their partitions landed.

        Left to the next batch, a pointer not yet cached is planned with a shuffle on both
        sides of the cogroup (its partitioning is unknown before it is cached): its blocks
        land where that batch's other tasks leave a core free, its tasks elsewhere
        (measured: 1 of the 4 partitions to move did). Placed by a job of their own, Spark
        deals the blocks round the executors, not always evenly nor keeping the partitions
        that may stay (measured: 3 and 1, or 2 and 2 with a partition moved in vain). No
        store moves before the next batch, so up to :data:`POINTER_DEALS` deals are made
        and each place keeps its best: even, with the fewest partitions moved."""
        fewest = {place: len(plan_moves(held, executors)) for place, held in places.items()}
        best: Dict[str, Tuple[Tuple[int, int], Any, Dict[int, str]]] = {}
        pending = list(places)
        for _ in range(POINTER_DEALS):
            fresh = {place: self._new_pointer() for place in pending}
            for place, where in self._landings(fresh).items():
                held = places[place]
                score = (len(plan_moves(where, executors)),
                         sum(1 for partition, executor in where.items()
                             if held.get(partition) != executor))
                if place in best and best[place][0] <= score:
                    self._free([fresh[place]])
                    continue
                if place in best:
                    self._free([best[place][1]])
                best[place] = (score, fresh[place], where)
            pending = [place for place in pending if best[place][0] > (0, fewest[place])]
            if not pending:
                break
        for place, (_, pointer, _) in best.items():
            self._free([self._pointers.pop(place)])
            self._pointers[place] = pointer
        return {place: where for place, (_, _, where) in best.items()}

    def _landings(self, pointers: Mapping[str, Any]) -> Dict[str, Dict[int, str]]:
        """Compute and cache ``pointers`` (place -> pointer) in one job; returns where each
        partition landed (place -> partition -> executor)."""
        frames = [pointer.mapInArrow(
            PointerTask(functools.partial(_landed, place), self.backend.binary),
            self.backend.records_schema) for place, pointer in pointers.items()]
        union = functools.reduce(lambda left, right: left.union(right), frames)
        landed: Dict[str, Dict[int, str]] = {place: {} for place in pointers}
        for place, partition, executor in self.backend.collect(self.backend.records(union)):
            landed[place][partition] = executor
        return {place: dict(sorted(where.items())) for place, where in landed.items()}

    def _executors(self) -> FrozenSet[str]:
        """The executors that run tasks now: a job of more tasks than executors known, each
        saying where it ran (idle between batches, every executor takes some)."""
        tasks = 2 * len(self._check.seen or ()) + 4
        probe = self.backend.source(list(range(tasks)), tasks).map_partitions(_where)
        return frozenset(self.backend.collect(probe))

    def release(self) -> None:
        pointers, self._pointers = list(self._pointers.values()), {}
        self._free(pointers)

    @staticmethod
    def _free(pointers: Iterable[Any]) -> None:
        for pointer in pointers:
            try:
                pointer.unpersist()
            except Exception as error:  # a session gone: its cache went with it
                _LOGGER.warning("could not free a keyed step's pointer: %s", error)


def placed_frame(pointer: Any, frame: Any, task: PartitionTask, schema: Any,
                 arrow_schema: pa.Schema) -> Any:
    """``frame`` (rows by :data:`~runners.spark.backends.connect_rows.PARTITION`) cogrouped
    with ``pointer``: ``task`` once per key partition, where the pointer's partition is
    cached; its rows of ``schema`` (``arrow_schema`` as its writer makes them)."""
    placed = PlacedTask(task, arrow_schema).function()
    return pointer.groupBy(rows.PARTITION).cogroup(frame.groupBy(rows.PARTITION)).applyInArrow(
        placed, schema)


def _named(names: Optional[JobNames], what: str) -> Any:
    return contextlib.nullcontext() if names is None else names.job(what)


def _where(records: Iterable[Any]) -> Iterator[str]:
    for _ in records:
        yield executor_name()


def _landed(place: str, partition: int, records: Iterable[Any]) -> Iterator[Tuple[str, int, str]]:
    yield place, partition, executor_name()
