"""Fixtures for the SparkRunner on Spark Connect: a real Connect server, and no classic Spark.

The server is the test process's own (:class:`services.connect_server.ConnectServer`, from
pyspark's jars, ``local[2]`` on loopback), started on first use and stopped when the
process exits. Its Python workers run this interpreter with the test folders on their path
(DoFns defined in test modules are pickled by reference), and fork from the runner's
worker daemon, as the classic test session's do.

A Connect test proves nothing if the runner quietly used a SparkContext: ``spark_connect``
runs every test with each classic-only entry point of PySpark (SparkContext, RDD, broadcast,
accumulator) made to raise, and the process's running SparkContext hidden, so a classic call
on the Connect path fails the test.

``spark_connect_runner`` is the runner factory :data:`conftest.RUNNERS` registers as
``SparkConnect``: the model tests, batch and streaming, run on it beside the DirectRunner
and the classic SparkRunner.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from typing import Any, Dict

import pytest

from project import QUICK_JVM
from spark_fixtures import TEST_FOLDERS

#: Settings of the test run's Connect server (as the classic test session's).
CONNECT_TEST_SETTINGS: Dict[str, str] = {
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": QUICK_JVM,
}
@functools.lru_cache(maxsize=None)
def shared_connect_server() -> Any:
    """The test process's Connect server (started once, stopped at exit)."""
    from services.connect_server import ConnectServer

    state_dir = tempfile.mkdtemp(prefix="beam-test-connect-")
    server = ConnectServer(state_dir=state_dir, master="local[2]", conf=CONNECT_TEST_SETTINGS,
                           python_path=os.pathsep.join(TEST_FOLDERS))
    atexit.register(shutil.rmtree, state_dir, True)  # after the server stops (atexit: LIFO)
    server.start()
    atexit.register(server.stop)
    return server


@functools.lru_cache(maxsize=None)
def shared_connect_session() -> Any:
    """The test process's session on its Connect server (the process goes on making classic
    sessions too: :meth:`~services.connect_server.ConnectServer.session`)."""
    return shared_connect_server().session()


class _ClassicCalled(AssertionError):
    """A classic-only PySpark API was called while a Spark Connect test ran."""


def _refuse(what: str):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _ClassicCalled(f"{what} was called on the Spark Connect path")
    return refuse


@pytest.fixture
def no_classic_spark(monkeypatch) -> None:
    """Classic Spark cannot be used in the test (see the module docstring)."""
    refuse_classic_spark(monkeypatch)


def refuse_classic_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make each classic-only entry point of PySpark raise, and hide the process's running
    SparkContext, until ``monkeypatch`` is undone."""
    from pyspark import accumulators, broadcast
    from pyspark.core import context, rdd

    monkeypatch.setattr(context.SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(context.SparkContext, "__init__", _refuse("SparkContext()"))
    monkeypatch.setattr(context.SparkContext, "getOrCreate",
                        classmethod(_refuse("SparkContext.getOrCreate")))
    monkeypatch.setattr(rdd.RDD, "__init__", _refuse("RDD()"))
    monkeypatch.setattr(broadcast.Broadcast, "__init__", _refuse("Broadcast()"))
    monkeypatch.setattr(accumulators.Accumulator, "__init__", _refuse("Accumulator()"))


@pytest.fixture
def spark_connect(no_classic_spark) -> Any:
    """The Connect session, for a test in which classic Spark cannot be used."""
    return shared_connect_session()


def spark_connect_runner(request) -> Any:
    """A SparkRunner on the Connect session (a ``RUNNERS`` factory for tests/conftest.py)."""
    from runners.spark import SparkRunner

    return SparkRunner(request.getfixturevalue("spark_connect"))
