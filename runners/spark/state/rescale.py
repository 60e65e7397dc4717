"""Rescaling a streaming job: its keyed state re-split into another number of key partitions.

A job's keyed steps keep their state per key partition, a key in partition ``crc32(encoded key)
% n`` (:func:`runners.spark.execution.shuffle.partition_of`). A driver that resumes a checkpoint
written with ``n`` partitions, started with another ``--spark_parallelism`` ``m``, re-splits
every keyed step's state as one Spark job per step, before its first batch:

* a task per old partition rebuilds the partition's store at the checkpoint's version from
  its chain (every file checked, as a task of the job would), and sends each row (the key's
  state, timers, watermark hold, pane and trigger bookkeeping: a row is all a key holds) to
  its new partition ``crc32(key) % m``, in chunks;
* a task per new partition writes its rows into a new store and uploads it as a snapshot,
  the whole chain of the new partition, in a new directory of the checkpoint location
  (``state/<step>-p<m>-b<batch>/``: the old files stay as they were).

Nothing else is per key partition: the driver's checkpoint data (watermarks, held side-input
elements, residuals) carries over as it is. The new layout lives in the driver until its
next checkpoint names it (the loop checkpoints at once after a rescale): a driver that
crashes before resumes from the old checkpoint, whose files are untouched, at either
parallelism (the unfinished re-split's files, named by no checkpoint, are deleted then).
The old files are deleted once the new checkpoint is written.

>>> RescaleRows("Sum", 3, b"").partition
3
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import shutil
import time
import uuid
import zlib
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from runners.spark.beam_internals import DistributionData, monitoring_infos
from runners.spark.state.changelog import (
    DurableState,
    StateFile,
    decode_delta,
    encode_delta,
    file_name,
)
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.store import (
    StoreLocation,
    VersionPlan,
    durable_rows,
    executor_local_directories,
    partition_directory_name,
    step_directory_name,
    write_store_snapshot,
)
from runners.spark.worker.metrics import pack

_LOGGER = logging.getLogger(__name__)

#: Namespace of the loop's own metrics (``rescale_millis``: the re-split's time).
METRICS_NAMESPACE = "spark_streaming"
#: A chunk of rows ends at this many bytes (a record between Spark stages: ~1 MiB).
CHUNK_BYTES = 1 << 20


class OldPartition(NamedTuple):
    """One key partition of the layout being re-split: what its task rebuilds."""

    step: str
    partition: int
    version: int
    commit: bytes
    durable: DurableState


class RescaleRows(NamedTuple):
    """A chunk of rows for new key partition ``partition`` (encoded as a delta's rows)."""

    step: str
    partition: int
    rows: bytes


class RescaledPartition(NamedTuple):
    """A new key partition written: its snapshot (a ``state_files.StateFile``), keys and
    bytes."""

    step: str
    partition: int
    snapshot: Tuple[str, int, int, str, str]
    keys: int
    state_bytes: int


def rescaled_directory(step: str, partitions: int, batch: int) -> str:
    """The directory of a step's state re-split into ``partitions`` at ``batch``.

    >>> rescaled_directory("Sum/GroupByKey", 8, 12)
    'Sum_GroupByKey-3fca91a2-p8-b12'
    """
    return f"{step_directory_name(step)}-p{partitions}-b{batch}"


def rescale(context: Any, state: Any, partitions: int, batch: int) -> List[str]:
    """Re-split every keyed step of ``state`` (the loop's :class:`~runners.spark.streaming.
    micro_batch.StreamingState`, restored from a checkpoint) into ``partitions`` key
    partitions; returns the paths of the old layout's files, to delete once a checkpoint
    names the new one."""
    storage: DurableStorage = state.storage
    old_partitions = state.placement.partitions
    retired: List[str] = []
    started = time.monotonic()
    keys = 0
    for step in state.steps.values():
        base = storage.join(state.state_directory, step.directory)
        retired.extend(storage.join(base, partition_directory_name(partition),
                                    file_name(entry))
                       for partition, entry in step.chain_files())
        keys += step.keys
        _rescale_step(context, storage, state.state_directory, step, old_partitions,
                      partitions, batch)
    state.placement.release()
    state.placement.partitions = partitions
    state.residuals.parallelism = partitions
    context.parallelism = partitions
    millis = int((time.monotonic() - started) * 1000)
    context.metrics.add(pack([monitoring_infos.int64_user_distribution(
        METRICS_NAMESPACE, "rescale_millis", DistributionData(millis, 1, millis, millis),
        "loop")]))
    _LOGGER.info("streaming: re-split the state of %d keyed step(s) (%d keys) from %d into %d "
                 "key partitions in %.1f s", len(state.steps), keys, old_partitions, partitions,
                 time.monotonic() - started)
    return retired


def _rescale_step(context: Any, storage: DurableStorage, state_directory: str, step: Any,
                  old: int, new: int, batch: int) -> None:
    """Re-splits one keyed step's state and points ``step`` (the loop's
    :class:`~runners.spark.streaming.keyed_step.KeyedStep`, which this package does not
    import: the loop uses keyed state, not the reverse) at the new layout."""
    directory = rescaled_directory(step.name, new, batch)
    if not step.chains:  # nothing durable: the step never held state
        step.directory = directory
        step.executors = {}
        return
    old_base = storage.join(state_directory, step.directory)
    tasks = [OldPartition(step.name, partition, step.version, step.commits.get(partition, b""),
                          DurableState(storage, storage.join(old_base,
                                                             partition_directory_name(partition)),
                                       step.chains.get(partition, ())))
             for partition in range(old)]
    new_base = storage.join(state_directory, directory)
    backend = context.backend
    split = backend.source(tasks, len(tasks)).map_partitions(
        functools.partial(split_partitions, new)).partition_by(new).map_partitions(
        functools.partial(write_partitions, storage, new_base, step.version))
    with context.names.job(f"re-split the state of {step.name} into {new} key partitions",
                           [step.name]):
        written: List[RescaledPartition] = backend.collect(split)
    found = sum(report.keys for report in written)
    if found != step.keys:
        raise RuntimeError(f"re-splitting {step.name!r} gave {found} keys where its checkpoint "
                           f"holds {step.keys}; the checkpoint is kept as it was")
    step.directory = directory
    step.chains = {report.partition: (StateFile(*report.snapshot),) for report in written}
    step.commits = {report.partition: bytes.fromhex(StateFile(*report.snapshot).commit)
                    for report in written}
    step.partition_bytes = {report.partition: report.state_bytes for report in written}
    step.state_bytes = sum(report.state_bytes for report in written)
    step.executors = {}  # the new partitions are placed by their first tasks
    step.take_superseded()


def _scratch() -> str:
    return os.path.join(executor_local_directories()[0], f"beam-rescale-{uuid.uuid4().hex}")


def split_partitions(partitions: int, tasks: Iterable[OldPartition]) -> Iterator[
        Tuple[int, RescaleRows]]:
    """The map side: each old partition's rows, as chunks bound for their new partitions."""
    for task in tasks:
        scratch = _scratch()
        try:
            pending: Dict[int, List[Tuple[bytes, bytes]]] = {}
            sizes: Dict[int, int] = {}
            location = StoreLocation(scratch, task.step, task.partition)
            plan = VersionPlan(task.version, task.version, task.durable, task.commit)
            for key, row in durable_rows(location, plan):
                target = zlib.crc32(key) % partitions
                pending.setdefault(target, []).append((key, row))
                sizes[target] = sizes.get(target, 0) + len(key) + len(row)
                if sizes[target] >= CHUNK_BYTES:
                    yield target, RescaleRows(task.step, target,
                                              encode_delta(task.version, pending.pop(target)))
                    sizes[target] = 0
            for target, rows in pending.items():
                yield target, RescaleRows(task.step, target, encode_delta(task.version, rows))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def write_partitions(storage: DurableStorage, base: str, version: int,
                     chunks: Iterable[RescaleRows]) -> Iterator[RescaledPartition]:
    """The reduce side: a new partition's rows (a shuffle partition holds one key partition's
    chunks) streamed into a store, uploaded as its snapshot."""
    pending = iter(chunks)
    first = next(pending, None)
    if first is None:  # no key of the step hashes to this partition
        return
    scratch = _scratch()
    try:
        durable = DurableState(storage, storage.join(base,
                                                     partition_directory_name(first.partition)))
        snapshot, summary = write_store_snapshot(
            StoreLocation(scratch, first.step, first.partition),
            _rows(first, itertools.chain([first], pending)), version, durable)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    yield RescaledPartition(first.step, first.partition, tuple(snapshot), summary.keys,
                            summary.state_bytes)


def _rows(first: RescaleRows, chunks: Iterable[RescaleRows]) -> Iterator[Tuple[bytes, bytes]]:
    for chunk in chunks:
        if chunk.partition != first.partition:  # the shuffle gives a task one partition
            raise RuntimeError(f"a re-split task got rows of key partitions {first.partition} "
                               f"and {chunk.partition}")
        _, rows = decode_delta(chunk.rows, "a re-split chunk")
        for key, row in rows:
            if row is not None:
                yield key, row


def requested_rescale(checkpointed: int, requested: Optional[int]) -> Optional[int]:
    """The partitions to re-split into, when the driver was started with another
    ``--spark_parallelism`` than the checkpoint's (None: keep the checkpoint's).

    >>> requested_rescale(4, 8), requested_rescale(4, None), requested_rescale(4, 4)
    (8, None, None)
    """
    return requested if requested is not None and requested != checkpointed else None
