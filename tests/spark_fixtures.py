"""The suite's classic Spark session: the testing kit's (:mod:`beam_spark.testing`), with the
suite's settings.

Starting Spark and importing Beam in its Python workers takes seconds, so every test shares
one local session (``local[2]``, loopback only, no UI, small default parallelism), created
on first use and stopped when the test process exits. The kit's ``runner`` fixture runs
each model test on it as ``SparkRunner``; the suite adds the quick JVM options and every
test folder on the workers' path (:data:`TEST_SETTINGS`, which ``tests/conftest.py`` hands
the kit).
"""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest

from beam_spark import testing
from beam_spark.testing import SparkTestSettings
from project import QUICK_JVM

_TESTS = os.path.dirname(os.path.abspath(__file__))
#: tests/ and its area folders (tests/model, tests/streaming, ...).
TEST_FOLDERS = [_TESTS] + sorted(
    os.path.join(_TESTS, name) for name in os.listdir(_TESTS)
    if os.path.isdir(os.path.join(_TESTS, name)) and not name.startswith((".", "_")))

#: How the suite's Spark sessions are made (the classic one here, the Connect server's in
#: ``connect_fixtures``): the kit's defaults, the quick JVM, and DoFns defined in test modules
#: pickled by reference (a test module is imported by its bare name from its area's folder),
#: so the workers import every test folder.
TEST_SETTINGS = SparkTestSettings(spark_conf={"spark.driver.extraJavaOptions": QUICK_JVM},
                                  python_path=TEST_FOLDERS)
#: Settings of the shared test session.
SPARK_TEST_SETTINGS: Dict[str, str] = TEST_SETTINGS.session_settings()


def shared_spark_session() -> Any:
    """The test run's SparkSession (created once, stopped at exit)."""
    return testing.shared_spark_session(TEST_SETTINGS)


@pytest.fixture(scope="session")
def spark_session() -> Any:
    """The SparkSession every SparkRunner test shares."""
    return shared_spark_session()
