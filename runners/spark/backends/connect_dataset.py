"""Spark Connect's datasets: DataFrames of the runner's records, and the functions still to
apply to their partitions (see :mod:`~runners.spark.backends.connect`).

>>> [field.name for field in KEYED_SCHEMA.fields]
['partition', 'key', 'record']
>>> _arrow_schema(PARTITIONED_SCHEMA, pa.binary()).types
[DataType(int32), DataType(binary)]
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Tuple

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from runners.spark.backends import connect_rows as rows
from runners.spark.backends.base import Dataset, IndexedPartitionFunction, PartitionFunction
from runners.spark.backends.connect_affinity import placed_frame
from runners.spark.backends.connect_tasks import (
    KeyedWriter,
    MarkedTask,
    PartitionedWriter,
    PartitionTask,
    RecordsWriter,
    Step,
    groups_in,
    records_in,
)


def _schema(*columns: Tuple[str, Any]) -> StructType:
    return StructType([StructField(name, kind, nullable=False) for name, kind in columns])


def _arrow_schema(schema: StructType, binary: pa.DataType) -> pa.Schema:
    """The Arrow schema of the batches a writer makes for ``schema`` (one of the three)."""
    return pa.schema([pa.field(field.name, pa.int32() if isinstance(field.dataType, IntegerType)
                               else binary) for field in schema.fields])


RECORDS_SCHEMA = _schema((rows.RECORD, BinaryType()))
PARTITIONED_SCHEMA = _schema((rows.PARTITION, IntegerType()), (rows.RECORD, BinaryType()))
#: :data:`PARTITIONED_SCHEMA` with marker rows (a null record).
MARKED_SCHEMA = StructType([StructField(rows.PARTITION, IntegerType(), nullable=False),
                            StructField(rows.RECORD, BinaryType(), nullable=True)])
KEYED_SCHEMA = _schema((rows.PARTITION, IntegerType()), (rows.KEY, BinaryType()),
                       (rows.RECORD, BinaryType()))


class ConnectDataset(Dataset):
    """A DataFrame of records, and the functions still to apply to its partitions.

    Args:
      backend: the session's backend.
      frame: the DataFrame.
      reader: how a task turns its partition's batches into records.
      steps: functions to apply, in order, in the same pass.
      plain: ``frame`` is exactly one :data:`~runners.spark.backends.connect_rows.RECORD`
        column of records.
      persisted: ``frame`` is persisted (:meth:`unpersist` frees it).
      partitions: ``frame`` is :data:`PARTITIONED_SCHEMA` rows ``repartitionById`` into this
        many partitions (what :meth:`partition_by` makes), else None.
      known_empty: the dataset has no records (a source of none).
      pointer: a keyed step's output: ``frame`` is the step's input by key partition, run
        cogrouped with this pointer (:func:`~runners.spark.backends.connect_affinity.
        placed_frame`), ``reader`` and ``steps`` (the step's and what follows it up to the
        next shuffle) in the cogroup's task: one Python pass, not one more ``mapInArrow``.
      marked: a keyed step's output on one executor: ``frame`` is the step's input by key
        partition with a marker row in each (:class:`~runners.spark.backends.connect_tasks.
        MarkedTask`), ``reader`` and ``steps`` in its ``mapInArrow`` task.
      unshuffled: for :attr:`partitions`, the dataset whose records were partitioned.
    """

    def __init__(self, backend: "ConnectBackend", frame: Any,
                 reader: Callable[..., Iterator[Any]] = records_in,
                 steps: Tuple[Step, ...] = (), plain: bool = False,
                 persisted: bool = False, partitions: Optional[int] = None,
                 known_empty: bool = False, pointer: Any = None, marked: bool = False,
                 unshuffled: Any = None) -> None:
        self.backend = backend
        self._frame = frame
        self._reader = reader
        self._steps = steps
        self._plain = plain
        self._persisted = persisted
        self._partitions = partitions
        self._known_empty = known_empty
        self._pointer = pointer
        self._marked = marked
        self._unshuffled = unshuffled

    @property
    def partitions(self) -> Optional[int]:
        return self._partitions

    @property
    def known_empty(self) -> bool:
        return self._known_empty

    @property
    def reader(self) -> Callable[..., Iterator[Any]]:
        return self._reader

    @property
    def steps(self) -> Tuple[Step, ...]:
        return self._steps

    @property
    def partitioned_frame(self) -> Any:
        """The DataFrame of a dataset made by :meth:`partition_by` (its rows as shuffled,
        before :attr:`steps`)."""
        if self.partitions is None:
            raise ValueError("this dataset was not made by partition_by")
        return self._frame

    def marked_frame(self) -> Any:
        """The rows of a dataset made by :meth:`partition_by` (before :attr:`steps`), each
        map task's with a marker row for every partition (:class:`~runners.spark.backends.
        connect_tasks.MarkedTask`)."""
        if self._unshuffled is None:
            raise ValueError("this dataset was not made by partition_by")
        written = self._unshuffled._apply(
            PartitionedWriter(self.partitions, self.backend.binary, markers=True), MARKED_SCHEMA)
        return written.repartitionById(self.partitions, rows.PARTITION)

    def map_partitions(self, function: PartitionFunction) -> "ConnectDataset":
        return self._with_step((False, function))

    def map_partitions_with_index(self, function: IndexedPartitionFunction) -> "ConnectDataset":
        return self._with_step((True, function))

    def _with_step(self, step: Step) -> "ConnectDataset":
        return ConnectDataset(self.backend, self._frame, self._reader, self._steps + (step,),
                              partitions=self.partitions, pointer=self._pointer,
                              marked=self._marked, unshuffled=self._unshuffled)

    def partition_by(self, partitions: int) -> "ConnectDataset":
        written = self._apply(PartitionedWriter(partitions, self.backend.binary),
                              PARTITIONED_SCHEMA)
        return ConnectDataset(self.backend, written.repartitionById(partitions, rows.PARTITION),
                              partitions=partitions, unshuffled=self)

    def group_by_key(self, partitions: int,
                     partition_of: Callable[[Any], int]) -> "ConnectDataset":
        written = self._apply(KeyedWriter(partitions, partition_of, self.backend.binary),
                              KEYED_SCHEMA)
        grouped = written.repartitionById(partitions, rows.PARTITION).sortWithinPartitions(
            rows.KEY)
        return ConnectDataset(self.backend, grouped, groups_in)

    def coalesce(self, partitions: int) -> "ConnectDataset":
        return ConnectDataset(self.backend, self.frame().coalesce(partitions), plain=True)

    def frame(self) -> Any:
        """A DataFrame of one :data:`~runners.spark.backends.connect_rows.RECORD` column."""
        if self._pointer is not None or self._marked:
            return self._apply(RecordsWriter(self.backend.binary), RECORDS_SCHEMA)
        if self._plain and not self._steps:
            return self._frame
        if self._reader is records_in and not self._steps:
            return self._frame.select(rows.RECORD)
        return self._apply(RecordsWriter(self.backend.binary), RECORDS_SCHEMA)

    def _apply(self, writer: Callable[[Iterable[Any]], Iterator[Any]], schema: StructType) -> Any:
        task = PartitionTask(self._reader, self._steps, writer)
        if self._pointer is not None:
            return placed_frame(self._pointer, self._frame, task, schema,
                                _arrow_schema(schema, self.backend.binary))
        if self._marked:
            return self._frame.mapInArrow(MarkedTask(task), schema)
        return self._frame.mapInArrow(task, schema)

    def unpersist(self) -> None:
        if self._persisted:
            self._frame.unpersist()
            self._persisted = False


def result_table(frame: Any) -> pa.Table:
    """The rows of ``frame`` (one column of records), in one round trip to the server.

    ``DataFrame.toArrow`` first asks the server for the frame's schema unless the client
    cached it (a ``select``, a ``coalesce`` of one, ... do not): an ``AnalyzePlan`` sending
    the whole plan (~120 KB for a streaming round of the latency benchmark) to be analysed
    once more than the query itself, for a schema the runner knows. ``_to_table`` is what
    ``toArrow`` runs after that (PySpark 4.1-4.3); a client without it is asked the
    ordinary way."""
    to_table = getattr(frame, "_to_table", None)
    if to_table is None:
        return frame.toArrow()
    table, _ = to_table()
    return table
