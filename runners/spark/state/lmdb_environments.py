"""The LMDB environments of a Python worker's stores: opened once, cached, grown, and
given their disk space before they write.

A key partition's store (:mod:`~runners.spark.state.store`) is an LMDB
environment. Opening one costs a memory map and its databases, so each Python worker keeps
its stores open between tasks (least recently used ones closed past
:data:`_ENVIRONMENT_LIMIT`), and reopens one only when another worker of the executor has
rebuilt it (a new file at the path). Its memory map doubles while more than half used, and
its disk space is reserved before a transaction writes (:func:`reserve`), so that a full
disk is an error that says so.

>>> import tempfile
>>> path = tempfile.mkdtemp()
>>> environment, databases = open_environment(path)
>>> sorted(databases)
['event_wakes', 'holds', 'meta', 'processing_wakes', 'rows', 'undo']
>>> reserve(environment, path, keys=10, data_bytes=1000)
>>> used_bytes(environment) <= os.stat(os.path.join(path, "data.mdb")).st_blocks * 512
True
>>> forget(path)
"""

from __future__ import annotations

import collections
import errno
import os
from typing import Any, Dict, NamedTuple, Optional, Tuple

import lmdb

from runners.spark.state import snapshots
from runners.spark.state.storage.faults import full_disk

DATABASES = ("rows", "event_wakes", "processing_wakes", "holds", "undo", "meta")
#: A store's memory map starts at this size and doubles when half used.
INITIAL_MAP_BYTES = 1 << 30
#: Disk space is reserved for a store in steps of this many bytes (see :func:`reserve`).
_RESERVE_STEP = 8 << 20
#: Open environments per Python worker process (least recently used ones are closed).
_ENVIRONMENT_LIMIT = 64


class _OpenStore(NamedTuple):
    environment: Any
    databases: Dict[str, Any]
    identity: Tuple[int, int]  # (device, inode) of its data file, as opened


_ENVIRONMENTS: "collections.OrderedDict[str, _OpenStore]" = collections.OrderedDict()


def _identity(path: str) -> Optional[Tuple[int, int]]:
    try:
        stat = os.stat(os.path.join(path, "data.mdb"))
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def open_environment(path: str) -> Tuple[Any, Dict[str, Any]]:
    """The open LMDB environment at ``path`` and its databases (created if missing).

    A handle is reused only while it is on the file now at ``path``: another Python
    worker of the executor may have rebuilt the store (a new file) since this one opened
    it."""
    cached = _ENVIRONMENTS.pop(path, None)
    if cached is None or cached.identity != _identity(path):
        if cached is not None:
            snapshots.wait(path)
            cached.environment.close()
        # Stores of runs that ended (their directories removed) are closed: their memory
        # maps would keep the deleted files' disk space.
        for stale in [other for other in _ENVIRONMENTS if not os.path.isdir(other)]:
            forget(stale)
        os.makedirs(path, exist_ok=True)
        # writemap: measured flat write cost as the store grows (without it, random keys
        # cost 4x more at 1M keys); sync off: a batch's durability is the state files' job.
        environment = lmdb.open(path, map_size=INITIAL_MAP_BYTES, max_dbs=len(DATABASES),
                                sync=False, metasync=False, writemap=True, readahead=False,
                                meminit=False)
        reserve(environment, path, keys=0, data_bytes=0)  # the databases' own pages
        with environment.begin(write=True) as txn:
            databases = {name: environment.open_db(name.encode(), txn=txn)
                         for name in DATABASES}
        cached = _OpenStore(environment, databases, _identity(path))
    _ENVIRONMENTS[path] = cached
    # A reader slot of a worker that ended mid-snapshot (its copy's read transaction open)
    # would keep every page freed since from reuse: the store would grow at every commit.
    cached.environment.reader_check()
    while len(_ENVIRONMENTS) > _ENVIRONMENT_LIMIT:
        stale_path, stale = _ENVIRONMENTS.popitem(last=False)
        snapshots.wait(stale_path)
        stale.environment.close()
    return cached.environment, cached.databases


def forget(path: str) -> None:
    snapshots.wait(path)
    cached = _ENVIRONMENTS.pop(path, None)
    if cached is not None:
        cached.environment.close()


def ensure_room(environment: Any, path: str) -> None:
    """Double the memory map while more than half of it is used."""
    info, stat = environment.info(), environment.stat()
    used = (info["last_pgno"] + 1) * stat["psize"]
    size = info["map_size"]
    while used * 2 > size:
        size *= 2
    if size != info["map_size"]:
        set_map_size(environment, path, size)


def set_map_size(environment: Any, path: str, size: int) -> None:
    """Resize the memory map. No transaction may be open in this process: stores are used
    one task at a time, and a snapshot copying in the background (its read transaction
    open) is waited for."""
    snapshots.wait(path)
    environment.set_mapsize(size)


def reserve(environment: Any, path: str, keys: int, data_bytes: int) -> None:
    """Allocate disk space for a write transaction of ``keys`` keys and ``data_bytes`` bytes
    (the keys, and the rows written and replaced) before it runs.

    A store is written through its memory map (``writemap``) into a sparse file: on a full
    disk the page fault that needs a new block kills the Python worker with SIGBUS, an
    error nobody can read. So the data file's blocks are allocated ahead
    (``posix_fallocate``, which fails cleanly with ENOSPC), for the worst case of the
    transaction: every page it touches copied (8 a key: its row, its undo record and its
    index entries, each on a page of its own; never more than the pages in use) and its
    data written four times over (rows, undo records, index entries, half-full pages after
    splits). Another worker of the executor may have reopened the file since (LMDB truncates
    it to its map when it opens), so the allocation is asked for every time, not
    remembered."""
    info, stat = environment.info(), environment.stat()
    page = stat["psize"]
    used = (info["last_pgno"] + 1) * page
    needed = used + min(keys * 8 * page, used) + 4 * data_bytes + (4 << 20)
    # Within the map: LMDB writes no page beyond it (a fuller map grows first).
    needed = min(-(-needed // _RESERVE_STEP) * _RESERVE_STEP, info["map_size"])
    data_file = os.path.join(path, "data.mdb")
    descriptor = os.open(data_file, os.O_RDWR)
    try:
        os.posix_fallocate(descriptor, 0, needed)  # ~10 us where the blocks are there
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # a filesystem without it
            return
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        allocated = os.fstat(descriptor).st_blocks * 512
        raise full_disk(f"writing the state store {path} (an executor local directory: "
                        "spark.local.dir, or the directories YARN or Kubernetes give it)",
                        path, max(needed - allocated, 0)) from error
    finally:
        os.close(descriptor)


def copy_store(environment: Any, directory: str, txn: Any = None) -> None:
    """A compact copy of the store (at ``txn``'s version; None: the latest) in
    ``directory``; a full disk says so."""
    try:
        environment.copy(directory, compact=True, txn=txn)
    except lmdb.Error as error:
        if "No space left" not in str(error) and "Disk quota" not in str(error):
            raise
        raise full_disk("copying a state store for a snapshot", directory,
                        used_bytes(environment)) from error


def used_bytes(environment: Any) -> int:
    return (environment.info()["last_pgno"] + 1) * environment.stat()["psize"]


def close_all() -> None:
    """Close every store this process has open (tests; a worker that is done)."""
    snapshots.wait()
    while _ENVIRONMENTS:
        _, cached = _ENVIRONMENTS.popitem()
        cached.environment.close()


def forget_under(root: str) -> None:
    """Close every store this process has open under ``root`` (a run's state directory,
    about to be removed)."""
    for path in [path for path in _ENVIRONMENTS if path.startswith(root + os.sep)]:
        forget(path)
