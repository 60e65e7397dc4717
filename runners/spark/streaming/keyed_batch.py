"""What a keyed step's tasks need for one micro-batch, and what they report back.

A keyed step (a GroupByKey, or a stateful stage) runs once per micro-batch as one Spark task
per key partition. Each task gets a :class:`KeyedBatch`: the step's times in this batch
(watermarks before and after, the loop's clock), the store versions before and after, and
where the partition's store lives (on the executor, under the run's state directory) and
its durable state (the chain of state files in the checkpoint location). It answers with a
:class:`~runners.spark.worker.records.StepReport`.

>>> times = BatchTimes(input_before=0, output_before=0, input_after=10_000_000,
...                    processing_time=3.5)
>>> times.timestamp("input_after")
Timestamp(10)
"""

from __future__ import annotations

import dataclasses
from typing import Any, FrozenSet, Iterator, Optional, Tuple

from apache_beam.utils.timestamp import Timestamp

from runners.spark.executor_identity import executor_name
from runners.spark.state.changelog import DurableState, StateFile
from runners.spark.state.storage.faults import take_retries
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.store import (
    PartitionState,
    StoreLocation,
    VersionPlan,
    executor_root,
    partition_directory_name,
    remove_run,
)
from runners.spark.worker.records import StepReport

#: Rounds of due timers one key may fire in one batch before the runner calls it a loop.
MAX_TIMER_ROUNDS = 10000


@dataclasses.dataclass(frozen=True)
class BatchTimes:
    """The times one keyed step sees in one micro-batch (Beam micros; the clock in seconds)."""

    input_before: int  # input watermark before the batch (elements are processed at it)
    output_before: int  # output watermark before the batch
    input_after: int  # input watermark after the batch's advance (timers fire up to it)
    processing_time: float  # the loop's clock, seconds

    def timestamp(self, name: str) -> Timestamp:
        return Timestamp(micros=getattr(self, name))


class BatchClock:
    """The trigger driver's processing-time clock: the batch's time, fixed for the batch."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds

    def time(self) -> float:
        return self._seconds


@dataclasses.dataclass(frozen=True)
class StepDurability:
    """A keyed step's durable state: the checkpoint location, the step's directory there,
    each key partition's chain of state files, and the partitions due a snapshot (and long
    overdue one)."""

    storage: DurableStorage
    directory: str
    chains: Tuple[Tuple[StateFile, ...], ...]
    snapshots: FrozenSet[int] = frozenset()
    overdue: FrozenSet[int] = frozenset()

    def partition(self, partition: int) -> DurableState:
        return DurableState(self.storage,
                            self.storage.join(self.directory, partition_directory_name(partition)),
                            self.chains[partition], partition in self.snapshots,
                            partition in self.overdue)


@dataclasses.dataclass(frozen=True)
class KeyedBatch:
    """One keyed step in one micro-batch, as its tasks see it.

    Args:
      step: the step's name (its transform's).
      run: the run's id: its stores live in ``<executor local dir>/beam-state-<run>``.
      times: watermarks and clock.
      previous: the version every partition's store is at before the batch.
      target: the version the batch leaves them at.
      durability: the step's durable state (None: no checkpoint location).
      commits: each partition's accepted commit id of ``previous`` (empty: not known).
    """

    step: str
    run: str
    times: BatchTimes
    previous: int
    target: int
    durability: Optional[StepDurability] = None
    commits: Tuple[bytes, ...] = ()

    def location(self, partition: int) -> StoreLocation:
        return StoreLocation(executor_root(self.run, self.step, partition), self.step, partition)

    def open_state(self, partition: int) -> PartitionState:
        """The partition's store at ``previous``, for the task to bring to ``target``."""
        durable = (None if self.durability is None
                   else self.durability.partition(partition))
        commit = self.commits[partition] if partition < len(self.commits) else b""
        return PartitionState.open(self.location(partition),
                                   VersionPlan(self.previous, self.target, durable, commit))

    def report(self, partition: int, store: PartitionState, inputs: int,
               outputs: int) -> StepReport:
        summary = store.summary
        return StepReport(self.step, partition, self.target, summary.keys,
                          summary.state_bytes, inputs, outputs, store.touched, summary.hold,
                          summary.next_event_wake, summary.next_processing_wake,
                          store.loaded, store.written, store.commit, take_retries(),
                          store.snapshot, executor_name())


def remove_run_partition(run: str, partition: int, records: Any) -> Iterator[int]:
    """A clean-up task: remove ``run``'s stores from the executor it runs on."""
    for _ in records:
        pass
    yield remove_run(run)
