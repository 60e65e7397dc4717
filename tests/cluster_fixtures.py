"""A Spark standalone cluster of two workers that share nothing, for the cluster tests.

Each worker has its own work and local directories and, where this machine allows it (root,
``unshare``), a private ``/tmp`` (:mod:`services.cluster`): like two hosts, they share only
what a test names, under :data:`SHARED_ROOT` (a checkpoint directory, a directory of
panes). The cluster tests run in one test process (xdist group ``spark-cluster``): a cluster
runs one application at a time, and two clusters on a 2-core machine would starve both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from project import QUICK_JVM_OPTIONS, REPO
from services.cluster import StandaloneCluster, isolation_available

#: Storage both workers see (pytest's own temporary directories are under /tmp, which an
#: isolated worker has a private copy of).
SHARED_ROOT = "/var/tmp"
#: Seconds a driver process on the cluster may take (executors' start-up included).
DRIVER_SECONDS = 300.0


def runner_options(cluster: StandaloneCluster) -> List[str]:
    """The SparkRunner options of a test driver on ``cluster`` (quick JVMs)."""
    return cluster.runner_options() + QUICK_JVM_OPTIONS


#: The marks of every cluster test.
CLUSTER_MARKS = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark-cluster")]


@pytest.fixture(scope="session")
def two_workers() -> Iterator[StandaloneCluster]:
    """A master and two 1-core workers on 127.0.0.1, isolated where possible: one for the
    test process's cluster tests (a test that takes a worker away starts it again)."""
    state_dir = tempfile.mkdtemp(prefix="beam-test-cluster-", dir=SHARED_ROOT)
    cluster = StandaloneCluster(state_dir=state_dir, workers=2, worker_cores=1,
                                isolated=isolation_available())
    with cluster:
        yield cluster
    shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every worker of the cluster reads and writes."""
    path = Path(tempfile.mkdtemp(prefix="beam-test-shared-", dir=SHARED_ROOT))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_driver(command: List[str], log_path: Path, **environment: str) -> subprocess.Popen:
    """A driver process (its own process group) running ``command`` from the repository."""
    with open(log_path, "w") as log:
        return subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONPATH=str(REPO), **environment),
                                start_new_session=True)


def finish_driver(driver: subprocess.Popen, log_path: Path) -> str:
    """Wait for ``driver`` and fail the test unless it ended well; returns its log."""
    try:
        driver.wait(timeout=DRIVER_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(driver.pid, 9)
        driver.wait()
        pytest.fail(f"the driver did not end within {DRIVER_SECONDS} s:\n"
                    + log_path.read_text(errors="replace")[-4000:])
    log = log_path.read_text(errors="replace")
    assert driver.returncode == 0, log[-4000:]
    return log


def wait_for_batches(driver: subprocess.Popen, report: Path, batches: int,
                     log_path: Path) -> None:
    """Return once the driver's ``--streaming_report`` has ``batches`` lines."""
    deadline = time.monotonic() + DRIVER_SECONDS
    while not report.exists() or len(report.read_text().splitlines()) < batches:
        assert driver.poll() is None, ("the driver ended too soon:\n"
                                       + log_path.read_text(errors="replace")[-4000:])
        assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-4000:]
        time.sleep(0.1)


class S3Bucket:
    """A bucket on an S3 server on loopback, and the pipeline options that reach it."""

    def __init__(self, endpoint: str, name: str) -> None:
        import boto3

        self.endpoint = endpoint
        self.name = name
        self.client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                                   aws_secret_access_key="test", region_name="us-east-1")
        self.client.create_bucket(Bucket=name)
        #: Beam's S3 options (the credentials are the server's placeholders).
        self.options = [f"--s3_endpoint_url={endpoint}", "--s3_access_key_id=test",
                        "--s3_secret_access_key=test", "--s3_region_name=us-east-1"]

    def keys(self, prefix: str) -> List[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name,
                                                                     Prefix=prefix)
        return [entry["Key"] for page in pages for entry in page.get("Contents", [])]


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """An S3-protocol server (moto's) on a free loopback port: its endpoint URL."""
    from moto.server import ThreadedMotoServer

    from services.processes import free_loopback_port

    port = free_loopback_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> S3Bucket:
    return S3Bucket(s3_server, f"beam-test-{os.getpid()}-{time.monotonic_ns()}")
