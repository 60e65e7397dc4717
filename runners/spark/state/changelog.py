"""A key partition's durable state: the files in ``--checkpoint_dir`` that rebuild its store.

With a checkpoint location, the executor's LMDB store (:mod:`~runners.spark.state.
store`) is a cache: every task that changes it also writes, after its commit and
before the batch counts as done, the rows it changed (a *delta*) to
``<checkpoint dir>/state/<step>/<partition>/``; from time to time a compact copy of the whole
store (a *snapshot*, written in the background: :mod:`~runners.spark.state.
snapshots`) starts a new chain. A partition's durable
state is its *chain*: a snapshot (or nothing) and the deltas after it, oldest first, each a
:class:`StateFile`. The driver learns every file from the tasks' reports and hands each
task its partition's chain; a task that finds no store at the version it expects (it runs
on another executor than last time, or the executor is new) rebuilds the store from it.
This is how Spark's HDFS-backed state store (a delta file per batch, snapshots) and RocksDB
changelog checkpointing keep state on a cluster.

When to snapshot (:func:`snapshot_due`, decided by the driver from the chain and the
partition's size): once the deltas since the last snapshot add up to more than the store
itself (at least :data:`SNAPSHOT_MIN_BYTES`), or number :data:`MAX_DELTAS`: a rebuild then
reads at most about twice the state, and the snapshots cost about as much again as the
deltas. A chain twice past those limits (:func:`snapshot_overdue`) gets its snapshot from the
batch's task itself.

Every file's CRC-32C is in the chain beside its size (the task computes it as it writes the
file; the driver keeps it in the checkpoint manifest), and a file is checked against both
before a store is rebuilt from it: a file changed after it was written (bit rot, a torn
write, a bad copy between buckets) raises :class:`CorruptStateFileError` naming the file,
never loads.

A delta's layout (no pickle: reading one runs no code)::

    b"BEAMSTATEDELTA" format(u32) version(u64) count(u64)
    then per row: key length(u32) key row length(u32, 0xffffffff: deleted) row

>>> data = encode_delta(7, [(b"k1", b"row"), (b"k2", None)])
>>> decode_delta(data)
(7, [(b'k1', b'row'), (b'k2', None)])
>>> checksum(data)
'fb7efc3b'
>>> verify("delta-7.bin", StateFile("delta", 7, len(data), "", "fb7efc3b"), data)
>>> verify("delta-7.bin", StateFile("delta", 7, len(data), "", "00000000"), data)
Traceback (most recent call last):
...
runners.spark.state.changelog.CorruptStateFileError: delta-7.bin fails its checksum: CRC-32C fb7efc3b, written as 00000000 (57 bytes, as written)
>>> file_name(StateFile("snapshot", 40, 0, "5eedc0de"))
'snapshot-000000000040-5eedc0de.mdb'
"""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import List, NamedTuple, Optional, Sequence, Tuple

import crc32c

from runners.spark.state.storage.filesystems import DurableStorage

#: A snapshot is due once the chain's deltas add up to more than the store and this.
SNAPSHOT_MIN_BYTES = 4 << 20
#: ... or once the chain holds this many deltas (each is a file to read on a rebuild).
MAX_DELTAS = 50
_MAGIC = b"BEAMSTATEDELTA"
_DELTA_FORMAT = 1
_HEADER = struct.Struct(">IQQ")
_LENGTH = struct.Struct(">I")
_DELETED = 0xFFFFFFFF


#: Bytes read at a time when a local file's checksum is computed.
_CHECKSUM_BYTES = 8 << 20


class StateFileError(RuntimeError):
    """A state file that cannot be read (damaged, or of another format)."""


class CorruptStateFileError(StateFileError):
    """A state file whose bytes are not the ones written (its size or CRC-32C differs)."""


class StateFile(NamedTuple):
    """One file of a partition's chain: ``"delta"`` or ``"snapshot"``, the store version it
    brings the partition to, its size in bytes, the id of the commit that wrote it (two
    attempts of one task each write their own file; the chain names the accepted one) and
    its CRC-32C (hex; empty in chains of runners before checksums)."""

    kind: str
    version: int
    size: int
    commit: str = ""
    checksum: str = ""


def checksum(data: bytes, value: int = 0) -> str:
    """The CRC-32C of ``data`` as 8 hex digits."""
    return f"{crc32c.crc32c(data, value) & 0xFFFFFFFF:08x}"


def file_checksum(local_path: str) -> str:
    """The CRC-32C of a local file, read in chunks."""
    value = 0
    with open(local_path, "rb") as file:
        for chunk in iter(lambda: file.read(_CHECKSUM_BYTES), b""):
            value = crc32c.crc32c(chunk, value)
    return f"{value & 0xFFFFFFFF:08x}"


def verify(where: str, state_file: StateFile, data: "bytes | None" = None,
           local_path: Optional[str] = None) -> None:
    """Raise :class:`CorruptStateFileError` unless the file's bytes (``data``, or the local
    copy at ``local_path``) have the size and CRC-32C the chain recorded for it."""
    import os

    size = len(data) if data is not None else os.path.getsize(local_path)
    found = checksum(data) if data is not None else file_checksum(local_path)
    if size != state_file.size or (state_file.checksum and found != state_file.checksum):
        sizes = ("as written" if size == state_file.size
                 else f"{state_file.size} when written")
        raise CorruptStateFileError(
            f"{where} fails its checksum: CRC-32C {found}, written as "
            f"{state_file.checksum or 'unknown'} ({size} bytes, {sizes})")


def file_name(state_file: StateFile) -> str:
    prefix, suffix = ("snapshot", "mdb") if state_file.kind == "snapshot" else ("delta", "bin")
    commit = f"-{state_file.commit}" if state_file.commit else ""
    return f"{prefix}-{state_file.version:012d}{commit}.{suffix}"


@dataclasses.dataclass(frozen=True)
class DurableState:
    """Where one key partition's state files are, and the chain that rebuilds its store.

    Args:
      storage: the checkpoint location.
      directory: the partition's directory in it.
      chain: a snapshot (or none) and the deltas after it, oldest first.
      snapshot: a snapshot is due (:func:`snapshot_due`): the task writes its delta and
        starts one in the background.
      snapshot_now: a snapshot is long overdue (:func:`snapshot_overdue`): the task writes
        it instead of its delta.
    """

    storage: DurableStorage
    directory: str
    chain: Tuple[StateFile, ...] = ()
    snapshot: bool = False
    snapshot_now: bool = False

    def path(self, state_file: StateFile) -> str:
        return self.storage.join(self.directory, file_name(state_file))

    def write_delta(self, version: int, rows: Sequence[Tuple[bytes, Optional[bytes]]],
                    commit: str = "") -> StateFile:
        data = encode_delta(version, rows)
        state_file = StateFile("delta", version, len(data), commit, checksum(data))
        self.storage.write(self.path(state_file), data)
        return state_file

    def write_snapshot(self, version: int, local_file: str, commit: str = "") -> StateFile:
        """Upload ``local_file`` (a compact copy of the store at ``version``)."""
        path = self.path(StateFile("snapshot", version, 0, commit))
        digest = file_checksum(local_file)
        return StateFile("snapshot", version, self.storage.upload(local_file, path), commit,
                         digest)

    def read_snapshot(self, state_file: StateFile, local_file: str) -> None:
        """Download the snapshot to ``local_file``, checked against its size and checksum."""
        path = self.path(state_file)
        self.storage.download(path, local_file)
        verify(path, state_file, local_path=local_file)

    def read_delta(self, state_file: StateFile) -> List[Tuple[bytes, Optional[bytes]]]:
        path = self.path(state_file)
        data = self.storage.read(path)
        verify(path, state_file, data)
        version, rows = decode_delta(data, path)
        if version != state_file.version:
            raise StateFileError(f"{path} holds version {version}, not {state_file.version}")
        return rows


def snapshot_due(chain: Sequence[StateFile], store_bytes: int) -> bool:
    """Whether a partition whose chain is ``chain`` and whose store holds ``store_bytes``
    writes a snapshot next (see the module docstring).

    >>> snapshot_due([StateFile("delta", 1, 10)], store_bytes=100)
    False
    >>> snapshot_due([StateFile("delta", v, SNAPSHOT_MIN_BYTES) for v in (1, 2)], 100)
    True
    """
    deltas = [entry for entry in chain if entry.kind == "delta"]
    if len(deltas) >= MAX_DELTAS:
        return True
    return sum(entry.size for entry in deltas) > max(store_bytes, SNAPSHOT_MIN_BYTES)


def snapshot_overdue(chain: Sequence[StateFile], store_bytes: int) -> bool:
    """Whether a partition's chain is so far past due a snapshot (twice the limits of
    :func:`snapshot_due`: its background snapshots keep failing, or its worker processes
    end before they finish) that its next task writes one itself.

    >>> snapshot_overdue([StateFile("delta", v, 10) for v in range(MAX_DELTAS)], 100)
    False
    >>> snapshot_overdue([StateFile("delta", v, 10) for v in range(2 * MAX_DELTAS)], 100)
    True
    """
    deltas = [entry for entry in chain if entry.kind == "delta"]
    if len(deltas) >= 2 * MAX_DELTAS:
        return True
    return sum(entry.size for entry in deltas) > 2 * max(store_bytes, SNAPSHOT_MIN_BYTES)


def encode_delta(version: int, rows: Sequence[Tuple[bytes, Optional[bytes]]]) -> bytes:
    """Rows (key, row; None: deleted) as a delta of ``version`` (layout in the module doc)."""
    parts = [_MAGIC, _HEADER.pack(_DELTA_FORMAT, version, len(rows))]
    for key, row in rows:
        parts.append(_LENGTH.pack(len(key)))
        parts.append(key)
        if row is None:
            parts.append(_LENGTH.pack(_DELETED))
        else:
            parts.append(_LENGTH.pack(len(row)))
            parts.append(row)
    return b"".join(parts)


def decode_delta(data: bytes, where: str = "a state delta") -> Tuple[int, List[Tuple[bytes, Optional[bytes]]]]:
    if not data.startswith(_MAGIC):
        raise StateFileError(f"{where} is not a state delta of this runner")
    data_format, version, count = _HEADER.unpack_from(data, len(_MAGIC))
    if data_format != _DELTA_FORMAT:
        raise StateFileError(f"{where} is a state delta of format {data_format}; this runner "
                             f"reads format {_DELTA_FORMAT}")
    view = memoryview(data)
    offset = len(_MAGIC) + _HEADER.size
    rows: List[Tuple[bytes, Optional[bytes]]] = []
    try:
        for _ in range(count):
            (length,) = _LENGTH.unpack_from(data, offset)
            key = bytes(view[offset + 4:offset + 4 + length])
            offset += 4 + length
            (length,) = _LENGTH.unpack_from(data, offset)
            offset += 4
            if length == _DELETED:
                rows.append((key, None))
                continue
            rows.append((key, bytes(view[offset:offset + length])))
            offset += length
    except struct.error as error:
        raise StateFileError(f"{where} is truncated ({error})") from None
    if offset > len(data):
        raise StateFileError(f"{where} is truncated")
    if offset < len(data):
        raise StateFileError(f"{where} has {len(data) - offset} bytes after its last row")
    return version, rows
