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
``launcher`` (``beam-spark``: a user's own pipeline, the project's commands) and ``docs``
(README and docs/: every example run, links, the generated reference). A test that runs on
Spark is also marked ``spark``.

The runner is a parameter, never a constant, so the same TestStream proof runs on Beam's
DirectRunner and on our SparkRunner, on classic Spark and on Spark Connect
(``SparkConnect``: a Connect server of the test process's own, ``connect_fixtures``), and
must give the same panes on each. The parameter is the testing kit's, the one users get
(:mod:`beam_spark.pytest_plugin`: ``runner_name``, ``runner``, ``make_pipeline``), so the
model tests prove the kit too; here its sessions are the suite's (``spark_fixtures``:
quick JVMs, every test folder on the workers' path) and its Connect runs classic-proof
(``connect_fixtures.spark_connect``). Select runners with
``BEAM_TEST_RUNNERS=DirectRunner,SparkRunner`` (default: every runner; ``pytest.ini`` asks
the kit for ``SparkConnect``). ``SparkConnect`` runs the tests of :data:`CONNECT_AREAS`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import pytest

from beam_spark.testing import RUNNER_NAMES, SPARK_RUNNER_NAMES, SparkTestSettings
from connect_fixtures import no_classic_spark, spark_connect  # noqa: F401 (fixtures)
from spark_fixtures import TEST_FOLDERS, TEST_SETTINGS, spark_session  # noqa: F401
from suite_scope import select

# The embedded Kafka broker fixtures (KAFKA_BROKER=noida|tansu selects the broker), and the
# two-worker Spark cluster's (with an S3 server on loopback).
pytest_plugins = ["kafka_fixtures", "cluster_fixtures"]

# A test module may import another area's helpers by their bare name (tests/streaming uses
# tests/state's checkpointed job): every test folder is on the path, here as on the Spark
# workers, whose PYTHONPATH lists them all (spark_fixtures.TEST_FOLDERS).
sys.path.extend(folder for folder in TEST_FOLDERS if folder not in sys.path)

#: The runners on Spark.
SPARK_RUNNERS = SPARK_RUNNER_NAMES
#: Areas whose tests run on Spark Connect too (``BEAM_TEST_CONNECT_AREAS`` narrows them).
CONNECT_AREAS = tuple(area.strip() for area in os.environ.get(
    "BEAM_TEST_CONNECT_AREAS",
    "model,conformance,runner,chains,files,pipelines,streaming,state,kafka").split(",")
    if area.strip())


def _selected_runners(names: List[str]) -> List[str]:
    wanted = os.environ.get("BEAM_TEST_RUNNERS")
    if not wanted:
        return names
    selected = [name.strip() for name in wanted.split(",") if name.strip()]
    unknown = [name for name in selected if name not in RUNNER_NAMES]
    if unknown:
        raise pytest.UsageError(
            f"BEAM_TEST_RUNNERS names unknown runner(s) {unknown}; known: {list(RUNNER_NAMES)}"
        )
    return selected


def _area(path: Path) -> Optional[str]:
    relative = path.resolve().relative_to(Path(__file__).resolve().parent)
    return relative.parts[0] if len(relative.parts) > 1 else None


def pytest_beam_spark_runner_names(metafunc, names: List[str]) -> List[str]:
    """The kit's hook: a test using ``runner_name`` runs on every runner ``BEAM_TEST_RUNNERS``
    selects (default: the kit's, every runner here), on Spark Connect in
    :data:`CONNECT_AREAS` only."""
    names = _selected_runners(names)
    if _area(metafunc.definition.path) not in CONNECT_AREAS:
        names = [name for name in names if name != "SparkConnect"]
    return names


@pytest.fixture(scope="session")
def beam_spark_settings() -> SparkTestSettings:
    """The kit's sessions are the suite's (``spark_fixtures.TEST_SETTINGS``)."""
    return TEST_SETTINGS


#: The folders under tests/ that group tests by area; each is also the area's marker.
AREAS = ("model", "conformance", "runner", "chains", "files", "cluster", "streaming", "state",
         "kafka", "job_server", "pipelines", "launcher", "docs")
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
