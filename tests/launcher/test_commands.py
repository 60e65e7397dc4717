"""``beam-spark``'s commands: each with its help, ``submit`` through PySpark's spark-submit,
``run`` against a Spark Connect server, and on a thin client (PySpark's Connect client
only) the commands that need the full PySpark saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from beam_spark.commands import COMMANDS, main
from beam_spark.submit import launcher_script, submit_command
from project import PYTHON, QUICK_JVM

#: A pipeline that writes its elements to the file its first argument names, then prints
#: the master and name of the SparkContext the runner ran on (None on Spark Connect).
PRINTS_ITS_SPARK = '''
import sys

import apache_beam as beam

if __name__ == "__main__":
    with beam.Pipeline(argv=sys.argv[2:]) as pipeline:
        _ = (pipeline | beam.Create(["a", "b"]) | beam.Map(lambda x: x * 2)
             | beam.io.WriteToText(sys.argv[1], shard_name_template=""))
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    print("spark:", context and context.master, context and context.appName)
'''


def written(path: Path) -> list:
    return sorted(path.read_text().splitlines())


def _environment() -> dict:
    return {key: value for key, value in os.environ.items()
            if not key.startswith(("PYSPARK_", "SPARK_"))}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help(name, capsys):
    try:
        status = main([name, "--help"])
    except SystemExit as exit:  # argparse's --help
        status = exit.code
    assert status == 0
    assert capsys.readouterr().out.startswith(f"usage: beam-spark {name}")


def test_the_console_script_lists_the_commands():
    script = Path(PYTHON).parent / "beam-spark"
    completed = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                               timeout=60)
    assert completed.returncode == 0
    assert [line.split()[0] for line in completed.stdout.splitlines()
            if line.startswith("  ") and not line.startswith("  beam-spark")] == list(COMMANDS)
    unknown = subprocess.run([str(script), "my_pipeline.py"], capture_output=True, text=True,
                             timeout=60)
    assert unknown.returncode == 2
    assert "beam-spark run my_pipeline.py" in unknown.stderr


def test_submit_builds_spark_submits_command_line():
    command = submit_command(["--master", "spark://h:7077", "--conf", "a=b", "--verbose",
                              "job.py", "--runner", "SparkRunner"])
    assert Path(command[0]).parts[-2:] == ("bin", "spark-submit")
    assert command[1:] == ["--master", "spark://h:7077", "--conf", "a=b", "--verbose",
                           launcher_script(), "run", "job.py", "--runner", "SparkRunner"]
    assert submit_command(["-m", "jobs.count", "--x"])[1:] == [
        launcher_script(), "run", "-m", "jobs.count", "--x"]
    with pytest.raises(ValueError, match="FILE or -m MODULE"):
        submit_command(["--master", "local[2]"])


@pytest.mark.spark
def test_submit_runs_the_pipeline_on_the_spark_spark_submit_configured(tmp_path):
    (tmp_path / "prints.py").write_text(PRINTS_ITS_SPARK)
    completed = subprocess.run(
        [PYTHON, "-m", "beam_spark", "submit", "--master", "local[2]", "--name", "my-job",
         "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM}",
         "prints.py", str(tmp_path / "out.txt"), "--runner", "SparkRunner"],
        cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert written(tmp_path / "out.txt") == ["aa", "bb"]
    # spark-submit's --master and --name, not the runner's defaults (local[*], beam-on-spark)
    assert completed.stdout.splitlines()[-1] == "spark: local[2] my-job"


@pytest.mark.spark
def test_run_against_a_spark_connect_server(tmp_path):
    from connect_fixtures import shared_connect_server

    (tmp_path / "prints.py").write_text(PRINTS_ITS_SPARK)
    completed = subprocess.run(
        [PYTHON, "-m", "beam_spark", "run", "prints.py", str(tmp_path / "out.txt"),
         "--runner", "spark", "--spark_remote", shared_connect_server().url],
        cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert written(tmp_path / "out.txt") == ["aa", "bb"]  # by the server's workers
    assert completed.stdout.splitlines()[-1] == "spark: None None"  # no SparkContext here


def test_on_a_thin_client_the_commands_that_need_the_full_pyspark_say_so(tmp_path):
    """A ``pyspark`` package without Spark's jars and scripts first on the path: what PySpark's
    Connect-only client (``pyspark-client``) installs."""
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text("")
    environment = {**_environment(), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}

    def launch(*args):
        return subprocess.run([PYTHON, "-m", "beam_spark", *args], capture_output=True,
                              text=True, timeout=60, env=environment)

    for args in (["cluster", "start"], ["connect-server", "start"], ["job-server"],
                 ["submit", "--master", "local[2]", "job.py"]):
        completed = launch(*args)
        assert completed.returncode == 2, args
        assert completed.stderr.startswith(f"beam-spark {args[0]}: needs the full PySpark"), (
            completed.stderr)
        assert f"pyspark at {tmp_path / 'pyspark'}" in completed.stderr
        assert "--spark_remote sc://" in completed.stderr
    # Its help still answers, and what needs no JVM runs.
    assert launch("cluster", "--help").returncode == 0
    assert launch("state", "--checkpoint_dir", str(tmp_path)).returncode == 1  # no checkpoint
