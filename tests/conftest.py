"""Shared fixtures: every model test runs once per runner; every test marked by its area.

Tests are grouped by area, one folder each, and each test carries its folder's marker (``pytest
-m streaming``): ``model`` (the four questions on every runner), ``conformance`` (Beam's
semantics as Beam's own tests write them, on every runner), ``runner`` (the SparkRunner in
batch, its failures and graph), ``chains`` (the runner's own operations for element-only steps,
against Beam's), ``files`` (Beam's file IO and relative paths on the runner), ``cluster`` (a
standalone cluster of workers that share no disk: state that follows executors, a worker lost),
``streaming`` (the micro-batch loop), ``state`` (keyed state: stores, checkpoints, storage,
rescale, update, reading it), ``kafka`` (the Kafka source and sink, on both embedded brokers),
``job_server`` (Beam's Job API), ``pipelines`` (the jobs, the demo, pictures, benchmarks) and
``launcher`` (``beam-spark``: a user's own pipeline, the project's commands). A test that runs
on Spark is also marked ``spark``.

The runner is a parameter, never a constant, so the same TestStream proof runs on Beam's
DirectRunner and on our SparkRunner, on classic Spark and on Spark Connect
(``SparkConnect``: a Connect server of the test process's own, ``connect_fixtures``), and
must give the same panes on each. Select runners with
``BEAM_TEST_RUNNERS=DirectRunner,SparkRunner`` (default: every runner registered in
:data:`RUNNERS`). ``SparkConnect`` runs the tests of :data:`CONNECT_AREAS`; streaming ones
(the rest) wait for Spark Connect's streaming engine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Dict, Optional

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from connect_fixtures import (  # noqa: F401 (fixtures)
    no_classic_spark,
    spark_connect,
    spark_connect_runner,
)
from spark_fixtures import (  # noqa: F401 (spark_session: a fixture)
    TEST_FOLDERS,
    spark_runner,
    spark_session,
)
from suite_scope import select

# The embedded Kafka broker fixtures (KAFKA_BROKER=noida|tansu selects the broker), and the
# two-worker Spark cluster's (with an S3 server on loopback).
pytest_plugins = ["kafka_fixtures", "cluster_fixtures"]

# A test module may import another area's helpers by their bare name (tests/streaming uses
# tests/state's checkpointed job): every test folder is on the path, here as on the Spark
# workers, whose PYTHONPATH lists them all (spark_fixtures.TEST_FOLDERS).
sys.path.extend(folder for folder in TEST_FOLDERS if folder not in sys.path)


def _direct_runner(request):
    from apache_beam.runners.direct.direct_runner import DirectRunner

    return DirectRunner()


#: Runner name -> factory taking the pytest request (so a runner may use session fixtures).
RUNNERS: Dict[str, Callable] = {"DirectRunner": _direct_runner, "SparkRunner": spark_runner,
                                "SparkConnect": spark_connect_runner}
#: The runners on Spark.
SPARK_RUNNERS = ("SparkRunner", "SparkConnect")
#: Areas whose tests run on Spark Connect too (``BEAM_TEST_CONNECT_AREAS`` narrows them).
CONNECT_AREAS = tuple(area.strip() for area in os.environ.get(
    "BEAM_TEST_CONNECT_AREAS",
    "model,conformance,runner,chains,files,pipelines,streaming,state,kafka").split(",")
    if area.strip())


def _selected_runners():
    wanted = os.environ.get("BEAM_TEST_RUNNERS")
    if not wanted:
        return list(RUNNERS)
    names = [name.strip() for name in wanted.split(",") if name.strip()]
    unknown = [name for name in names if name not in RUNNERS]
    if unknown:
        raise pytest.UsageError(
            f"BEAM_TEST_RUNNERS names unknown runner(s) {unknown}; known: {sorted(RUNNERS)}"
        )
    return names


def _area(path: Path) -> Optional[str]:
    relative = path.resolve().relative_to(Path(__file__).resolve().parent)
    return relative.parts[0] if len(relative.parts) > 1 else None


def pytest_generate_tests(metafunc) -> None:
    """A test using ``runner_name`` runs on every selected runner (Spark Connect in
    :data:`CONNECT_AREAS` only), unless it names its runners itself."""
    if "runner_name" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "runner_name" in (names.split(",") if isinstance(names, str) else names):
            return
    names = _selected_runners()
    if _area(metafunc.definition.path) not in CONNECT_AREAS:
        names = [name for name in names if name != "SparkConnect"]
    metafunc.parametrize("runner_name", names, indirect=True)


@pytest.fixture
def runner_name(request) -> str:
    """The name of the runner this test instance runs on."""
    return request.param


@pytest.fixture
def runner(request, runner_name):
    """A fresh runner instance of the parametrized kind."""
    return RUNNERS[runner_name](request)


@pytest.fixture
def make_pipeline(runner):
    """Factory for a TestPipeline on this test's runner.

    ``make_pipeline(streaming=True)`` is what TestStream needs; extra keyword arguments
    become pipeline options.
    """

    def make(streaming: bool = False, **options) -> TestPipeline:
        return TestPipeline(
            runner=runner,
            options=PipelineOptions(streaming=streaming, **options),
            blocking=True,
        )

    return make


#: The folders under tests/ that group tests by area; each is also the area's marker.
AREAS = ("model", "conformance", "runner", "chains", "files", "cluster", "streaming", "state",
         "kafka", "job_server", "pipelines", "launcher")
#: Areas whose every test starts Spark work.
SPARK_AREAS = ("runner", "cluster", "streaming", "state", "job_server")


def pytest_collection_modifyitems(config, items) -> None:
    """Mark each test with its folder's area, and ``spark`` when it runs on Spark; mark
    ``extended`` what ``make test`` leaves out, and leave it out there (``suite_scope``)."""
    for item in items:
        area = _area(item.path)
        if area in AREAS:
            item.add_marker(getattr(pytest.mark, area))
        callspec = getattr(item, "callspec", None)
        on_spark = (area in SPARK_AREAS
                    or "spark_session" in getattr(item, "fixturenames", ())
                    or (callspec is not None
                        and callspec.params.get("runner_name") in SPARK_RUNNERS))
        if on_spark:
            item.add_marker(pytest.mark.spark)
    select(config, items, _area)
