"""Snapshots of a key partition's store, written off the batch's critical path.

A snapshot (a compact copy of the whole store, which starts a new chain of state files:
:mod:`~runners.spark.state.changelog`) costs time in proportion to the partition's
state; written by the batch's task it stalled that batch (docs/contributing/benchmarks.md: 2.2 s at
780k keys against ~0.5 s for its neighbours). So the task that is due one commits and writes
its delta as every task does, then starts a thread in its Python worker that copies the
store *at that committed version* (an LMDB read transaction begun before the task returns
pins it, whatever later batches commit meanwhile), uploads the copy and leaves a note beside
the run's stores. The next task of the partition on that executor reports the note; the
driver then starts the partition's chain at the snapshot, keeping the deltas after it.

Until the note is reported nothing changes: a job that dies mid-snapshot (or a worker whose
thread is killed) keeps its chain of deltas; the object it wrote in part is named by no
chain (a restart's clean-up deletes it), and the copy it left on the executor is removed
when the partition's next snapshot starts. One snapshot per partition is in flight
at a time on an executor (a lock file, held by the thread, across the executor's Python
workers). A store is closed only after its snapshot thread ends (:func:`wait`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
from typing import Any, Callable, Dict, Optional

from runners.spark.state.changelog import DurableState, StateFile

_LOGGER = logging.getLogger(__name__)
#: The directory beside a run's stores that holds the snapshots' locks and notes.
_DIRECTORY = ".snapshots"
#: The snapshot thread's nice value (higher: less of a contended CPU).
_NICE = 10
_THREADS: Dict[str, threading.Thread] = {}
_LOCK = threading.Lock()


def _name(root: str, store: str) -> str:
    return os.path.relpath(store, root).replace(os.sep, "-")


def _paths(root: str, store: str) -> tuple:
    directory = os.path.join(root, _DIRECTORY)
    name = _name(root, store)
    return os.path.join(directory, name + ".lock"), os.path.join(directory, name + ".json")


def copy_directory(root: str, store: str) -> str:
    """A new directory for a compact copy of ``store``: named after it, so that a copy a
    killed worker left is found and removed (:func:`start`)."""
    return tempfile.mkdtemp(prefix=f".snapshot-{_name(root, store)}-", dir=root)


def start(root: str, store: str, environment: Any, txn: Any, durable: DurableState,
          version: int, commit: str, copy_store: Callable[[Any, str, Any], None]) -> bool:
    """Start writing a snapshot of ``store`` (under the run's ``root``) at the committed
    ``version``, which the read transaction ``txn`` pins; ``copy_store(environment,
    directory, txn)`` makes the compact copy. Returns False, with ``txn`` ended, when one
    is in flight for the store already or the snapshot cannot start (logged: the task has
    committed and written its delta, and the chain keeps it)."""
    lock = None
    try:
        lock_path, _ = _paths(root, store)
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        lock = open(lock_path, "a+b")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            txn.abort()
            return False
        # Copies that a worker killed mid-snapshot left (as large as the store).
        for name in os.listdir(root):
            if name.startswith(f".snapshot-{_name(root, store)}-"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        thread = threading.Thread(
            target=_write, args=(root, store, environment, txn, durable, version, commit,
                                 copy_store, lock),
            name=f"snapshot {store}@{version}", daemon=True)
        thread.start()
    except Exception:
        txn.abort()
        if lock is not None:
            lock.close()
        _LOGGER.warning("the snapshot of %s at version %d did not start; its chain keeps its "
                        "deltas", store, version, exc_info=True)
        return False
    with _LOCK:
        _THREADS[store] = thread
    return True


def _write(root: str, store: str, environment: Any, txn: Any, durable: DurableState,
           version: int, commit: str, copy_store: Callable[[Any, str, Any], None],
           lock: Any) -> None:
    _, note_path = _paths(root, store)
    copy = None
    try:
        # The batches come first: on a busy executor the copy takes the cores they leave
        # (a Linux thread is a task of its own, with its own nice value).
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
    except (AttributeError, OSError):
        pass
    try:
        copy = copy_directory(root, store)
        try:
            copy_store(environment, copy, txn)
        finally:
            txn.abort()
        written = durable.write_snapshot(version, os.path.join(copy, "data.mdb"), commit)
        temporary = note_path + ".incomplete"
        with open(temporary, "w", encoding="utf-8") as note:
            json.dump(list(written), note)
        os.replace(temporary, note_path)
    except Exception:  # the chain keeps its deltas; the next batch due one tries again
        _LOGGER.warning("the snapshot of %s at version %d was not written; its chain keeps "
                        "its deltas", store, version, exc_info=True)
    finally:
        if copy is not None:
            shutil.rmtree(copy, ignore_errors=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        with _LOCK:
            if _THREADS.get(store) is threading.current_thread():
                del _THREADS[store]


def finished(root: str, store: str) -> Optional[StateFile]:
    """The snapshot of ``store`` written since the last call (its note is taken), if any."""
    _, note_path = _paths(root, store)
    try:
        with open(note_path, encoding="utf-8") as note:
            written = StateFile(*json.load(note))
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.remove(note_path)
    except FileNotFoundError:  # another worker took it first
        return None
    return written


def wait(store: Optional[str] = None) -> None:
    """Wait for the snapshot threads of ``store`` (None: every store) of this process: a
    store's environment must not close under its copy."""
    with _LOCK:
        threads = [thread for path, thread in _THREADS.items()
                   if store is None or path == store]
    for thread in threads:
        thread.join()
