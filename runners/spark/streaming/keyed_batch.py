"""What a keyed step's tasks need for one micro-batch, and what they report back.

A keyed step (a GroupByKey, or a stateful stage) runs once per micro-batch as one Spark task
per key partition. Each task gets a :class:`KeyedBatch`: the step's times in this batch
(watermarks before and after, the loop's clock) and what to do with its partition's store
(versions, checkpoint). It answers with a :class:`~runners.spark.records.StepReport`.

>>> times = BatchTimes(input_before=0, output_before=0, input_after=10_000_000,
...                    processing_time=3.5)
>>> times.timestamp("input_after")
Timestamp(10)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

from apache_beam.utils.timestamp import Timestamp

from runners.spark.records import StepReport
from runners.spark.streaming.state_store import (
    PartitionState,
    StoreLocation,
    Summary,
    VersionPlan,
)

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
class KeyedBatch:
    """One keyed step in one micro-batch, as its tasks see it.

    Args:
      step: the step's name (its transform's).
      root: the run's state directory on executors.
      times: watermarks and clock.
      versions: the store versions before and after, and the checkpoint to write.
      process: False for a checkpoint-only task (write the checkpoint file, touch no key).
    """

    step: str
    root: str
    times: BatchTimes
    versions: VersionPlan
    process: bool = True

    def location(self, partition: int) -> StoreLocation:
        return StoreLocation(self.root, self.step, partition)

    def report(self, partition: int, summary: Summary, inputs: int, outputs: int,
               touched: int) -> StepReport:
        return StepReport(self.step, partition, self.versions.target, summary.keys,
                          summary.state_bytes, inputs, outputs, touched, summary.hold,
                          summary.next_event_wake, summary.next_processing_wake)


def checkpoint_partition(batch: KeyedBatch, partition: int, records: Any) -> Iterator[Any]:
    """A checkpoint-only task: the partition's store stays at its version; its checkpoint
    file (``batch.versions.write``) is written."""
    for _ in records:
        pass
    with PartitionState.open(batch.location(partition), batch.versions):
        pass
    yield from ()
