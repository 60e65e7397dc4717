"""Fixtures for running tests on the SparkRunner: one SparkSession for the whole test run.

Starting Spark and importing Beam in its Python workers takes seconds, so every test shares
one local session (``local[2]``, loopback only, no UI, small default parallelism). The
session is created on first use and stopped when the test process exits.

``spark_runner`` is the runner factory ``tests/conftest.py`` registers in its ``RUNNERS``
table, so ``make_pipeline`` runs each model test on the DirectRunner and on the SparkRunner
(``BEAM_TEST_RUNNERS`` selects runners).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
from typing import Any, Dict

import pytest

from project import QUICK_JVM

_TESTS = os.path.dirname(os.path.abspath(__file__))
#: tests/ and its area folders (tests/model, tests/streaming, ...).
TEST_FOLDERS = [_TESTS] + sorted(
    os.path.join(_TESTS, name) for name in os.listdir(_TESTS)
    if os.path.isdir(os.path.join(_TESTS, name)) and not name.startswith((".", "_")))

#: Settings of the shared test session.
SPARK_TEST_SETTINGS: Dict[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "beam-spark-tests",
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    # Workers fork from a daemon that has Beam imported already (seconds saved per worker).
    "spark.python.daemon.module": "runners.spark.daemon",
    # DoFns defined in test modules are pickled by reference (a test module is imported by
    # its bare name from its area's folder): workers must import every test folder.
    "spark.executorEnv.PYTHONPATH": os.pathsep.join(TEST_FOLDERS),
    "spark.driver.extraJavaOptions": QUICK_JVM,
}

@functools.lru_cache(maxsize=None)
def shared_spark_session() -> Any:
    """The test run's SparkSession (created once, stopped at exit)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in SPARK_TEST_SETTINGS.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    atexit.register(session.stop)
    return session


@pytest.fixture(scope="session")
def spark_session() -> Any:
    """The SparkSession every SparkRunner test shares."""
    return shared_spark_session()


def spark_runner(request) -> Any:
    """A SparkRunner on the shared session (a ``RUNNERS`` factory for tests/conftest.py)."""
    from runners.spark import SparkRunner

    return SparkRunner(request.getfixturevalue("spark_session"))
