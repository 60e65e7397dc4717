"""What a Spark Connect task runs, and what it gets from the driver (worker side).

A dataset's partition is processed by one ``mapInArrow`` call of a :class:`PartitionTask`:
it reads the partition's Arrow batches into the runner's records (a *reader*), applies the
engine's functions in order, and writes what they yield back as batches (a *writer*); see
:mod:`~runners.spark.backends.connect_rows` for the rows. Values the driver broadcasts
arrive as :class:`ConnectBroadcast`; a task's metrics leave as a report (:class:`ReportSink`).

Everything here pickles by reference to this module, which Spark's Python workers import
(the project ships to them as an artifact).

>>> slices = [pa.record_batch([pa.array([1], pa.int64())], names=["id"])]
>>> task = PartitionTask(SourceRecords([4, 3, 2, 1], 2), ((False, sorted),),
...                      RecordsWriter(pa.binary()))
>>> from runners.spark.backends.connect_rows import read_records
>>> list(read_records(task.run(0, iter(slices))))  # slice 1 of 2
[1, 2]
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import pickle
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.compute as pc

from runners.spark.backends import connect_rows as rows
from runners.spark.backends.base import Broadcast, IndexedPartitionFunction, MetricsSink
from runners.spark.worker.records import MetricUpdates

#: A function still to apply to a partition: (whether it takes the partition index first,
#: the function).
Step = Tuple[bool, Callable[..., Iterable[Any]]]
#: Reads a partition: (partition index, its batches) -> records.
Reader = Callable[[int, Iterable[pa.RecordBatch]], Iterator[Any]]


# ----- readers
def records_in(index: int, batches: Iterable[pa.RecordBatch]) -> Iterator[Any]:
    """The records of a partition of records."""
    return rows.read_records(batches)


def groups_in(index: int, batches: Iterable[pa.RecordBatch]) -> Iterator[Any]:
    """``(key, values)`` of a partition sorted by group key."""
    return rows.read_groups(batches)


class SourceRecords:
    """Records from the driver, carried in the task function, read over a DataFrame of one
    row per slice (``spark.range(slices)``: its ``id`` column): the slice a row names yields
    its contiguous share of the records, as ``SparkContext.parallelize`` deals them. (The
    slice is read from the row, not from the task's partition: a source unioned after
    another runs in tasks of other numbers.)"""

    #: The column naming a row's slice.
    SLICE = "id"

    def __init__(self, records: Sequence[Any], slices: int) -> None:
        self.pickled = pickle.dumps(list(records), pickle.HIGHEST_PROTOCOL)
        self.slices = slices

    def __call__(self, index: int, batches: Iterable[pa.RecordBatch]) -> Iterator[Any]:
        records = None
        for batch in batches:
            for slice_ in batch.column(batch.schema.get_field_index(self.SLICE)).to_pylist():
                if records is None:
                    records = pickle.loads(self.pickled)
                start = slice_ * len(records) // self.slices
                yield from records[start:(slice_ + 1) * len(records) // self.slices]


# ----- writers
class RecordsWriter:
    def __init__(self, binary: pa.DataType) -> None:
        self.binary = binary

    def __call__(self, records: Iterable[Any]) -> Iterator[pa.RecordBatch]:
        return rows.write_records(records, self.binary)


class PartitionedWriter:
    """``(partition, record)`` pairs, for a shuffle to ``partitions`` partitions; with
    ``markers``, a marker row for every partition too (see :class:`MarkedTask`)."""

    def __init__(self, partitions: int, binary: pa.DataType, markers: bool = False) -> None:
        self.partitions = partitions
        self.binary = binary
        self.markers = markers

    def __call__(self, pairs: Iterable[Tuple[int, Any]]) -> Iterator[pa.RecordBatch]:
        return rows.write_partitioned(pairs, self.partitions, self.binary, self.markers)


class KeyedWriter:
    """``(key, value)`` pairs, for a GroupByKey over ``partitions`` partitions."""

    def __init__(self, partitions: int, partition_of: Callable[[Any], int],
                 binary: pa.DataType) -> None:
        self.partitions = partitions
        self.partition_of = partition_of
        self.binary = binary

    def __call__(self, pairs: Iterable[Tuple[Any, bytes]]) -> Iterator[pa.RecordBatch]:
        return rows.write_keyed(pairs, self.partitions, self.partition_of, self.binary)


class PartitionTask:
    """What ``mapInArrow`` runs for one partition: read, apply the steps in order, write."""

    def __init__(self, reader: Reader, steps: Tuple[Step, ...],
                 writer: Callable[[Iterable[Any]], Iterator[pa.RecordBatch]]) -> None:
        self.reader = reader
        self.steps = steps
        self.writer = writer

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        return self.run(TaskContext.get().partitionId(), batches)

    def run(self, index: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The task over ``batches``; ``index`` is the task's partition (a hint for the
        functions that take it: in a union or a coalesced dataset it is not the partition
        of the dataset the function was given)."""
        records: Iterable[Any] = self.reader(index, batches)
        for with_index, function in self.steps:
            records = function(index, records) if with_index else function(records)
        return self.writer(records)


# ----- a keyed step's task on one executor (runners.spark.backends.connect_affinity)
class MarkedTask:
    """What ``mapInArrow`` runs for one key partition when there is nothing to place: the
    partition's rows, each with the key partition in :data:`~runners.spark.backends.
    connect_rows.PARTITION` and among them marker rows with no record (each map task writes
    one per key partition, so that a partition with no input still names itself), given to
    ``task`` as its key partition's input, the markers left out. The task's own partition
    id would not do: once the step's output is unioned with other outputs, Spark numbers the
    union's partitions."""

    def __init__(self, task: PartitionTask) -> None:
        self.task = task

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = iter(batches)
        for first in batches:
            if first.num_rows:
                break
        else:
            return iter(())  # not a key partition (each has its marker)
        partition = first.column(first.schema.get_field_index(rows.PARTITION))[0].as_py()
        return self.task.run(partition, (_without_markers(batch) for batch in
                                         itertools.chain((first,), batches)))


def _without_markers(batch: pa.RecordBatch) -> pa.RecordBatch:
    record = batch.column(batch.schema.get_field_index(rows.RECORD))
    return batch if record.null_count == 0 else batch.filter(pc.is_valid(record))


# ----- a keyed step's task, placed by a pointer (runners.spark.backends.connect_affinity)
class PlacedTask:
    """What the cogroup runs for one key partition: the partition's input through the
    dataset's functions, the step's and those that follow it, in the driver's working
    directory where the workers see it (as :class:`PartitionTask`); ``schema``: the Arrow
    schema of what the task's writer makes."""

    def __init__(self, task: PartitionTask, schema: pa.Schema) -> None:
        self.task = task
        self.schema = schema

    def run(self, key: Tuple[Any, ...], pointer: pa.Table, records: pa.Table) -> pa.Table:
        """The key partition ``key[0]`` (an Arrow scalar): its pointer row (ignored) and its
        input rows."""
        batches = list(self.task.run(key[0].as_py(), records.to_batches()))
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


# ----- from the driver, and back
class ConnectBroadcast(Broadcast):
    """A value for the tasks: pickled into their function when small, else written once to
    an artifact file that each worker process reads once (by content digest)."""

    _LOADED: Dict[str, Any] = {}  # digest -> value, per worker process
    _LOADED_LIMIT = 64

    def __init__(self, value: Any, pickled: bytes, artifact: Optional[str]) -> None:
        self._value = value
        self.digest = hashlib.sha256(pickled).hexdigest()
        self.artifact = artifact
        self.inline = pickled if artifact is None else None

    def __getstate__(self) -> Dict[str, Any]:
        return {"digest": self.digest, "artifact": self.artifact, "inline": self.inline}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state, _value=None)

    @property
    def value(self) -> Any:
        if self._value is not None:
            return self._value
        loaded = ConnectBroadcast._LOADED.get(self.digest)
        if loaded is None:
            if self.inline is not None:
                loaded = pickle.loads(self.inline)
            else:
                from pyspark import SparkFiles

                with open(SparkFiles.get(self.artifact), "rb") as file:
                    loaded = pickle.load(file)
            if len(ConnectBroadcast._LOADED) >= self._LOADED_LIMIT:
                ConnectBroadcast._LOADED.clear()
            ConnectBroadcast._LOADED[self.digest] = loaded
        self._value = loaded
        return loaded


class ReportSink(MetricsSink):
    """A task's metrics leave with its records (a :class:`MetricUpdates` report)."""

    def report(self, packed: List[bytes]) -> Iterable[Any]:
        return (MetricUpdates(tuple(packed)),)
