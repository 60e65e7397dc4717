"""Fixtures for the SparkRunner on Spark Connect: a real Connect server, and no classic Spark.

The server is the test process's own, the testing kit's (:func:`beam_spark.testing.
shared_connect_server`: :class:`services.connect_server.ConnectServer`, from pyspark's jars,
``local[2]`` on loopback), started on first use and stopped when the process exits. Its
Python workers run this interpreter with the test folders on their path (DoFns defined in
test modules are pickled by reference), and fork from the runner's worker daemon, as the
classic test session's do (``spark_fixtures.TEST_SETTINGS``).

A Connect test proves nothing if the runner quietly used a SparkContext: ``spark_connect``
runs every test with each classic-only entry point of PySpark (SparkContext, RDD, broadcast,
accumulator) made to raise, and the process's running SparkContext hidden, so a classic call
on the Connect path fails the test.

``spark_connect`` takes the place of the kit's fixture of that name, so the kit's
``SparkConnect`` runner (the model tests, batch and streaming) runs with classic Spark
unusable too.
"""

from __future__ import annotations

from typing import Any, Dict

import pytest

from beam_spark import testing
from spark_fixtures import TEST_SETTINGS

#: Settings of the test run's Connect server (as the classic test session's).
CONNECT_TEST_SETTINGS: Dict[str, str] = TEST_SETTINGS.connect_server_settings()


def shared_connect_server() -> Any:
    """The test process's Connect server (started once, stopped at exit)."""
    return testing.shared_connect_server(TEST_SETTINGS)


def shared_connect_session() -> Any:
    """The test process's session on its Connect server (not the process's active session,
    and the process goes on making classic sessions too:
    :func:`services.connect_server.client_session`)."""
    return testing.shared_connect_session(TEST_SETTINGS)


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
