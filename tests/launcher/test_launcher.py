"""``beam-spark``: a user's own pipeline, outside the project, run as Python runs it, with
``--runner=SparkRunner`` meaning our runner and every other runner Beam's.

The pipelines are files written to a temporary folder (a module beside them, a package for
``-m``), run by ``python -m beam_spark`` in a process of their own, as a user runs them:
what they print and write, their exit status and their traceback are what is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from beam_spark import program
from project import PYTHON, QUICK_JVM_OPTIONS

#: A user's pipeline: the words of :data:`WORDS_MODULE`'s lines counted, written to
#: --output; what it saw of its process to --report.
PIPELINE = '''
import argparse
import json
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from words import LINES  # beside this file: its folder is first on sys.path


class WordError(Exception):
    """The pipeline's own error."""


def check(word):
    if word == "fail":
        raise WordError(f"a word the pipeline refuses: {word!r}")
    return word


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("--fail", action="store_true")
    known, pipeline_args = parser.parse_known_args(argv)
    pipeline = beam.Pipeline(options=PipelineOptions(pipeline_args))
    runner = type(pipeline.runner)
    with open(known.report, "w") as report:
        json.dump({"runner": f"{runner.__module__}.{runner.__name__}", "argv0": sys.argv[0],
                   "name": __name__, "path0": sys.path[0]}, report)
    with pipeline:
        _ = (pipeline
             | beam.Create(LINES + (["fail"] if known.fail else []))
             | beam.FlatMap(str.split)
             | beam.Map(check)
             | beam.combiners.Count.PerElement()
             | beam.MapTuple(lambda word, count: f"{word}: {count}")
             | beam.io.WriteToText(known.output, shard_name_template=""))


if __name__ == "__main__":
    main(sys.argv[1:])
'''
WORDS_MODULE = 'LINES = ["the quick fox", "the lazy dog", "the end"]\n'
EXPECTED = ["dog: 1", "end: 1", "fox: 1", "lazy: 1", "quick: 1", "the: 3"]
#: What Beam runs for --runner=DirectRunner.
BEAMS_DIRECT_RUNNER = "apache_beam.runners.direct.direct_runner.SwitchingDirectRunner"


@pytest.fixture
def user_folder(tmp_path) -> Path:
    """A folder outside the project with the user's pipeline file, a module beside it, and
    the same pipeline as a module of a package (``jobs.count``)."""
    folder = tmp_path / "my_project"
    (folder / "jobs").mkdir(parents=True)
    (folder / "count.py").write_text(PIPELINE)
    (folder / "words.py").write_text(WORDS_MODULE)
    (folder / "jobs" / "__init__.py").write_text("")
    (folder / "jobs" / "count.py").write_text(PIPELINE.replace("from words", "from jobs.words"))
    (folder / "jobs" / "words.py").write_text(WORDS_MODULE)
    return folder


def launch(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m beam_spark ARGS`` in ``folder``, as a user starts it there."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYSPARK_", "SPARK_"))}
    return subprocess.run([PYTHON, "-m", "beam_spark", *args], cwd=folder, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def counted(folder: Path, *args: str) -> dict:
    """Runs ``count.py`` with ``args``: its report, with its output lines (sorted)."""
    completed = launch(folder, "run", "count.py", "--output", str(folder / "out.txt"),
                       "--report", str(folder / "report.json"), *args)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads((folder / "report.json").read_text())
    report["output"] = sorted((folder / "out.txt").read_text().splitlines())
    return report


def test_a_pipeline_file_on_the_direct_runner_is_beams(user_folder):
    report = counted(user_folder, "--runner=DirectRunner")
    assert report == {"runner": BEAMS_DIRECT_RUNNER,
                      "argv0": "count.py", "name": "__main__", "path0": str(user_folder),
                      "output": EXPECTED}


@pytest.mark.spark
def test_a_pipeline_file_with_runner_spark_runner_runs_on_ours(user_folder):
    report = counted(user_folder, "--runner=SparkRunner", "--spark_master_url=local[2]",
                     *QUICK_JVM_OPTIONS)
    assert report["runner"] == "runners.spark.runner.SparkRunner"
    assert report["output"] == EXPECTED  # what the DirectRunner wrote (the test above)


def test_a_module_runs_as_python_dash_m_runs_it(user_folder):
    completed = launch(user_folder, "run", "-m", "jobs.count", "--output", "out.txt",
                       "--report", "report.json", "--runner", "DirectRunner")
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads((user_folder / "report.json").read_text())
    assert report == {"runner": BEAMS_DIRECT_RUNNER,
                      "argv0": str(user_folder / "jobs" / "count.py"), "name": "__main__",
                      "path0": str(user_folder)}
    assert sorted((user_folder / "out.txt").read_text().splitlines()) == EXPECTED


def test_an_unknown_runner_fails_as_beam_fails(user_folder):
    completed = launch(user_folder, "run", "count.py", "--output", "out.txt", "--report",
                       "report.json", "--runner", "NoSuchRunner")
    assert completed.returncode == 1
    assert completed.stderr.rstrip().splitlines()[-1].startswith(
        "ValueError: Unexpected pipeline runner: NoSuchRunner.")


@pytest.mark.parametrize("runner", ["DirectRunner", pytest.param(
    "SparkRunner", marks=pytest.mark.spark)])
def test_a_failing_pipeline_exits_non_zero_with_the_users_exception(user_folder, runner):
    completed = launch(user_folder, "run", "count.py", "--output", "out.txt", "--report",
                       "report.json", "--fail", f"--runner={runner}",
                       "--spark_master_url=local[1]", *QUICK_JVM_OPTIONS)
    assert completed.returncode == 1
    # Python's traceback from the program's first line, none of the launcher's frames (on
    # Spark, the worker's traceback follows in the error's message).
    first = PIPELINE.splitlines().index("    main(sys.argv[1:])") + 1
    assert ("Traceback (most recent call last):\n"
            f'  File "{user_folder / "count.py"}", line {first}, in <module>\n'
            ) in completed.stderr, completed.stderr[-3000:]
    assert str(Path(program.__file__)) not in completed.stderr
    assert "\nWordError: a word the pipeline refuses: 'fail'" in completed.stderr


def test_the_programs_exit_status_is_the_launchers(user_folder):
    (user_folder / "exits.py").write_text("import sys\nsys.exit(3)\n")
    assert launch(user_folder, "run", "exits.py").returncode == 3
    (user_folder / "broken.py").write_text("x = (\n")
    completed = launch(user_folder, "run", "broken.py")
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == "SyntaxError: '(' was never closed"
    assert str(Path(program.__file__)) not in completed.stderr
    completed = launch(user_folder, "run", "missing.py")
    assert completed.returncode == 2 and "can't open file" in completed.stderr
    completed = launch(user_folder, "run", "-m", "jobs.missing")
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == "ImportError: No module named jobs.missing"


def test_runner_names_resolve_to_ours_however_the_pipeline_gives_them(user_folder):
    script = textwrap.dedent('''
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.runners.runner import create_runner

        def kind(runner):
            return type(runner).__module__ + "." + type(runner).__name__

        before = kind(create_runner("SparkRunner"))
        from runners.resolution import claim_spark_runner_name
        claim_spark_runner_name()
        print(before)
        for name in ("SparkRunner", "spark", "SPARK", "sparkrunner", "PortableRunner",
                     "DirectRunner", "apache_beam.runners.portability.spark_runner.SparkRunner"):
            print(name, kind(create_runner(name)))
        print("options", kind(beam.Pipeline(options=PipelineOptions(runner="Spark")).runner))
        print("pipeline", kind(beam.Pipeline(runner="SparkRunner").runner))
    ''')
    completed = subprocess.run([PYTHON, "-c", script], cwd=user_folder, capture_output=True,
                               text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    ours, beams_spark = "runners.spark.runner.SparkRunner", (
        "apache_beam.runners.portability.spark_runner.SparkRunner")
    assert completed.stdout.splitlines() == [
        beams_spark,
        f"SparkRunner {ours}", f"spark {ours}", f"SPARK {ours}", f"sparkrunner {ours}",
        "PortableRunner apache_beam.runners.portability.portable_runner.PortableRunner",
        f"DirectRunner {BEAMS_DIRECT_RUNNER}",
        f"{beams_spark} {beams_spark}",
        f"options {ours}", f"pipeline {ours}"]
