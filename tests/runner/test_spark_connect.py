"""The SparkRunner on Spark Connect: what is Connect's own.

The model tests, and the runner's batch tests, run on Spark Connect as they run on classic
Spark (the testing kit's ``SparkConnect`` runner); these tests check what only Connect has:
how a user chooses it, that nothing classic is used, the refusals at start, job tags,
artifacts, and the job server on a Connect session. Every test that runs a pipeline does so
with classic Spark made unusable (``connect_fixtures.spark_connect``).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
import urllib.request
import zipfile

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from connect_fixtures import shared_connect_server, spark_connect  # noqa: F401 (fixture)
from project import PYTHON, REPO
from runners.spark import SparkRunner
from runners.spark.backends.connect_checks import ConnectSessionError


class CountedWords(beam.DoFn):
    def __init__(self):
        self.words = Metrics.counter("connect", "words")
        self.lengths = Metrics.distribution("connect", "lengths")

    def process(self, line):
        for word in line.split():
            self.words.inc()
            self.lengths.update(len(word))
            yield word


def _word_counts(pipeline, lines):
    """Words counted, each count plus a side input's value (a GroupByKey, a combine, a
    side input and a Reshuffle: every kind of shuffle and broadcast the runner makes)."""
    bonus = pipeline | "Bonus" >> beam.Create([1000])
    return (pipeline | beam.Create(lines) | beam.ParDo(CountedWords())
            | beam.Map(lambda word: (word, 1)) | beam.GroupByKey()
            | beam.Map(lambda group, extra: (group[0], sum(group[1]) + extra),
                       extra=beam.pvalue.AsSingleton(bonus))
            | beam.Reshuffle())


def test_relative_paths_mean_the_drivers_working_directory(spark_connect, tmp_path,
                                                           monkeypatch):
    """A Connect worker runs in its session's own folder on the server: with a server that
    sees the driver's files, a relative input and output resolve where the driver runs (a
    README example read nothing and wrote its counts into the session's folder before)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("a b\nb\n")
    with beam.Pipeline(runner=SparkRunner(spark_connect)) as pipeline:
        _ = (pipeline | beam.io.ReadFromText("in.txt") | beam.FlatMap(str.split)
             | beam.combiners.Count.PerElement() | beam.MapTuple("{}: {}".format)
             | beam.io.WriteToText("out/counts"))
    written = sorted((tmp_path / "out").glob("counts*"))
    assert written, sorted(str(path) for path in tmp_path.rglob("*"))
    assert sorted(line for path in written for line in path.read_text().splitlines()) == [
        "a: 1", "b: 2"]


def test_a_pipeline_runs_on_a_connect_session_with_classic_spark_unusable(spark_connect):
    from pyspark import SparkContext

    # The guard itself: a classic call fails the test.
    with pytest.raises(AssertionError, match="Spark Connect path"):
        SparkContext.getOrCreate()
    assert SparkContext._active_spark_context is None
    pipeline = beam.Pipeline(runner=SparkRunner(spark_connect))
    counts = _word_counts(pipeline, ["a b", "b c c", "c"])
    assert_that(counts, equal_to([("a", 1001), ("b", 1002), ("c", 1003)]))
    result = pipeline.run()
    assert result.wait_until_finish() == "DONE"
    query = result.metrics().query(MetricsFilter().with_namespace("connect"))
    (words,) = query["counters"]
    (lengths,) = query["distributions"]
    assert words.committed == 6
    assert (lengths.committed.count, lengths.committed.sum) == (6, 6)


def test_spark_remote_and_the_spark_remote_variable_choose_connect(spark_connect,
                                                                   monkeypatch):
    url = shared_connect_server().url
    # A session PySpark makes marks the process as a Connect one; the test process goes on
    # making classic sessions (this puts the mark back as it was).
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "restored")
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")
    for flags, variable in (([f"--spark_remote={url}"], None), ([], url)):
        if variable:
            monkeypatch.setenv("SPARK_REMOTE", variable)
        with beam.Pipeline(runner=SparkRunner(), options=PipelineOptions(flags)) as pipeline:
            assert_that(pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda n: n * n),
                        equal_to([1, 4, 9]))
    with pytest.raises(ValueError, match="--spark_remote.*--spark_master_url"):
        SparkRunner().run_pipeline(beam.Pipeline(), PipelineOptions(
            [f"--spark_remote={url}", "--spark_master_url=local[1]"]))


class Refused(ValueError):
    """A user's own exception type (module level: the driver must find the same class)."""


def test_a_users_exception_comes_back_as_their_own(spark_connect):
    def refuse(number):
        if number == 3:
            raise Refused(f"no {number}")
        return number

    pipeline = beam.Pipeline(runner=SparkRunner(spark_connect))
    _ = pipeline | beam.Create([1, 2, 3]) | "Refuse" >> beam.Map(refuse)
    with pytest.raises(Refused, match="no 3") as raised:
        pipeline.run().wait_until_finish()
    assert "Refuse" in str(raised.value)


def _server_jobs():
    base = shared_connect_server().ui_url
    with urllib.request.urlopen(f"{base}/api/v1/applications", timeout=10) as response:
        application = json.load(response)[0]["id"]
    with urllib.request.urlopen(f"{base}/api/v1/applications/{application}/jobs",
                                timeout=10) as response:
        return json.load(response)


def test_the_runs_jobs_carry_its_tag_and_the_beam_steps_they_run(spark_connect):
    pipeline = beam.Pipeline(runner=SparkRunner(spark_connect))
    side = pipeline | "TaggedSide" >> beam.Create(["x"])
    _ = (pipeline | "TaggedMain" >> beam.Create([1, 2])
         | "TaggedUse" >> beam.Map(lambda n, s: (n, s), s=beam.pvalue.AsSingleton(side)))
    result = pipeline.run()
    result.wait_until_finish()
    run_tag = result._names.run_tag
    ours = [job["jobTags"] for job in _server_jobs()
            if any(tag.endswith(run_tag) for tag in job.get("jobTags", []))]
    assert len(ours) >= 2, ours  # the side input's job, the pass's job
    named = [tag for tags in ours for tag in tags if "_Tag_Beam pipeline: " in tag]
    assert any(tag.endswith("Beam pipeline: collect side inputs") for tag in named), named
    assert any("TaggedUse" in tag for tag in named), named


def test_a_pipeline_that_names_no_spark_runs_on_the_active_connect_session(no_classic_spark,
                                                                        monkeypatch):
    """A notebook's ``spark`` on Spark Connect: a session made first (as a notebook, or a
    Databricks Connect user, makes it), then a pipeline with no Spark option runs on it, not
    on a SparkContext (classic Spark cannot be used here) nor on a session of its own."""
    from pyspark.sql.connect.session import SparkSession

    from runners.spark.backends.connect import ConnectBackend

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    # The builder marks the process as a Connect one; the test process goes on making
    # classic sessions (this puts the mark back as it was).
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "restored")
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED")
    own_sessions = dict(ConnectBackend._REMOTES)
    spark = SparkSession.builder.remote(shared_connect_server().url).getOrCreate()
    try:
        assert SparkSession.getActiveSession() is spark
        assert SparkRunner().backend(PipelineOptions()).session is spark
        pipeline = beam.Pipeline(runner=SparkRunner(), options=PipelineOptions())
        _ = pipeline | "Active" >> beam.Create(["a b", "b"]) | beam.FlatMap(str.split) \
            | beam.combiners.Count.PerElement() | beam.Map(print)
        result = pipeline.run()
        result.wait_until_finish()
        run_tag = result._names.run_tag
        ours = [job["jobTags"] for job in _server_jobs()
                if any(tag.endswith(run_tag) for tag in job.get("jobTags", []))]
        assert ours, "no job of the run on the server"
        assert all(any(spark.session_id in tag for tag in tags) for tags in ours), ours
        assert ConnectBackend._REMOTES == own_sessions  # no session of the runner's own
        with beam.Pipeline(runner=SparkRunner()) as pipeline:
            counts = (pipeline | beam.Create(["a b", "b"]) | beam.FlatMap(str.split)
                      | beam.combiners.Count.PerElement())
            assert_that(counts, equal_to([("a", 1), ("b", 2)]))
    finally:
        spark.stop()
    assert SparkSession.getActiveSession() is None


def test_a_large_side_input_and_a_large_dofn_reach_the_tasks(spark_connect):
    """Values over a MiB go to the workers as session artifacts, read once per worker."""
    big = [f"{index:06d}" + "x" * 1000 for index in range(2000)]  # ~2 MiB
    table = {index: "y" * 1000 for index in range(1500)}  # ~1.5 MiB pickled into the DoFn
    with beam.Pipeline(runner=SparkRunner(spark_connect)) as pipeline:
        side = pipeline | "Big" >> beam.Create(big)
        sizes = (pipeline | beam.Create([0, 1])
                 | beam.Map(lambda n, rows: (n, len(rows), len(table[n])),
                            rows=beam.pvalue.AsList(side)))
        assert_that(sizes, equal_to([(0, 2000, 1000), (1, 2000, 1000)]))


MAIN_SESSION_SCRIPT = """
import sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
import other_helper
import shipped_helper

SUFFIX = "!"  # module level of __main__: only --save_main_session brings it to the workers


def shout(word):
    return shipped_helper.upper(word) + SUFFIX + other_helper.MARK


if __name__ == "__main__":
    output, *flags = sys.argv[1:]
    options = PipelineOptions(flags + ["--runner=runners.spark.SparkRunner"])
    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline | beam.Create(["a", "b"]) | beam.Map(shout)
             | beam.io.WriteToText(output, shard_name_template=""))
"""


def _seen(partition, records):
    yield partition, sorted(records)


def _doubled(records):
    return (record * 2 for record in records)


def test_placed_key_partitions_each_get_their_own_input_and_run_with_none(spark_connect,
                                                                         capsys):
    """Placement (the cluster test places them on their executors): each key partition's
    task gets its partition's records through the dataset's own functions, and its key
    partition as its index, also once the outputs are unioned and coalesced; a partition
    with no input still runs (its timers); ``run_at_every_place`` reaches every partition of
    every place; and Spark plans no exchange on the pointer's side of the cogroup, nor any
    for a step with due timers only."""
    from runners.spark.backends.connect import ConnectBackend
    from runners.spark.backends.connect_affinity import PointerAffinity

    backend = ConnectBackend.of(spark_connect)
    placement = PointerAffinity(backend, 4, enabled=True)
    try:
        pairs = [(number % 4, number) for number in range(10) if number % 4 != 2]
        keyed = backend.source(pairs, 2).partition_by(4).map_partitions(_doubled)
        expected = [(0, [0, 8, 16]), (1, [2, 10, 18]), (2, []), (3, [6, 14])]
        for _ in range(2):  # the second batch reads the cached pointer
            assert sorted(backend.collect(placement.run("Sum", keyed, _seen))) == expected
        placed = placement.run("Sum", keyed, _seen)
        placed.frame().explain()
        plan = capsys.readouterr().out
        pointer_side = plan[plan.index("FlatMapCoGroupsInArrow"):plan.index("InMemoryTableScan")]
        assert "Exchange" not in pointer_side, plan
        timers_only = placement.run("Count", backend.source([], 4), _seen)
        union = backend.union([placed, timers_only]).coalesce(1)
        assert sorted(backend.collect(union)) == sorted(
            expected + [(partition, []) for partition in range(4)])
        # Due timers only, the pointer cached: no shuffle on either side either.
        placement.run("Count", backend.source([], 4), _seen).frame().explain()
        assert "ENSURE_REQUIREMENTS" not in capsys.readouterr().out
        reached = placement.run_at_every_place(_seen)
        assert sorted(reached) == sorted([(partition, []) for partition in range(4)] * 2)
        with pytest.raises(ValueError, match="partition_by"):
            placement.run("Sum", backend.source([(0, 1)], 4), _seen)
    finally:
        placement.release()


def test_key_partitions_on_one_executor_name_themselves_by_their_rows(spark_connect, capsys):
    """With nothing to place (one executor), a keyed step's input is shuffled with a marker
    row per key partition and run by ``mapInArrow``, no pointer and no cogroup: each key
    partition's task still gets its own records through the dataset's functions and its key
    partition as its index, also once the outputs are unioned and coalesced (where Spark
    numbers the union's partitions), and a partition with no input, or a step with due
    timers only, still runs."""
    from runners.spark.backends.connect import ConnectBackend
    from runners.spark.backends.connect_affinity import PointerAffinity

    backend = ConnectBackend.of(spark_connect)
    placement = PointerAffinity(backend, 4, enabled=False)
    pairs = [(number % 4, number) for number in range(10) if number % 4 != 2]
    keyed = backend.source(pairs, 2).partition_by(4).map_partitions(_doubled)
    expected = [(0, [0, 8, 16]), (1, [2, 10, 18]), (2, []), (3, [6, 14])]
    marked = placement.run("Sum", keyed, _seen)
    assert sorted(backend.collect(marked)) == expected
    timers_only = placement.run("Count", backend.source([], 4), _seen)
    union = backend.union([backend.source([(9, ["other"])], 3), timers_only, marked])
    assert sorted(backend.collect(union.coalesce(1))) == sorted(
        expected + [(partition, []) for partition in range(4)] + [(9, ["other"])])
    union.frame().explain()
    plan = capsys.readouterr().out
    assert "FlatMapCoGroupsInArrow" not in plan and "InMemoryTableScan" not in plan, plan
    assert placement.run_at_every_place(_seen) == [(0, [0])]  # one task, anywhere
    with pytest.raises(ValueError, match="partition_by"):
        placement.run("Sum", backend.source([(0, 1)], 4), _seen)


def test_a_script_ships_its_main_session_and_packages_as_session_artifacts(tmp_path):
    """``--save_main_session``, ``--extra_package`` and ``--setup_file`` through the runner's
    own staging, from a script run as a user runs one: the packages are installed into the
    job's site and all reach the Connect server's workers as artifacts."""
    wheel = tmp_path / "shipped_helper-1.0-py3-none-any.whl"
    info = "shipped_helper-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("shipped_helper/__init__.py", "def upper(word):\n    return word.upper()\n")
        archive.writestr(f"{info}/METADATA",
                         "Metadata-Version: 2.1\nName: shipped_helper\nVersion: 1.0\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\n"
                                          "Root-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    project = tmp_path / "other"  # the user's own package, with its setup.py
    (project / "other_helper").mkdir(parents=True)
    (project / "other_helper" / "__init__.py").write_text("MARK = '?'\n")
    (project / "setup.py").write_text("from setuptools import setup\nsetup(name='other_helper', "
                                      "version='1.0', packages=['other_helper'])\n")
    # The driver imports the packages from here; the workers only from what is shipped.
    driver_path = tmp_path / "driver"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(driver_path)
    script = tmp_path / "shout.py"
    script.write_text(textwrap.dedent(MAIN_SESSION_SCRIPT))
    output = tmp_path / "out.txt"
    completed = subprocess.run(
        [PYTHON, str(script), str(output), f"--spark_remote={shared_connect_server().url}",
         "--save_main_session", f"--extra_package={wheel}",
         f"--setup_file={project / 'setup.py'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{driver_path}:{project}:{REPO}"})
    assert completed.returncode == 0, completed.stderr[-4000:]
    assert sorted(output.read_text().split()) == ["A!?", "B!?"]


SHADOWED_BEAM = "raise ImportError('apache_beam is not installed on this server')\n"


def test_a_server_whose_workers_lack_beam_is_refused_at_start(tmp_path):
    """A real Connect server whose Python workers cannot import Beam: the first run is
    refused before any of its stages, saying what to install."""
    from services.connect_server import ConnectServer

    shadow = tmp_path / "shadow" / "apache_beam"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(SHADOWED_BEAM)
    with ConnectServer(state_dir=tmp_path / "server", daemon_module=None,
                       python_path=str(shadow.parent)) as server:
        session = server.session()
        pipeline = beam.Pipeline(runner=SparkRunner(session))
        _ = pipeline | beam.Create([1])
        started = time.monotonic()
        with pytest.raises(ConnectSessionError,
                           match="cannot import Apache Beam.*install apache-beam=="):
            pipeline.run()
        assert time.monotonic() - started < 120
        session.stop()


def test_batch_elements_on_a_server_whose_workers_are_pysparks_own(tmp_path, no_classic_spark):
    """A Connect server started without the runner's worker daemon (a user's, a vendor's):
    its Python workers import the runner one by one, and a round's tasks land on any of
    them. Beam's global-window buffering-timer test (``util_test.BatchElementsTest``) still
    gives the DirectRunner's [9, 1]: one BatchElements key per executor, not per worker
    (it gave [1, 4, 3, 1, 1] or [3, 2, 4, 1] with a key per worker)."""
    from services.connect_server import ConnectServer
    from spark_fixtures import TEST_FOLDERS
    from test_conformance_streaming import batch_sizes_by_processing_time

    with ConnectServer(state_dir=tmp_path / "server", daemon_module=None,
                       python_path=os.pathsep.join(TEST_FOLDERS)) as server:
        session = server.session()
        # Every round as Spark stages: two tasks at a time, on whichever workers are idle.
        options = PipelineOptions(streaming=True, streaming_compact_rounds=False)
        with beam.Pipeline(runner=SparkRunner(session), options=options) as pipeline:
            assert_that(batch_sizes_by_processing_time(pipeline), equal_to([9, 1]))
        session.stop()
