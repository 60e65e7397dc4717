"""The runner's records as Arrow rows, for Spark Connect's ``mapInArrow`` (worker side).

On Spark Connect a dataset is a DataFrame, and a Python function sees a partition as Arrow
record batches. The runner's records cross in a binary column, :data:`RECORD`, pickled
(they are few and large: a record is a chunk of up to ~1 MiB of encoded elements, or a
report). A shuffle adds :data:`PARTITION`, the target partition (an ``INT``, which Spark's
``repartitionById`` sends each row to), and a GroupByKey also :data:`KEY`, the group's key in
a canonical encoding (:func:`encode_key`) that the reduce side sorts by, so a group's rows
arrive together.

Readers turn a partition's batches into the records an engine function takes; writers turn
what it yields into batches of at most :data:`BATCH_ROWS` rows or :data:`BATCH_BYTES` bytes
(Arrow's ``binary`` holds up to 2 GiB per batch; Spark itself sends batches of at most
``spark.sql.execution.arrow.maxBytesPerBatch``).

>>> from runners.spark.worker.records import Elements
>>> batches = list(write_records([Elements(0, b"a"), Elements(1, b"b")], pa.binary()))
>>> list(read_records(batches))
[Elements(port=0, data=b'a'), Elements(port=1, data=b'b')]
>>> decode_key(encode_key((b"k", b"w"))), decode_key(encode_key(b"k"))
((b'k', b'w'), b'k')
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, Iterable, Iterator, List, Sequence, Tuple

import pyarrow as pa

#: The pickled record.
RECORD = "record"
#: The partition a shuffle sends the row to.
PARTITION = "partition"
#: A GroupByKey's group, encoded by :func:`encode_key`.
KEY = "key"
#: A writer's batch ends at this many rows or bytes, whichever comes first.
BATCH_ROWS = 4096
BATCH_BYTES = 16 << 20

_PICKLE = pickle.HIGHEST_PROTOCOL
_BYTES_KEY = b"b"
_TUPLE_KEY = b"t"


# ----- keys
def encode_key(key: Any) -> bytes:
    """A group key (``bytes``, or a tuple of ``bytes``) as bytes equal exactly when the keys
    are equal (pickle is not: it shares repeated objects)."""
    if type(key) is bytes:
        return _BYTES_KEY + key
    if type(key) is tuple and all(type(part) is bytes for part in key):
        return _TUPLE_KEY + b"".join(len(part).to_bytes(4, "big") + part for part in key)
    raise TypeError(f"a group key must be bytes or a tuple of bytes, got {key!r}")


def decode_key(encoded: bytes) -> Any:
    if encoded[:1] == _BYTES_KEY:
        return encoded[1:]
    parts, position = [], 1
    while position < len(encoded):
        size = int.from_bytes(encoded[position:position + 4], "big")
        parts.append(encoded[position + 4:position + 4 + size])
        position += 4 + size
    return tuple(parts)


# ----- readers
def _column(batch: pa.RecordBatch, name: str) -> List[Any]:
    return batch.column(batch.schema.get_field_index(name)).to_pylist()


def read_records(batches: Iterable[pa.RecordBatch]) -> Iterator[Any]:
    """The records of a partition (its :data:`RECORD` column, unpickled)."""
    loads = pickle.loads
    for batch in batches:
        for value in _column(batch, RECORD):
            yield loads(value)


def read_groups(batches: Iterable[pa.RecordBatch]) -> Iterator[Tuple[Any, List[bytes]]]:
    """``(key, values)`` per group of a partition sorted by :data:`KEY` (values as written)."""
    current, values = None, []
    for batch in batches:
        for key, value in zip(_column(batch, KEY), _column(batch, RECORD)):
            if key != current:
                if values:
                    yield decode_key(current), values
                current, values = key, []
            values.append(value)
    if values:
        yield decode_key(current), values


# ----- writers
class _Batcher:
    """Rows gathered column by column, cut into batches."""

    def __init__(self, names: Sequence[str], types: Sequence[pa.DataType]) -> None:
        self.names = list(names)
        self.types = list(types)
        self.columns: List[List[Any]] = [[] for _ in names]
        self.size = 0

    def add(self, row: Sequence[Any], size: int) -> bool:
        """Add a row; True once the batch is full."""
        for column, value in zip(self.columns, row):
            column.append(value)
        self.size += size
        return self.size >= BATCH_BYTES or len(self.columns[0]) >= BATCH_ROWS

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(column, type=kind) for column, kind in zip(self.columns, self.types)]
        self.columns, self.size = [[] for _ in self.names], 0
        return pa.RecordBatch.from_arrays(arrays, names=self.names)

    def __bool__(self) -> bool:
        return bool(self.columns[0])


def write_records(records: Iterable[Any], binary: pa.DataType) -> Iterator[pa.RecordBatch]:
    """Records as batches of one :data:`RECORD` column (``binary``: Spark's Arrow type for
    BinaryType, ``binary`` or ``large_binary``)."""
    batcher = _Batcher([RECORD], [binary])
    dumps = pickle.dumps
    for record in records:
        data = dumps(record, _PICKLE)
        if batcher.add((data,), len(data)):
            yield batcher.batch()
    if batcher:
        yield batcher.batch()


def write_partitioned(pairs: Iterable[Tuple[int, Any]], partitions: int,
                      binary: pa.DataType, markers: bool = False) -> Iterator[pa.RecordBatch]:
    """``(partition, record)`` pairs as :data:`PARTITION` (modulo ``partitions``) and
    :data:`RECORD` rows; with ``markers``, then a row of no record (null) for every
    partition."""
    batcher = _Batcher([PARTITION, RECORD], [pa.int32(), binary])
    dumps = pickle.dumps
    for partition, record in pairs:
        data = dumps(record, _PICKLE)
        if batcher.add((partition % partitions, data), len(data)):
            yield batcher.batch()
    for partition in range(partitions if markers else 0):
        if batcher.add((partition, None), 0):
            yield batcher.batch()
    if batcher:
        yield batcher.batch()


def write_keyed(pairs: Iterable[Tuple[Any, bytes]], partitions: int,
                partition_of: Callable[[Any], int],
                binary: pa.DataType) -> Iterator[pa.RecordBatch]:
    """``(key, value)`` pairs as :data:`PARTITION`, :data:`KEY` and :data:`RECORD` rows (the
    value as it is: bytes)."""
    batcher = _Batcher([PARTITION, KEY, RECORD], [pa.int32(), binary, binary])
    for key, value in pairs:
        encoded = encode_key(key)
        if batcher.add((partition_of(key) % partitions, encoded, value),
                       len(encoded) + len(value)):
            yield batcher.batch()
    if batcher:
        yield batcher.batch()
