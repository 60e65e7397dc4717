"""Storage that misbehaves under a streaming job: corrupt state files, an object store that
throttles, fails and resets, permanent errors, and full disks (runners/spark/state/:
storage/faults.py, changelog.py, store.py).

Every fault is real: bytes flipped in files the job wrote, an S3 server on loopback behind a
fault-injecting proxy (tests/s3_fault_proxy.py), and tmpfs mounts that fill. The job is the
checkpoint tests' (a windowed sum and a running count over 9 TestStream batches); every run
with a fault, and its restart, must end with the panes of an uninterrupted run.
"""

from __future__ import annotations

import os
import subprocess
import time

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from test_spark_streaming_checkpoint import build, read_panes, streaming_options

from runners.spark import SparkRunner
from runners.spark.state.changelog import (
    CorruptStateFileError,
    DurableState,
    StateFile,
    decode_delta,
    file_name,
)
from runners.spark.state.checkpoint import latest_checkpoint, read_manifest
from runners.spark.state.storage.faults import StorageFullError, classify
from runners.spark.state.storage.filesystems import DurableStorage, StorageError
from runners.spark.state.store import (
    KeyState,
    PartitionState,
    StoreLocation,
    VersionPlan,
    close_all,
    step_directory_name,
)

from cluster_fixtures import s3_bucket, s3_server  # noqa: F401 (fixtures)
from s3_fault_proxy import S3FaultProxy
from spark_fixtures import spark_session  # noqa: F401 (fixture)


def run_job(spark_session, panes_dir, **options):
    """Run the checkpoint tests' job; returns its result."""
    os.makedirs(panes_dir, exist_ok=True)
    pipeline = beam.Pipeline(runner=SparkRunner(spark_session),
                             options=streaming_options(**options))
    build(pipeline, str(panes_dir))
    result = pipeline.run()
    result.wait_until_finish()
    return result


def distinct_panes(directory) -> set:
    """The panes written (a restart emits the batches after its checkpoint again)."""
    return {pane for pane, _ in read_panes(str(directory))}


@pytest.fixture(scope="module")
def uninterrupted_panes(spark_session, tmp_path_factory):
    directory = tmp_path_factory.mktemp("uninterrupted")
    run_job(spark_session, directory)
    panes = distinct_panes(directory)
    assert len(panes) > 10
    return panes


def counter(result, name: str) -> int:
    found = result.metrics().query(
        MetricsFilter().with_namespace("spark_streaming").with_name(name))["counters"]
    return sum(entry.committed for entry in found)


# ----- corrupt state files
def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x01]))


def durable(root, chain=(), snapshot_now=False) -> DurableState:
    storage = DurableStorage.open(str(root))
    return DurableState(storage, storage.join("Sum", "00003"), tuple(chain),
                        snapshot_now=snapshot_now)


def test_a_snapshot_with_a_flipped_byte_is_refused_naming_the_file_step_and_partition(tmp_path):
    location = StoreLocation(str(tmp_path / "executor-1"), "Sum/GroupByKey", 3)
    with PartitionState.open(location, VersionPlan(0, 1)) as state:
        for number in range(2000):
            state.put(b"%05d" % number, KeyState(b"s" * 40, wake_event=number))
    with PartitionState.open(location, VersionPlan(1, 2, durable(tmp_path / "ck",
                                                                 snapshot_now=True))) as state:
        state.put(b"00001", KeyState(b"changed"))
    snapshot = state.written
    with PartitionState.open(location, VersionPlan(2, 3, durable(tmp_path / "ck",
                                                                 [snapshot]))) as state:
        state.put(b"00002", KeyState(b"later"))
    chain = [snapshot, state.written]
    path = durable(tmp_path / "ck").path(snapshot)
    flip_byte(path, snapshot.size // 2)  # inside the B+tree's pages: LMDB would open it
    elsewhere = StoreLocation(str(tmp_path / "executor-2"), location.step, location.partition)
    with pytest.raises(CorruptStateFileError) as error:
        PartitionState.open(elsewhere, VersionPlan(3, 4, durable(tmp_path / "ck", chain)))
    message = str(error.value)
    assert path in message and "fails its checksum" in message
    assert "'Sum/GroupByKey', key partition 3, at version 3" in message
    assert "first file of the partition's chain" in message
    assert "--checkpoint_dir" in message
    assert not os.path.exists(elsewhere.path())  # no half-built store is left to pass for one
    close_all()


def test_a_delta_with_a_flipped_byte_in_a_number_is_refused_where_it_would_load(tmp_path):
    location = StoreLocation(str(tmp_path / "executor-1"), "Count", 3)
    chain = []
    for version in (1, 2):
        with PartitionState.open(location, VersionPlan(version - 1, version,
                                                       durable(tmp_path / "ck", chain))) as state:
            state.put(b"key", KeyState(b"%08d" % (version * 1234)))
        chain.append(state.written)
    path = durable(tmp_path / "ck").path(chain[1])
    flip_byte(path, chain[1].size - 2)  # a digit of the last row's blob: lengths intact
    with open(path, "rb") as file:
        assert decode_delta(file.read())[0] == 2  # without a checksum it would load
    elsewhere = StoreLocation(str(tmp_path / "executor-2"), location.step, location.partition)
    with pytest.raises(CorruptStateFileError) as error:
        PartitionState.open(elsewhere, VersionPlan(2, 3, durable(tmp_path / "ck", chain)))
    message = str(error.value)
    assert path in message and "'Count', key partition 3, at version 2" in message
    assert f"({file_name(chain[0])}) passed their checks and rebuild version 1" in message
    close_all()


def test_a_job_resumed_on_a_corrupt_delta_stops_naming_it(spark_session, tmp_path):
    checkpoint_dir = tmp_path / "checkpoints"
    run_job(spark_session, tmp_path / "run-1", checkpoint_dir=str(checkpoint_dir), max_batches=5)
    manifest = read_manifest(latest_checkpoint(str(checkpoint_dir)))
    step = "Sum/GroupByKey"
    chains = manifest["state_files"][step]
    partition, chain = max(chains.items(), key=lambda item: len(item[1]))
    last = StateFile(*chain[-1])
    path = (checkpoint_dir / "state" / step_directory_name(step) / f"{int(partition):05d}"
            / file_name(last))
    flip_byte(str(path), last.size - 2)
    with pytest.raises(Exception) as error:
        run_job(spark_session, tmp_path / "run-2", checkpoint_dir=str(checkpoint_dir))
    message = str(error.value)
    assert "fails its checksum" in message and str(path) in message
    assert f"key partition {int(partition)}" in message


# ----- an object store that fails
def s3_options(bucket, endpoint: str) -> dict:
    options = dict(option.lstrip("-").split("=", 1) for option in bucket.options)
    options["s3_endpoint_url"] = endpoint
    return options


def test_transient_object_store_errors_are_retried_counted_and_lose_nothing(
        spark_session, s3_bucket, tmp_path, uninterrupted_panes):
    with S3FaultProxy(s3_bucket.endpoint) as proxy:
        proxy.set_faults(every_nth_put_503=5, reset_puts=1, internal_errors=1)
        result = run_job(spark_session, tmp_path / "panes",
                         checkpoint_dir=f"s3://{s3_bucket.name}/checkpoints",
                         storage_retry_seconds=60, **s3_options(s3_bucket, proxy.endpoint))
        injected = dict(proxy.injected)
    assert injected["503"] >= 3 and injected["reset"] == 1 and injected["500"] == 1
    assert distinct_panes(tmp_path / "panes") == uninterrupted_panes
    # Each fault cost one attempt, retried and counted once.
    assert counter(result, "storage_retries") == sum(injected.values())


def test_a_missing_bucket_fails_at_once_naming_the_setting(spark_session, s3_bucket, tmp_path):
    with pytest.raises(StorageError) as error:
        run_job(spark_session, tmp_path / "panes",
                checkpoint_dir=f"s3://{s3_bucket.name}-missing/checkpoints",
                **s3_options(s3_bucket, s3_bucket.endpoint))
    assert "--checkpoint_dir" in str(error.value) and "NoSuchBucket" in str(error.value)
    assert os.listdir(tmp_path / "panes") == []


def test_bad_credentials_fail_at_once_naming_the_settings(spark_session, s3_bucket, tmp_path):
    with S3FaultProxy(s3_bucket.endpoint) as proxy:
        proxy.fail_all_with(403, "InvalidAccessKeyId")
        with pytest.raises(StorageError) as error:
            run_job(spark_session, tmp_path / "panes",
                    checkpoint_dir=f"s3://{s3_bucket.name}/checkpoints",
                    **s3_options(s3_bucket, proxy.endpoint))
        requests = sum(proxy.requests.values())
    message = str(error.value)
    assert "InvalidAccessKeyId" in message and "--s3_access_key_id" in message
    assert requests == 1  # no retry of a permanent error


def test_errors_are_sorted_by_what_the_storage_raised():
    from botocore.exceptions import ClientError, ConnectionClosedError, SSLError

    def client_error(code, status):
        return ClientError({"Error": {"Code": code, "Message": code},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")

    assert classify(client_error("SlowDown", 503)).kind == "transient"
    assert classify(client_error("InternalError", 500)).kind == "transient"
    assert classify(ConnectionClosedError(endpoint_url="http://x")).kind == "transient"
    assert classify(SSLError(endpoint_url="https://x", error="EOF")).kind == "transient"
    assert classify(client_error("AccessDenied", 403)).kind == "refused"
    assert classify(client_error("NoSuchBucket", 404)).kind == "refused"
    assert classify(ValueError("a bug")).kind == "permanent"


# ----- full disks
@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 64 MiB mounted for the test (and unmounted after it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root (CAP_SYS_ADMIN); this process (uid "
                    f"{os.getuid()}) could not: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        close_all()
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory, leave: int) -> str:
    """A file that leaves ``leave`` bytes free on the filesystem of ``directory``."""
    stat = os.statvfs(directory)
    path = os.path.join(directory, "filler")
    with open(path, "wb") as file:
        file.truncate(0)
    free = stat.f_bavail * stat.f_frsize
    with open(path, "wb") as file:
        os.posix_fallocate(file.fileno(), 0, max(free - leave, 0))
    return path


def test_a_full_executor_disk_is_an_error_that_says_so_and_space_freed_resumes(small_disk,
                                                                              tmp_path):
    location = StoreLocation(str(small_disk / "executor"), "Sum/GroupByKey", 0)
    checkpoint = tmp_path / "ck"
    with PartitionState.open(location, VersionPlan(0, 1, durable(checkpoint))) as state:
        state.put(b"first", KeyState(b"x" * 100))
    chain = [state.written]
    filler = fill(small_disk, leave=1 << 20)
    # The batch writes ~6 MB of state: without the space reserved first, LMDB's writes
    # through its memory map would kill the process with SIGBUS.
    with pytest.raises(StorageFullError) as error:
        with PartitionState.open(location, VersionPlan(1, 2, durable(checkpoint, chain))) as state:
            for number in range(6000):
                state.put(b"%06d" % number, KeyState(b"v" * 1000))
    message = str(error.value)
    assert location.path() in message and "bytes needed" in message and "bytes free" in message
    os.remove(filler)
    close_all()
    # The failed batch left nothing: version 1 is rebuilt (or found) and the batch runs again.
    with PartitionState.open(location, VersionPlan(1, 2, durable(checkpoint, chain))) as state:
        assert state.get(b"first") == KeyState(b"x" * 100)
        for number in range(6000):
            state.put(b"%06d" % number, KeyState(b"v" * 1000))
    assert state.summary.keys == 6001


def test_a_full_checkpoint_location_fails_the_batch_and_a_restart_loses_nothing(
        spark_session, small_disk, tmp_path, uninterrupted_panes):
    checkpoint_dir = small_disk / "checkpoints"
    filler = fill(small_disk, leave=40 << 10)  # the job writes ~92 KiB of 4 KiB pages
    with pytest.raises(Exception) as error:
        run_job(spark_session, tmp_path / "run-1", checkpoint_dir=str(checkpoint_dir))
    message = str(error.value)
    assert "no space left on the device" in message and str(checkpoint_dir) in message
    assert "bytes needed" in message
    left = [name for _, _, names in os.walk(checkpoint_dir) for name in names
            if name.startswith(".incomplete-")]
    assert left == []  # nothing written in part stays behind
    os.remove(filler)
    run_job(spark_session, tmp_path / "run-2", checkpoint_dir=str(checkpoint_dir))
    assert (distinct_panes(tmp_path / "run-1") | distinct_panes(tmp_path / "run-2")
            == uninterrupted_panes)


def test_retries_stop_at_the_budget_with_an_error_naming_the_setting(s3_bucket):
    storage = DurableStorage.open(f"s3://{s3_bucket.name}/ck",
                                  PipelineOptions(s3_bucket.options), retry_seconds=1.0)
    with S3FaultProxy(s3_bucket.endpoint) as proxy:
        proxy.fail_all_with(503, "SlowDown")
        slow = DurableStorage(storage.root, tuple(
            (name, proxy.endpoint if name == "s3_endpoint_url" else value)
            for name, value in storage.options), retry_seconds=1.0)
        started = time.monotonic()
        with pytest.raises(Exception) as error:
            slow.write(slow.join("state", "x.bin"), b"rows")
        elapsed = time.monotonic() - started
        attempts = proxy.requests.get("PUT", 0)
    assert "--storage_retry_seconds=1" in str(error.value) and "SlowDown" in str(error.value)
    assert attempts >= 2 and elapsed < 15


# ----- a process killed mid-snapshot
_MID_SNAPSHOT = """
import os, sys, threading
from runners.spark.state import lmdb_environments
from runners.spark.state.changelog import DurableState
from runners.spark.state.store import KeyState, PartitionState, StoreLocation, VersionPlan
from runners.spark.state.storage.filesystems import DurableStorage

root, checkpoint, marker = sys.argv[1:4]
storage = DurableStorage.open(checkpoint)
durable = DurableState(storage, storage.join("Sum", "00003"), (), snapshot=True)
original = lmdb_environments.copy_store

def copy_then_hang(environment, directory, txn=None):
    original(environment, directory, txn)  # the copy is made; its upload never ends
    open(marker, "w").close()
    threading.Event().wait()

lmdb_environments.copy_store = copy_then_hang
location = StoreLocation(root, "Sum/GroupByKey", 3)
with PartitionState.open(location, VersionPlan(0, 1, durable)) as state:
    for number in range(3000):
        state.put(b"%05d" % number, KeyState(b"v" * 50))
print(repr(tuple(state.written)), flush=True)
threading.Event().wait()
"""


def test_a_worker_killed_mid_snapshot_leaves_a_chain_that_rebuilds_and_snapshots_again(
        tmp_path):
    import ast
    import signal
    import sys

    marker = tmp_path / "copied"
    process = subprocess.Popen(
        [sys.executable, "-c", _MID_SNAPSHOT, str(tmp_path / "executor"), str(tmp_path / "ck"),
         str(marker)], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        written = StateFile(*ast.literal_eval(process.stdout.readline()))
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert written.kind == "delta"
    # No snapshot reached the chain (none was reported); the delta rebuilds the store.
    location = StoreLocation(str(tmp_path / "executor"), "Sum/GroupByKey", 3)
    elsewhere = StoreLocation(str(tmp_path / "executor-2"), location.step, location.partition)
    with PartitionState.open(elsewhere, VersionPlan(1, 2, durable(tmp_path / "ck",
                                                                  [written]))) as state:
        assert state.loaded and state.get(b"02999") == KeyState(b"v" * 50)
    # The killed process's lock went with it: the next snapshot of the partition starts.
    plan = VersionPlan(1, 2, DurableState(DurableStorage.open(str(tmp_path / "ck")),
                                          durable(tmp_path / "ck").directory, (written,),
                                          snapshot=True))
    with PartitionState.open(location, plan) as state:
        state.put(b"new", KeyState(b"n"))
    from runners.spark.state import snapshots

    snapshots.wait()
    with PartitionState.open(location, VersionPlan(2, 3, durable(tmp_path / "ck"))) as state:
        pass
    assert state.snapshot is not None and state.snapshot.version == 2
    close_all()
