"""A pytest plugin that runs Beam's own test files on one runner, and records what ran where.

Beam's tests build ``TestPipeline()``, which takes its options from
``TestPipeline.pytest_test_pipeline_options`` (Beam's own ``conftest.py`` sets it from
``--test-pipeline-options``; the installed wheel does not ship that conftest). This plugin
sets it for the runner ``--beam-suite-runner`` names, and starts that runner's Spark once
for the whole run:

* ``direct``: Beam's DirectRunner (the baseline);
* ``classic``: our SparkRunner on classic Spark, ``local[2]`` (one SparkSession, started
  here: later pipelines find it running and reuse it);
* ``connect``: our SparkRunner through a Spark Connect server of this process's own,
  ``local[2]`` (``--beam-suite-remote sc://...`` uses a running one instead); the runner keeps
  one session per URL. Classic Spark is made unusable, as in the project's Connect tests.

Beam's tests that build ``beam.Pipeline()`` (Beam's default runner, the DirectRunner),
``TestPipeline(runner=...)`` or an explicit FnApiRunner do not run on the runner under
test: each test's pipelines are recorded by their runner's class, and a test none of whose
pipelines ran on the runner under test is *not applicable* there (whatever its outcome).
``--beam-suite-default-runner`` makes the runner under test Beam's default runner too, so
that ``beam.Pipeline()`` runs on it (the DataFrame API's tests build their pipelines so).

``--beam-suite-report FILE`` writes one JSON line per test: its file, node id, outcome
(``passed``, ``failed``, ``skipped``), the runners of its pipelines, whether it applies,
its seconds, and the first lines of its failure.

>>> runner_flags("classic")
'--runner=runners.spark.runner.SparkRunner --spark_master_url=local[2]'
>>> runner_flags("connect", "sc://127.0.0.1:15002")
'--runner=runners.spark.runner.SparkRunner --spark_remote=sc://127.0.0.1:15002'
>>> outcome_of(["passed", "skipped"])
'skipped'
>>> outcome_of(["passed", "failed", "passed"])
'failed'
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest

#: The runner a ``--beam-suite-runner`` names -> the class name its pipelines run on.
RUNNER_CLASSES = {"direct": "SwitchingDirectRunner", "classic": "SparkRunner",
                  "connect": "SparkRunner"}
#: The master of the classic runs and of the Connect server this plugin starts.
MASTER = "local[2]"


def runner_flags(runner: str, remote_url: Optional[str] = None) -> str:
    """The pipeline options Beam's ``TestPipeline`` gets for ``runner``."""
    if runner == "direct":
        return "--runner=DirectRunner"
    ours = "--runner=runners.spark.runner.SparkRunner"
    if runner == "classic":
        return f"{ours} --spark_master_url={MASTER}"
    if runner == "connect":
        return f"{ours} --spark_remote={remote_url}"
    raise ValueError(f"--beam-suite-runner={runner}: expected one of {sorted(RUNNER_CLASSES)}")


def outcome_of(phases: Sequence[str]) -> str:
    """One test's outcome from its phases' (setup, call, teardown): a failed phase fails
    the test, else a skipped one skips it."""
    if "failed" in phases:
        return "failed"
    if "skipped" in phases:
        return "skipped"
    return "passed"


def beam_path(path: "os.PathLike[str]") -> str:
    """A test file's path from its package's root (``apache_beam/io/textio_test.py``).

    >>> beam_path("/venv/lib/site-packages/apache_beam/io/textio_test.py")
    'apache_beam/io/textio_test.py'
    """
    parts = Path(path).parts
    if "apache_beam" not in parts:
        return str(path)
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("apache_beam"):])


def _start_classic() -> None:
    """The test run's SparkSession (the project's test settings, ``local[2]``)."""
    from spark_fixtures import shared_spark_session

    shared_spark_session()


def _start_connect() -> str:
    """The URL of this process's Connect server (started once, stopped at exit)."""
    from connect_fixtures import shared_connect_server

    return shared_connect_server().url


def _refuse_classic() -> None:
    """From here on, a classic Spark call fails (as in the project's Connect tests: a run
    that quietly used a SparkContext would prove nothing about Connect)."""
    from connect_fixtures import refuse_classic_spark

    refuse_classic_spark(pytest.MonkeyPatch())


class _Recorder:
    """Each test's outcome and the runners its pipelines ran on."""

    def __init__(self, runner: str, report_path: Optional[str]) -> None:
        self.runner_class = RUNNER_CLASSES[runner]
        self.report_path = report_path
        self.current: Optional[List[str]] = None
        self.tests: Dict[str, Dict[str, Any]] = {}

    def pipeline_ran(self, runner: Any) -> None:
        if self.current is not None:
            self.current.append(type(runner).__name__)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.current = []
        began = time.monotonic()
        file = beam_path(item.path)
        self.tests[item.nodeid] = {"file": file,
                                   "test": file + "::" + item.nodeid.split("::", 1)[1],
                                   "phases": [], "failure": None}
        yield
        record = self.tests[item.nodeid]
        record["seconds"] = round(time.monotonic() - began, 2)
        record["runners"] = sorted(set(self.current))
        record["applies"] = self.runner_class in record["runners"]
        record["outcome"] = outcome_of(record.pop("phases"))
        self.current = None
        if self.report_path:
            with open(self.report_path, "a", encoding="utf-8") as report:
                report.write(json.dumps(record) + "\n")

    def pytest_runtest_logreport(self, report) -> None:
        record = self.tests.get(report.nodeid)
        if record is None:
            return
        record["phases"].append(report.outcome)
        if report.failed and record["failure"] is None:
            text = str(report.longrepr)
            lines = [line for line in text.splitlines() if line.startswith("E ")]
            record["failure"] = "\n".join((lines or text.splitlines())[-12:])[:3000]


def pytest_addoption(parser) -> None:
    group = parser.getgroup("beam-suite", "Beam's own tests on one runner")
    group.addoption("--beam-suite-runner", default="direct", choices=sorted(RUNNER_CLASSES),
                    help="The runner of TestPipeline (default: direct).")
    group.addoption("--beam-suite-remote", default=None, metavar="URL",
                    help="connect: a running Spark Connect server (default: one started "
                    "for the run).")
    group.addoption("--beam-suite-report", default=None, metavar="FILE",
                    help="Append one JSON line per test to FILE.")
    group.addoption("--beam-suite-default-runner", action="store_true",
                    help="beam.Pipeline() without a runner runs on the runner under test too "
                    "(Beam's default is the DirectRunner): e.g. the DataFrame API's tests.")
    # Not Beam's --test-pipeline-options: TestPipeline reads that one from sys.argv itself,
    # in place of the runner's options.
    group.addoption("--beam-suite-options", default=None, metavar="OPTIONS",
                    help="More pipeline options for Beam's TestPipeline, after the runner's "
                    "(e.g. --beam-suite-options=--spark_parallelism=1).")


def pytest_configure(config) -> None:
    from apache_beam.options import pipeline_options
    from apache_beam.pipeline import Pipeline
    from apache_beam.testing.test_pipeline import TestPipeline

    runner = config.getoption("beam_suite_runner")
    remote = None
    if runner == "classic":
        _start_classic()
    elif runner == "connect":
        remote = config.getoption("beam_suite_remote") or _start_connect()
        _refuse_classic()
    extra = config.getoption("beam_suite_options") or ""
    TestPipeline.pytest_test_pipeline_options = f"{runner_flags(runner, remote)} {extra}".strip()
    if config.getoption("beam_suite_default_runner") and runner != "direct":
        from apache_beam.options.pipeline_options import StandardOptions

        # A pipeline without options finds the classic session running, or SPARK_REMOTE.
        StandardOptions.DEFAULT_RUNNER = "runners.spark.runner.SparkRunner"
        if remote:
            os.environ["SPARK_REMOTE"] = remote
    # As Beam's conftest: the optional type checks on, as on Beam's own test runs.
    pipeline_options.enable_all_additional_type_checks()

    recorder = _Recorder(runner, config.getoption("beam_suite_report"))
    config.pluginmanager.register(recorder, "beam-suite-recorder")
    run = Pipeline.run

    def recorded_run(pipeline, *args, **kwargs):
        recorder.pipeline_ran(pipeline.runner)
        return run(pipeline, *args, **kwargs)

    Pipeline.run = recorded_run
