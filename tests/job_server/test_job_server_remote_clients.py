"""The job server binds loopback only unless told otherwise: Beam's Job API authenticates no
one, and whoever submits a job runs code on the cluster (runners/spark/job_server/server.py).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import grpc
import pytest
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

from project import REPO
from runners.spark.job_server.server import SparkJobServer


def test_the_job_server_refuses_a_host_beyond_loopback_without_the_flag():
    started = time.monotonic()
    refused = subprocess.run(
        [sys.executable, "-m", "runners.spark.job_server", "--host", "0.0.0.0", "--port", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "--host 0.0.0.0" in refused.stderr and "--allow_remote_clients" in refused.stderr
    assert "runs code on the cluster" in refused.stderr
    # Refused before Spark starts: no JVM, no port.
    assert time.monotonic() - started < 30
    for host in ("0.0.0.0", "::", "192.0.2.10", "build-host.example"):
        with pytest.raises(ValueError, match="allow_remote_clients"):
            SparkJobServer(port=0, host=host)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert SparkJobServer(port=0, host=host).host == host


def test_with_the_flag_it_binds_every_interface_and_warns(spark_session, caplog):
    # On the test session's SparkContext (it is not stopped with the server); bound for a
    # moment only, and asked over loopback.
    server = SparkJobServer(port=0, host="0.0.0.0", allow_remote_clients=True,
                            spark=spark_session)
    with caplog.at_level(logging.WARNING, logger="runners.spark.job_server.server"):
        server.start()
    try:
        warnings = [record.getMessage() for record in caplog.records
                    if record.levelno == logging.WARNING]
        assert any("0.0.0.0" in text and "run code on the Spark cluster" in text
                   for text in warnings), warnings
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            jobs = beam_job_api_pb2_grpc.JobServiceStub(channel).GetJobs(
                beam_job_api_pb2.GetJobsRequest(), timeout=30)
        assert list(jobs.job_info) == []
    finally:
        server.stop()
