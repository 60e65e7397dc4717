"""Reading a streaming job's keyed state from its checkpoint, as a table.

A job run with ``--checkpoint_dir DIR`` keeps every keyed step's state (a GroupByKey's
trigger state, a stateful DoFn's user state and timers) in ``DIR``: each checkpoint's
manifest names, per step and key partition, the chain of state files that rebuilds the
store at that checkpoint (:mod:`~runners.spark.state.checkpoint`). This module reads
them, with the job stopped or running, without the pipeline's code:

* :func:`state_rows` / :func:`read_state`: the state at a committed checkpoint (default the
  latest), one :class:`~runners.spark.state.table.rows.StateRow` per step, key,
  window and buffered element, trigger cell, watermark hold, user-state value or timer;
  keys and values decoded with the coders the manifest carries
  (:mod:`~runners.spark.state.manifest_coders`), raw bytes beside them.
* :func:`state_changes` / :func:`read_changes`: the change feed, like Spark's state store
  ``readChangeFeed``: every key each store version in ``(start, end]`` updated (its whole
  new state, ``change_type`` ``"update"``) or deleted (``"delete"``), from the deltas;
  :func:`batch_changes` the same between two batches (the manifest keeps each recent
  batch's store version).
* ``beam-spark state --checkpoint_dir DIR`` (``python -m runners.spark.state.table.cli``):
  the same as an aligned text table (:mod:`~runners.spark.state.table.cli`), no Spark
  needed.

Each partition is rebuilt from exactly the chain its manifest names, every file checked
against its CRC-32C as the job's own tasks do (a damaged file raises
:class:`~runners.spark.state.changelog.CorruptStateFileError`). Only the latest
checkpoint is kept: a running job that writes a newer one deletes files the older names;
a reading that finds one gone starts once more from the newer checkpoint (a reading of an
explicit ``batch`` fails instead, naming the batches there are). Nothing read runs code
from the checkpoint beyond Beam's coders (:mod:`~runners.spark.state.table.rows`).

**Versions** (for the change feed). A store's versions are the loop's *rounds*: a batch
runs one round or more, and each keyed step that runs in a round leaves its stores at
that round's number. A checkpoint of batch ``b`` is at version ``round_number`` (its
:func:`checkpoint_info`; every row's ``version`` is the round that last wrote its key).
Record a reading's version to ask later for the changes since it. The changes of versions
``(start, end]`` can be read while the latest checkpoint's chains hold them: every
partition's chain must start (a snapshot at version ``s``, or no snapshot: ``s = 0``) at
or before ``start``, since a snapshot compacts away the deltas before it; ``end`` is at
most the latest checkpoint's version. Anything else raises :class:`StateReadError`
naming the range that can be read.

>>> import tempfile
>>> list(state_rows(tempfile.mkdtemp()))
Traceback (most recent call last):
...
runners.spark.state.table.reader.StateReadError: no checkpoint in ... (run the job with --checkpoint_dir)
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tempfile
import typing
from typing import Any, Iterable, Iterator, List, NamedTuple, Optional, Sequence

from runners.spark.state.changelog import DurableState, StateFile
from runners.spark.state.checkpoint import (
    DATA,
    STATE_DIRECTORY,
    PlainUnpickler,
    checkpoints_in,
    read_manifest,
)
from runners.spark.state.manifest_coders import load_coders
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.store import (
    StoreLocation,
    VersionPlan,
    durable_rows,
    partition_directory_name,
)
from runners.spark.state.table.rows import KeyDecoder, StateRow, spark_schema

__all__ = ["StateRow", "StateChange", "CheckpointInfo", "StateReadError", "checkpoint_info",
           "state_rows", "read_state", "state_changes", "read_changes", "STATE_SCHEMA",
           "CHANGES_SCHEMA"]

StateChange = NamedTuple("StateChange",
                         [*typing.get_type_hints(StateRow).items(), ("change_type", str)])
StateChange.__doc__ = ("A row of the change feed: a StateRow of the key's new state (an update) "
                       "or of its key alone (a delete: kind ''), and change_type.")

#: The DataFrame schema of :func:`read_state` (Spark DDL).
STATE_SCHEMA = spark_schema(StateRow)
#: ... and of :func:`read_changes`.
CHANGES_SCHEMA = spark_schema(StateChange)


class StateReadError(RuntimeError):
    """State that cannot be read as asked (no such checkpoint, a range the files do not
    hold, a checkpoint superseded while it was read)."""


class CheckpointInfo(NamedTuple):
    """A committed checkpoint: its batch, its store version (the loop's round number),
    its path and its key partitions."""

    batch: int
    version: int
    path: str
    parallelism: int


class _Checkpoint:
    """One checkpoint's manifest and driver data, read once."""

    def __init__(self, storage: DurableStorage, batch: int, path: str) -> None:
        self.storage = storage
        self.path = path
        self.manifest = read_manifest(path, storage)
        data = storage.read(storage.join(path, DATA))
        if hashlib.sha256(data).hexdigest() != self.manifest.get("data_sha256"):
            raise StateReadError(f"checkpoint {path} is damaged (its data does not match its "
                                 "manifest's digest)")
        self.data = PlainUnpickler(io.BytesIO(data)).load()
        self.info = CheckpointInfo(batch, self.data["round_number"], path,
                                   self.manifest["parallelism"])
        decoding = self.manifest.get("decoding") or {}
        self.decoding = decoding.get("steps", {})
        self.coders = load_coders(decoding.get("coders", {}))

    def steps(self, wanted: Optional[Sequence[str]]) -> List[str]:
        names = sorted(self.data["steps"])
        if wanted is None:
            return names
        unknown = [name for name in wanted if name not in names]
        if unknown:
            raise StateReadError(f"checkpoint {self.path} has no keyed step {unknown}; its "
                                 f"steps: {names}")
        return [name for name in names if name in wanted]

    def durable(self, step: str, partition: int) -> DurableState:
        snapshot = self.data["steps"][step]
        chain = self.manifest["state_files"].get(step, {}).get(str(partition), [])
        storage = self.storage
        return DurableState(storage, storage.join(STATE_DIRECTORY, snapshot["directory"],
                                                  partition_directory_name(partition)),
                            tuple(StateFile(*entry) for entry in chain))

    def decoder(self, step: str) -> KeyDecoder:
        return KeyDecoder(step, self.decoding.get(step), self.coders)


def _storage(checkpoint_dir: "str | DurableStorage") -> DurableStorage:
    return (checkpoint_dir if isinstance(checkpoint_dir, DurableStorage)
            else DurableStorage.open(checkpoint_dir, probe=False))


def _open(storage: DurableStorage, batch: Optional[int]) -> _Checkpoint:
    found = checkpoints_in(storage)
    if not found:
        raise StateReadError(f"no checkpoint in {storage.root} (run the job with "
                             "--checkpoint_dir)")
    if batch is None:
        return _Checkpoint(storage, *found[0])
    for found_batch, path in found:
        if found_batch == batch:
            return _Checkpoint(storage, found_batch, path)
    raise StateReadError(f"no checkpoint of batch {batch} in {storage.root}; there are "
                         f"checkpoints of batches {sorted(b for b, _ in found)} (only the "
                         "latest is kept)")


def checkpoint_info(checkpoint_dir: "str | DurableStorage",
                    batch: Optional[int] = None) -> CheckpointInfo:
    """The checkpoint :func:`state_rows` reads (default: the latest)."""
    return _open(_storage(checkpoint_dir), batch).info


def _superseded(storage: DurableStorage, checkpoint: _Checkpoint, error: Exception) -> bool:
    """Whether ``error`` (a file the checkpoint names could not be read) is explained by a
    newer checkpoint having replaced it."""
    del error  # any unreadable file: the newer checkpoint says whether it was replaced
    return any(batch > checkpoint.info.batch for batch, _ in checkpoints_in(storage))


def _partition_rows(checkpoint: _Checkpoint, step: str, partition: int,
                    scratch: str) -> List[Any]:
    """A partition's ``(key, row)`` pairs at the checkpoint (its chain rebuilt, checked)."""
    snapshot = checkpoint.data["steps"][step]
    durable = checkpoint.durable(step, partition)
    if not durable.chain or not snapshot["version"]:
        return []
    plan = VersionPlan(previous=snapshot["version"], target=snapshot["version"],
                       durable=durable,
                       commit=bytes.fromhex(snapshot["commits"].get(str(partition), "")))
    return list(durable_rows(StoreLocation(scratch, step, partition), plan))


def _read(checkpoint: _Checkpoint, steps: Optional[Sequence[str]]) -> Iterator[StateRow]:
    scratch = tempfile.mkdtemp(prefix="beam-state-table-")
    try:
        for step in checkpoint.steps(steps):
            decoder = checkpoint.decoder(step)
            for partition in range(checkpoint.info.parallelism):
                for key, row in _partition_rows(checkpoint, step, partition, scratch):
                    yield from decoder.rows(partition, key, row)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def state_rows(checkpoint_dir: "str | DurableStorage", batch: Optional[int] = None,
               steps: Optional[Sequence[str]] = None) -> Iterator[StateRow]:
    """Every state row of the keyed steps (``steps``: those only) at the checkpoint of
    ``batch`` (default: the latest); see the module docstring. A checkpoint superseded
    before its first row was read is replaced by the newer one (when ``batch`` is None)."""
    storage = _storage(checkpoint_dir)
    checkpoint = _open(storage, batch)
    started = False
    try:
        for row in _read(checkpoint, steps):
            started = True
            yield row
    except OSError as error:
        if not _superseded(storage, checkpoint, error):
            raise
        if started or batch is not None:
            raise StateReadError(
                f"checkpoint {checkpoint.path} was superseded by a newer one while it was read "
                f"(its file is gone: {error}); read again"
                + (" without an explicit batch" if batch is not None else "")) from error
        yield from _read(_open(storage, None), steps)


def read_state(spark: Any, checkpoint_dir: str, batch: Optional[int] = None,
               steps: Optional[Sequence[str]] = None) -> Any:
    """:func:`state_rows` as a DataFrame of :data:`STATE_SCHEMA` (a classic or a Spark
    Connect session). The rows are read on the driver, then handed to Spark."""
    return spark.createDataFrame(_collect(lambda: state_rows(checkpoint_dir, batch, steps)),
                                 STATE_SCHEMA)


def _collect(read: Any) -> List[Any]:
    """Every row of ``read()``; read once more when a checkpoint was superseded mid-way."""
    try:
        return list(read())
    except StateReadError as error:
        if "superseded" not in str(error):
            raise
        return list(read())


def state_changes(checkpoint_dir: "str | DurableStorage", start: int,
                  end: Optional[int] = None,
                  steps: Optional[Sequence[str]] = None) -> Iterator[StateChange]:
    """The change feed of store versions ``(start, end]`` (``end`` default: the latest
    checkpoint's version), in version order per partition: each version's updated keys
    with their new state, and deleted keys. See the module docstring for the ranges that
    can be read."""
    storage = _storage(checkpoint_dir)
    checkpoint = _open(storage, None)
    latest = checkpoint.info.version
    end = latest if end is None else end
    if not 0 <= start <= end <= latest:
        raise StateReadError(f"versions ({start}, {end}] cannot be read: give 0 <= start <= "
                             f"end <= {latest} (the latest checkpoint's version, batch "
                             f"{checkpoint.info.batch})")
    earliest = _earliest_start(checkpoint, checkpoint.steps(steps))
    if start < earliest:
        raise StateReadError(
            f"the changes after version {start} are no longer in {storage.root}: a snapshot "
            f"at version {earliest} compacted the deltas before it; changes after versions "
            f"{earliest}..{latest} can be read")
    for step in checkpoint.steps(steps):
        decoder = checkpoint.decoder(step)
        for partition in range(checkpoint.info.parallelism):
            durable = checkpoint.durable(step, partition)
            for state_file in durable.chain:
                if state_file.kind != "delta" or not start < state_file.version <= end:
                    continue
                for key, row in durable.read_delta(state_file):
                    if row is None:
                        yield StateChange(step, partition, decoder.key(key), key, None, "", "",
                                          None, None, None, None, state_file.version, "delete")
                        continue
                    for state_row in decoder.rows(partition, key, row):
                        yield StateChange(*state_row, "update")


def _earliest_start(checkpoint: _Checkpoint, steps: Iterable[str]) -> int:
    """The earliest version whose later changes every partition's chain holds."""
    earliest = 0
    for step in steps:
        for partition in range(checkpoint.info.parallelism):
            chain = checkpoint.durable(step, partition).chain
            if chain and chain[0].kind == "snapshot":
                earliest = max(earliest, chain[0].version)
    return earliest


def batch_changes(checkpoint_dir: "str | DurableStorage", start_batch: int,
                  end_batch: Optional[int] = None,
                  steps: Optional[Sequence[str]] = None) -> Iterator[StateChange]:
    """The change feed between two batches: what the batches after ``start_batch`` up to
    ``end_batch`` (default: the latest checkpoint's) changed. Batch ``b`` means the state
    after ``b`` batches (a checkpoint's ``batch``); each batch's store version is in the
    manifest (``batch_versions``), and the range must be one :func:`state_changes` can
    read."""
    storage = _storage(checkpoint_dir)
    checkpoint = _open(storage, None)
    versions = {int(batch): version for batch, version
                in checkpoint.manifest.get("batch_versions", {}).items()}
    end_batch = checkpoint.info.batch if end_batch is None else end_batch
    missing = [batch for batch in (start_batch, end_batch) if batch not in versions]
    if missing:
        known = (f"batches {min(versions)}..{max(versions)}" if versions
                 else "no batches (a checkpoint of an earlier runner)")
        raise StateReadError(f"batch(es) {missing} are not in the latest checkpoint of "
                             f"{storage.root}, which knows the store versions of {known}")
    return state_changes(storage, versions[start_batch], versions[end_batch], steps)


def read_changes(spark: Any, checkpoint_dir: str, start: int, end: Optional[int] = None,
                 steps: Optional[Sequence[str]] = None) -> Any:
    """:func:`state_changes` as a DataFrame of :data:`CHANGES_SCHEMA`."""
    return spark.createDataFrame(list(state_changes(checkpoint_dir, start, end, steps)),
                                 CHANGES_SCHEMA)
