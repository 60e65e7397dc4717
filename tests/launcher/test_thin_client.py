"""The project installed beside PySpark's thin Spark Connect client (``pyspark-client``: the
``pyspark`` package without Spark's jars), as a user of a Connect server installs it: a new
virtualenv, the project's wheel (not editable), no download at test time (the wheels come
from ``.venv/wheelhouse``, which ``make install`` fills).

Checked there: the project alone brings no PySpark in, and the runner then says which extra
to install; with ``pyspark-client`` there are no jars; a pipeline file run by the installed
``beam-spark`` on the suite's Connect server with ``--spark_remote`` writes the
DirectRunner's output, and so does one that makes its Connect session first (a notebook's
``spark``) and names no Spark; with neither, the runner says what to give.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from project import PYTHON, REPO

#: Wheels of the project's dependencies and of pyspark-client (``make install``).
WHEELHOUSE = REPO / ".venv" / "wheelhouse"

#: A user's pipeline file: counts words three ways, each output to its own file, and
#: reports what it saw as JSON on its last line.
PIPELINE = '''
import json
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

LINES = ["the quick fox", "the lazy dog", "the end"]


def count(output, argv):
    with beam.Pipeline(options=PipelineOptions(argv)) as pipeline:
        _ = (pipeline | beam.Create(LINES) | beam.FlatMap(str.split)
             | beam.combiners.Count.PerElement()
             | beam.MapTuple(lambda word, n: f"{word}: {n}")
             | beam.io.WriteToText(output, shard_name_template=""))


if __name__ == "__main__":
    url, folder = sys.argv[1], sys.argv[2]
    report = {}
    count(f"{folder}/direct.txt", ["--runner", "DirectRunner"])
    try:  # the thin client, and nothing naming a Connect server
        count(f"{folder}/nothing.txt", ["--runner", "SparkRunner"])
    except ValueError as error:
        report["no_session"] = str(error)
    count(f"{folder}/remote.txt", ["--runner", "SparkRunner", "--spark_remote", url])
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(url).getOrCreate()  # a notebook's spark
    count(f"{folder}/active.txt", ["--runner", "SparkRunner"])
    from runners.spark import SparkRunner

    report["active_session_used"] = SparkRunner().backend(
        PipelineOptions()).session is spark
    print(json.dumps(report))
'''


def _run(*command: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PYSPARK_", "SPARK_", "BEAM_")) and key != "PYTHONPATH"}
    completed = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                               env=environment, **kwargs)
    assert completed.returncode == 0, (command, completed.stdout[-3000:],
                                       completed.stderr[-3000:])
    return completed


@pytest.mark.spark
def test_the_project_beside_the_thin_client_runs_on_a_connect_server(tmp_path):
    from connect_fixtures import shared_connect_server

    assert list(WHEELHOUSE.glob("pyspark_client-*.whl")), (
        f"no pyspark-client wheel in {WHEELHOUSE}: run make install, which fills it")
    venv, dist, work = tmp_path / "venv", tmp_path / "dist", tmp_path / "work"
    work.mkdir()
    _run(PYTHON, "-m", "venv", "--without-pip", str(venv))
    python = str(venv / "bin" / "python")
    pip = [PYTHON, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    offline = ["--no-index", "--find-links", str(WHEELHOUSE)]
    _run(PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(dist), str(REPO), cwd=tmp_path)
    (wheel,) = dist.glob("beam_spark_dataflow-*.whl")

    # The project alone: no PySpark comes with it, and the runner names the extras.
    _run(*pip, "install", "--quiet", *offline, str(wheel))
    installed = _run(*pip, "list", "--format", "json").stdout
    assert not [p for p in json.loads(installed) if p["name"].startswith("pyspark")]
    refused = subprocess.run([python, "-c", "from runners.spark import SparkRunner"],
                             cwd=work, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert "pip install 'beam-spark-dataflow[spark]'" in refused.stderr, refused.stderr
    assert "'beam-spark-dataflow[connect]' (pyspark-client)" in refused.stderr

    # PySpark's thin client beside it: no jars, no full PySpark.
    _run(*pip, "install", "--quiet", *offline, "pyspark-client")
    names = {p["name"] for p in json.loads(_run(*pip, "list", "--format", "json").stdout)}
    assert "pyspark-client" in names and "pyspark" not in names, names
    folder = _run(python, "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))",
                  cwd=work).stdout.strip()
    assert folder.startswith(str(venv)) and not Path(folder, "jars").exists(), folder

    (work / "count.py").write_text(PIPELINE)
    completed = _run(str(venv / "bin" / "beam-spark"), "run", "count.py",
                     shared_connect_server().url, str(work), cwd=work, timeout=400)
    report = json.loads(completed.stdout.splitlines()[-1])
    direct = sorted((work / "direct.txt").read_text().splitlines())
    assert direct == ["dog: 1", "end: 1", "fox: 1", "lazy: 1", "quick: 1", "the: 3"]
    assert sorted((work / "remote.txt").read_text().splitlines()) == direct
    assert sorted((work / "active.txt").read_text().splitlines()) == direct
    assert report["active_session_used"] is True
    assert "--spark_remote sc://HOST:PORT" in report["no_session"], report
    assert not (work / "nothing.txt").exists()
