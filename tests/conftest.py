"""Shared fixtures: every model test runs once per runner.

The runner is a parameter, never a constant, so the same TestStream proof runs on Beam's
DirectRunner and on our SparkRunner and must give the same panes on both. Select runners
with ``BEAM_TEST_RUNNERS=DirectRunner,SparkRunner`` (default: every runner registered in
:data:`RUNNERS`).
"""

from __future__ import annotations

import os
from typing import Callable, Dict

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from spark_fixtures import spark_runner, spark_session  # noqa: F401 (spark_session: a fixture)

# The embedded Kafka broker fixtures (KAFKA_BROKER=noida|tansu selects the broker).
pytest_plugins = ["kafka_fixtures"]


def _direct_runner(request):
    from apache_beam.runners.direct.direct_runner import DirectRunner

    return DirectRunner()


#: Runner name -> factory taking the pytest request (so a runner may use session fixtures).
RUNNERS: Dict[str, Callable] = {"DirectRunner": _direct_runner, "SparkRunner": spark_runner}


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


@pytest.fixture(params=_selected_runners())
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
