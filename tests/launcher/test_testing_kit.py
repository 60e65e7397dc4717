"""The testing kit (``beam_spark.testing`` and its pytest plugin), as a user runs it: their
own TestStream test file, in a folder outside the project, run by ``pytest`` in a process of
its own, on Beam's DirectRunner and our SparkRunner with one shared Spark session.

The model tests (``tests/model``) run on the kit's fixtures too, in this process, on every
runner; these tests check what only a user's run shows: pytest loads the plugin by itself,
the ids name the runners, a DoFn of the test file reaches Spark's workers, a wrong
expectation fails on every runner, and the runners are chosen by the kit's options.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from project import PYTHON, REPO

#: The example of a TestStream test of one's own (docs/testing.md shows it).
EXAMPLE = REPO / "examples" / "test_late_panes.py"
TEST_NAME = "test_a_late_score_updates_its_window"


def _pytest(folder: Path, *arguments: str, timeout: float = 300,
            **variables: str) -> subprocess.CompletedProcess:
    """``python -m pytest`` in ``folder``, as a user runs it (none of this suite's settings;
    ``variables`` added to the environment)."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("BEAM_TEST_", "BEAM_SPARK_", "PYTEST_", "SPARK_"))
                   and name != "PYTHONPATH"}
    return subprocess.run(
        [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-v", "--rootdir", str(folder),
         *arguments], cwd=folder, env={**environment, **variables}, capture_output=True,
        text=True, timeout=timeout)


@pytest.fixture
def user_tests(tmp_path) -> Path:
    """The example test and the same test expecting a discarding pane (wrong: the trigger
    accumulates), in a folder of the user's."""
    folder = tmp_path / "my_tests"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / EXAMPLE.name)
    wrong = EXAMPLE.read_text().replace('("alice", 7, "late", 0)', '("alice", 4, "late", 0)')
    assert wrong != EXAMPLE.read_text()
    (folder / "test_wrong_panes.py").write_text(wrong)
    return folder


def _expected(outcome: str, runners: List[str]) -> Dict[str, str]:
    return {f"{TEST_NAME}[{runner}]": outcome for runner in runners}


def test_a_users_teststream_test_runs_on_the_direct_runner_and_on_spark(user_tests):
    completed = _pytest(user_tests)
    log = completed.stdout[-4000:] + completed.stderr[-2000:]
    # Per file, one id per runner: the right panes pass on both, the wrong ones fail on both.
    passed = re.findall(r"test_late_panes\.py::(\S+) PASSED", completed.stdout)
    failed = re.findall(r"test_wrong_panes\.py::(\S+) FAILED", completed.stdout)
    assert sorted(passed) == [f"{TEST_NAME}[DirectRunner]", f"{TEST_NAME}[SparkRunner]"], log
    assert sorted(failed) == [f"{TEST_NAME}[DirectRunner]", f"{TEST_NAME}[SparkRunner]"], log
    assert completed.returncode == 1, log
    assert "2 failed, 2 passed" in completed.stdout, log
    # No warning of the kit's or of Beam's TestStream (a Test* class pytest would collect).
    assert "warning" not in completed.stdout.splitlines()[-1], log


def test_the_runners_are_the_users_choice(user_tests):
    completed = _pytest(user_tests, "--collect-only", "--beam-spark-runners",
                        "DirectRunner", timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert re.findall(r"\[(\w+)\]>$", completed.stdout, re.MULTILINE) == ["DirectRunner"] * 2
    completed = _pytest(user_tests, "--collect-only", timeout=120, BEAM_SPARK_CONNECT="1")
    ids = re.findall(r"\[(\w+)\]>$", completed.stdout, re.MULTILINE)
    assert sorted(ids) == sorted(["DirectRunner", "SparkRunner", "SparkConnect"] * 2), (
        completed.stdout)
    completed = _pytest(user_tests, "--collect-only", "--beam-spark-runners",
                        "DirectRunner,Flink", timeout=120)
    assert completed.returncode == 4, completed.stdout + completed.stderr
    assert "--beam-spark-runners names unknown runner(s) Flink" in completed.stderr


def test_a_users_teststream_test_runs_on_spark_connect_when_asked(user_tests):
    (user_tests / "test_wrong_panes.py").unlink()
    completed = _pytest(user_tests, "--beam-spark-connect", timeout=400)
    log = completed.stdout[-4000:] + completed.stderr[-2000:]
    assert completed.returncode == 0, log
    assert dict(re.findall(r"::(\S+) (PASSED|FAILED)", completed.stdout)) == _expected(
        "PASSED", ["DirectRunner", "SparkRunner", "SparkConnect"]), log


def test_test_classes_a_module_defines_are_collected_those_it_imports_from_beam_are_not(
        tmp_path):
    # Beam's own test files define their unittest.TestCase classes in apache_beam modules;
    # the kit, which skips Beam's Test* classes a user's module imports (TestStream,
    # TestPipeline), once skipped those too: a run of them collected nothing.
    import apache_beam

    beam_tests = Path(apache_beam.__file__).parent / "transforms" / "deduplicate_test.py"
    settings = tmp_path / "pytest.ini"  # the user's own (not the project's, above the venv)
    settings.write_text("[pytest]\n")
    completed = _pytest(tmp_path, "-c", str(settings), "--collect-only", "-q", str(beam_tests),
                        timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "<UnitTestCase DeduplicateTest>" in completed.stdout, completed.stdout
    user_module = tmp_path / "test_imports_beam.py"
    user_module.write_text("from apache_beam.testing.test_stream import TestStream\n"
                           "from apache_beam.testing.test_pipeline import TestPipeline\n\n\n"
                           "def test_nothing():\n    assert TestStream and TestPipeline\n")
    completed = _pytest(tmp_path, "--collect-only", "-q", str(user_module), timeout=120)
    assert re.findall(r"<(\w+) (\w+)>", completed.stdout)[-1:] == [("Function", "test_nothing")]
    assert "collected 1 item" in completed.stdout, completed.stdout
    assert "PytestCollectionWarning" not in completed.stdout + completed.stderr
