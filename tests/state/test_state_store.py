"""The streaming state store of one key partition (LMDB on the executor's disk), alone.

No Spark here: these tests drive :class:`PartitionState` as a keyed step's task does, and
check what a micro-batch relies on: only touched keys are read and written, a task that
fails leaves the previous version, a task run again after it committed rolls back first,
the state files every commit writes rebuild the same store elsewhere, and a store at an
unknown version is refused with a message that says what to do.
"""

from __future__ import annotations

import os
import threading

import pytest

from runners.spark.state import lmdb_environments, snapshots
from runners.spark.state import store as state_store
from runners.spark.state.changelog import (
    DurableState,
    StateFile,
    StateFileError,
    decode_delta,
    encode_delta,
    file_name,
)
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.store import (
    KeyState,
    PartitionState,
    StateLostError,
    StoreLocation,
    VersionPlan,
)


@pytest.fixture
def location(tmp_path):
    return StoreLocation(str(tmp_path / "root"), "Sum/GroupByKey", 3)


def contents(location, version, durable=None):
    """Every key's state (the keys due at a far watermark), and the summary, at ``version``,
    read by a task that leaves the store at its version."""
    with PartitionState.open(location, VersionPlan(version, version, durable)) as state:
        due = state.due(watermark=2**62, processing=2**62)
        found = {key: state.get(key) for key in sorted(due)}
    return found, state.summary


def test_a_task_reads_and_writes_only_the_keys_it_touches(location):
    with PartitionState.open(location, VersionPlan(0, 1)) as state:
        for number in range(100):
            state.put(b"key-%03d" % number, KeyState(b"x" * number, wake_event=number * 10,
                                                    hold=1000 + number))
    with PartitionState.open(location, VersionPlan(1, 2)) as state:
        assert state.due(watermark=25, processing=0) == {b"key-000", b"key-001", b"key-002"}
        state.put(b"key-001", KeyState(b"new", wake_event=500, hold=5))
        state.delete(b"key-002")
        assert state.touched == 2
    summary = state.summary
    assert summary.keys == 99
    assert summary.state_bytes == sum(range(100)) - 1 - 2 + 3
    assert summary.hold == 5  # the earliest hold
    assert summary.next_event_wake == 0  # key-000's wake is still due
    with PartitionState.open(location, VersionPlan(2, 3)) as state:
        assert state.get(b"key-002") is None
        assert state.get(b"key-001") == KeyState(b"new", 500, None, 5)
        assert state.due(watermark=25, processing=0) == {b"key-000"}


def test_a_failed_task_leaves_the_previous_version(location):
    with PartitionState.open(location, VersionPlan(0, 1)) as state:
        state.put(b"a", KeyState(b"1", wake_event=10))
    with pytest.raises(RuntimeError, match="the user's DoFn failed"):
        with PartitionState.open(location, VersionPlan(1, 2)) as state:
            state.put(b"a", KeyState(b"2"))
            state.put(b"b", KeyState(b"3"))
            raise RuntimeError("the user's DoFn failed")
    # Spark runs the task again: it finds version 1, untouched.
    with PartitionState.open(location, VersionPlan(1, 2)) as state:
        assert state.get(b"a") == KeyState(b"1", wake_event=10)
        assert state.get(b"b") is None
    assert state.summary.keys == 1


def test_a_task_run_again_after_its_commit_rolls_back_first(location):
    with PartitionState.open(location, VersionPlan(0, 1)) as state:
        state.put(b"kept", KeyState(b"v1", wake_event=10, hold=10))
        state.put(b"changed", KeyState(b"v1", wake_event=20, hold=20))
        state.put(b"deleted", KeyState(b"v1", wake_event=30))
    with PartitionState.open(location, VersionPlan(1, 2)) as state:
        state.put(b"changed", KeyState(b"v2", wake_event=200, hold=1))
        state.delete(b"deleted")
        state.put(b"added", KeyState(b"v2", wake_event=5))
        state.put(b"added", KeyState(b"v2 again", wake_event=6))  # twice in one version
    # Version 2's output was lost; Spark runs its task again, which must see version 1.
    with PartitionState.open(location, VersionPlan(1, 2)) as state:
        assert state.get(b"changed") == KeyState(b"v1", 20, None, 20)
        assert state.get(b"deleted") == KeyState(b"v1", 30)
        assert state.get(b"added") is None
        assert state.due(watermark=25, processing=0) == {b"kept", b"changed"}
    summary = state.summary
    assert (summary.keys, summary.state_bytes, summary.hold) == (3, 6, 10)


def test_a_store_at_an_unknown_version_is_refused_without_a_checkpoint(location):
    with PartitionState.open(location, VersionPlan(0, 4)):
        pass
    with pytest.raises(StateLostError) as error:
        PartitionState.open(location, VersionPlan(7, 8))
    message = str(error.value)
    assert "'Sum/GroupByKey', key partition 3, at version 7" in message
    assert "found version 4" in message and "--checkpoint_dir" in message


def durable_state(tmp_path, chain=(), snapshot=False, snapshot_now=False):
    storage = DurableStorage.open(str(tmp_path / "checkpoint"))
    return DurableState(storage, storage.join("Sum", "00003"), tuple(chain), snapshot,
                        snapshot_now)


def test_every_commit_writes_its_changes_and_they_rebuild_the_store_elsewhere(tmp_path,
                                                                               location):
    durable = durable_state(tmp_path)
    # Version 1: three keys, written as a delta of version 1.
    with PartitionState.open(location, VersionPlan(0, 1, durable)) as state:
        for key in (b"a", b"b", b"c"):
            state.put(key, KeyState(key * 3, wake_event=ord(key), hold=ord(key)))
    first = state.written
    assert first == StateFile("delta", 1, first.size, state.commit.hex(),
                              first.checksum) and not state.loaded
    assert len(first.checksum) == 8
    durable = durable_state(tmp_path, [first])
    # Version 2: b changes, c goes.
    with PartitionState.open(location, VersionPlan(1, 2, durable)) as state:
        state.put(b"b", KeyState(b"B", wake_processing=7))
        state.delete(b"c")
        state.delete(b"never-there")  # nothing to write for it
    second = state.written
    # Version 3 changes nothing: no file.
    with PartitionState.open(location, VersionPlan(2, 3, durable_state(tmp_path))) as state:
        pass
    assert state.written is None
    partition = durable.directory
    assert sorted(os.listdir(partition)) == [file_name(first), file_name(second)]
    with open(os.path.join(partition, file_name(second)), "rb") as file:
        version, rows = decode_delta(file.read())
    assert version == 2 and sorted(key for key, _ in rows) == [b"b", b"c"]
    assert dict(rows)[b"c"] is None  # a deleted key
    chain = [first, second]
    expected = contents(location, 3)

    # Another executor (another root) has no store: its task rebuilds version 3.
    elsewhere = StoreLocation(str(tmp_path / "other-root"), location.step, location.partition)
    with PartitionState.open(elsewhere, VersionPlan(3, 4, durable_state(tmp_path, chain))) as state:
        assert state.loaded
        assert state.get(b"c") is None
        assert state.get(b"b") == KeyState(b"B", wake_processing=7)
        state.put(b"e", KeyState(b"e"))
    found, summary = contents(elsewhere, 4)
    assert found == expected[0]  # b"e" has no wake: not among the due keys
    assert summary.keys == expected[1].keys + 1


def test_a_snapshot_then_deltas_rebuild_the_same_store(tmp_path, location):
    with PartitionState.open(location, VersionPlan(0, 1)) as state:
        for number in range(1000):
            state.put(b"%05d" % number, KeyState(b"s" * 20, wake_event=number, hold=number))
    with PartitionState.open(location, VersionPlan(1, 2, durable_state(
            tmp_path, snapshot_now=True))) as state:
        state.put(b"00001", KeyState(b"changed", wake_event=1, hold=1))
    snapshot = state.written
    assert snapshot.kind == "snapshot" and snapshot.version == 2 and snapshot.size > 20_000
    with PartitionState.open(location, VersionPlan(2, 3, durable_state(tmp_path,
                                                                      [snapshot]))) as state:
        state.delete(b"00000")
        state.put(b"01000", KeyState(b"new", wake_event=5))
    chain = [snapshot, state.written]
    expected = contents(location, 3)
    elsewhere = StoreLocation(str(tmp_path / "other-root"), location.step, location.partition)
    assert contents(elsewhere, 3, durable_state(tmp_path, chain)) == expected
    assert expected[1].keys == 1000


def test_a_snapshot_due_is_written_in_the_background_at_the_committed_version(tmp_path,
                                                                              location):
    """The task due a snapshot writes its delta and returns; the snapshot, of the version it
    committed (whatever commits meanwhile), is reported by a later task of the partition and
    rebuilds the store with the deltas after it."""
    release = threading.Event()

    def slow_copy(environment, directory, txn=None):
        release.wait(30)  # version 3 commits while the copy waits
        environment.copy(directory, compact=True, txn=txn)

    with PartitionState.open(location, VersionPlan(0, 1, durable_state(tmp_path))) as state:
        for number in range(1000):
            state.put(b"%05d" % number, KeyState(b"s" * 20, wake_event=number))
    chain = [state.written]
    plan = VersionPlan(1, 2, durable_state(tmp_path, chain, snapshot=True))
    original = lmdb_environments.copy_store
    lmdb_environments.copy_store = slow_copy
    try:
        with PartitionState.open(location, plan) as state:
            state.put(b"00001", KeyState(b"at-2"))
    finally:
        lmdb_environments.copy_store = original
    assert state.written.kind == "delta" and state.snapshot is None
    chain.append(state.written)
    with PartitionState.open(location, VersionPlan(2, 3, durable_state(tmp_path, chain))) as state:
        state.put(b"00001", KeyState(b"at-3"))
    assert state.snapshot is None  # still copying
    chain.append(state.written)
    release.set()
    snapshots.wait()
    with PartitionState.open(location, VersionPlan(3, 4, durable_state(tmp_path, chain))) as state:
        pass
    snapshot = state.snapshot
    assert snapshot.kind == "snapshot" and snapshot.version == 2 and len(snapshot.checksum) == 8
    assert snapshot.commit == chain[1].commit
    # The snapshot holds version 2 (b"at-2"); with the delta of version 3 it rebuilds 3.
    elsewhere = StoreLocation(str(tmp_path / "other-root"), location.step, location.partition)
    with PartitionState.open(elsewhere, VersionPlan(2, 3, durable_state(
            tmp_path, [snapshot]), bytes.fromhex(snapshot.commit))) as state:
        assert state.loaded and state.get(b"00001").blob == b"at-2"
    state_store.close_all()
    again = StoreLocation(str(tmp_path / "third-root"), location.step, location.partition)
    with PartitionState.open(again, VersionPlan(3, 4, durable_state(
            tmp_path, [snapshot, chain[2]]))) as state:
        assert state.loaded and state.get(b"00001").blob == b"at-3"
        assert state.get(b"00999").blob == b"s" * 20


def test_one_snapshot_of_a_partition_is_in_flight_at_a_time(tmp_path, location):
    release = threading.Event()
    calls = []

    def slow_copy(environment, directory, txn=None):
        calls.append(directory)
        release.wait(30)
        environment.copy(directory, compact=True, txn=txn)

    chain = []
    original = lmdb_environments.copy_store
    lmdb_environments.copy_store = slow_copy
    try:
        for version in (1, 2, 3):
            with PartitionState.open(location, VersionPlan(version - 1, version, durable_state(
                    tmp_path, chain, snapshot=True))) as state:
                state.put(b"key", KeyState(b"%d" % version))
            chain.append(state.written)
    finally:
        lmdb_environments.copy_store = original
        release.set()
        snapshots.wait()
    assert len(calls) == 1


def test_a_damaged_delta_is_refused_by_name():
    with pytest.raises(StateFileError, match="not a state delta"):
        decode_delta(b"garbage", "delta-1.bin")
    with pytest.raises(StateFileError, match="truncated"):
        decode_delta(encode_delta(1, [(b"key", b"a row of state")])[:-2], "delta-1.bin")


def test_the_memory_map_grows_with_the_store(location, monkeypatch):
    monkeypatch.setattr(lmdb_environments, "INITIAL_MAP_BYTES", 1 << 20)
    blob = b"x" * 2000
    for version in range(1, 9):  # ~1 MB a batch, from the first: the map grows as it fills
        with PartitionState.open(location, VersionPlan(version - 1, version)) as state:
            for number in range(500):
                state.put(b"%d-%d" % (version, number), KeyState(blob))
    environment, _ = lmdb_environments.open_environment(location.path())
    assert environment.info()["map_size"] > 8 << 20
    with PartitionState.open(location, VersionPlan(8, 9)) as state:
        pass
    assert state.summary.keys == 4000


def test_a_store_at_the_right_version_but_another_commit_is_rebuilt(tmp_path, location):
    """Two attempts of a task on two executors both commit version 2; the driver kept the
    other one's report: this store's version 2 is not the accepted one."""
    chain = []
    with PartitionState.open(location, VersionPlan(0, 1, durable_state(tmp_path))) as state:
        state.put(b"a", KeyState(b"first", wake_event=1))
    chain.append(state.written)
    elsewhere = StoreLocation(str(tmp_path / "other-root"), location.step, location.partition)
    with PartitionState.open(elsewhere, VersionPlan(1, 2, durable_state(tmp_path, chain),
                                                    state.commit)) as accepted:
        accepted.put(b"a", KeyState(b"accepted", wake_event=1))
    with PartitionState.open(location, VersionPlan(1, 2, durable_state(tmp_path, chain),
                                                   state.commit)) as discarded:
        discarded.put(b"a", KeyState(b"discarded", wake_event=1))
    assert accepted.commit != discarded.commit
    assert accepted.written != discarded.written  # each attempt wrote a file of its own
    chain.append(accepted.written)
    with PartitionState.open(location, VersionPlan(2, 3, durable_state(tmp_path, chain),
                                                   accepted.commit)) as state:
        assert state.loaded  # rebuilt: same version, other commit
        assert state.get(b"a").blob == b"accepted"
    with pytest.raises(StateLostError, match="or another commit of it"):
        PartitionState.open(elsewhere, VersionPlan(2, 3, None, b"not-its-commit"))


def test_a_rebuild_that_fails_leaves_no_store(tmp_path, location):
    with PartitionState.open(location, VersionPlan(0, 1, durable_state(
            tmp_path, snapshot_now=True))) as state:
        state.put(b"a", KeyState(b"x" * 100))
    snapshot = state.written
    missing = state_files_snapshot_missing(snapshot)
    elsewhere = StoreLocation(str(tmp_path / "other-root"), location.step, location.partition)
    with pytest.raises(Exception):
        PartitionState.open(elsewhere, VersionPlan(1, 2, durable_state(tmp_path, [missing])))
    assert not os.path.exists(elsewhere.path())
    with PartitionState.open(elsewhere, VersionPlan(1, 2, durable_state(tmp_path,
                                                                       [snapshot]))) as state:
        assert state.get(b"a").blob == b"x" * 100


def state_files_snapshot_missing(snapshot):
    return StateFile("snapshot", snapshot.version + 1000, snapshot.size)


def test_a_handle_on_a_store_another_worker_rebuilt_is_not_reused(tmp_path, location):
    """Python workers of one executor share its stores; one that rebuilt a store (a new
    file at the same path) leaves the others' cached handles on the old file."""
    import subprocess
    import sys

    with PartitionState.open(location, VersionPlan(0, 1)) as state:
        state.put(b"a", KeyState(b"old"))
    other_worker = (
        "import shutil, sys\n"
        "from runners.spark.state.store import *\n"
        f"location = StoreLocation({location.root!r}, {location.step!r}, {location.partition})\n"
        "shutil.rmtree(location.path())\n"
        "with PartitionState.open(location, VersionPlan(0, 1)) as state:\n"
        "    state.put(b'a', KeyState(b'new'))\n")
    subprocess.run([sys.executable, "-c", other_worker], check=True, timeout=60)
    with PartitionState.open(location, VersionPlan(1, 2)) as state:
        assert state.get(b"a").blob == b"new"
