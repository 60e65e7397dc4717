"""Relative paths mean the driver's working directory when the pipeline runs, on every runner.

The DirectRunner opens files in the driver's process, so a relative path means the directory
the driver is in while the pipeline runs. The SparkRunner's tasks run in that directory on
classic Spark and on Spark Connect, whatever the workers' own was when Spark started; where
the workers do not see it (a cluster of hosts of their own: ``test_spark_cluster_paths``),
a relative path fails the job, naming the path.
"""

from __future__ import annotations

import os
import sys

import apache_beam as beam
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to

from runners.spark.dependencies.working_directory import (
    PROBE_FILE_PREFIX,
    DriverDirectory,
    RelativePathError,
    check_relative_paths,
    in_driver_directory,
    probe_directory,
    relative_paths,
)

from spark_fixtures import spark_session  # noqa: F401 (fixture)


def test_relative_paths_after_the_driver_changed_directory(make_pipeline, tmp_path,
                                                           monkeypatch):
    """The session has started and run a pipeline (its workers' directory is the test
    process's first one); then the driver changes directory and reads and writes there."""
    data = tmp_path / "data"
    with make_pipeline() as p:
        _ = (p | beam.Create(["the quick fox", "the lazy dog"])
             | beam.io.WriteToText(str(data / "in"), file_name_suffix=".txt"))
    monkeypatch.chdir(data)
    with make_pipeline() as p:
        counts = (p | beam.io.ReadFromText("./*.txt") | beam.FlatMap(str.split)
                  | beam.combiners.Count.PerElement())
        assert_that(counts, equal_to([("the", 2), ("quick", 1), ("fox", 1), ("lazy", 1),
                                      ("dog", 1)]))
        _ = counts | beam.MapTuple("{}: {}".format) | beam.io.WriteToText("out/counts")
    written = sorted((data / "out").glob("counts*"))
    assert written, sorted(str(path) for path in tmp_path.rglob("*"))
    assert sorted(line for path in written for line in path.read_text().splitlines()) == [
        "dog: 1", "fox: 1", "lazy: 1", "quick: 1", "the: 2"]


def test_a_pattern_in_the_data_is_read_in_the_drivers_directory(make_pipeline, tmp_path,
                                                                 monkeypatch):
    (tmp_path / "a.txt").write_text("1\n2\n")
    (tmp_path / "b.txt").write_text("3\n")
    monkeypatch.chdir(tmp_path)
    with make_pipeline() as p:
        lines = p | beam.Create(["./*.txt"]) | beam.io.ReadAllFromText()
        assert_that(lines | beam.Map(int), equal_to([1, 2, 3]))


def test_tasks_run_in_the_drivers_directory_where_the_workers_see_it(tmp_path):
    before = os.getcwd()
    with in_driver_directory(DriverDirectory(str(tmp_path), seen=True)):
        assert os.getcwd() == str(tmp_path)
        (tmp_path / "in.txt").write_text("x\n")
        assert [m.path for m in FileSystems.match(["./in.txt"])[0].metadata_list] == [
            "./in.txt"]
    assert os.getcwd() == before


def test_a_workers_own_files_stay_where_spark_put_them(tmp_path, monkeypatch):
    """On a cluster's executor PySpark names the worker's files relative to its directory
    (``SparkFiles`` root ``.``, ``sys.path`` entries of ``addPyFile``'s zips): a task in the
    driver's directory still finds them where they are."""
    from pyspark import SparkFiles

    worker, driver = tmp_path / "executor", tmp_path / "driver"
    worker.mkdir(), driver.mkdir()
    (worker / "shipped.txt").write_text("x")
    monkeypatch.chdir(worker)
    monkeypatch.setattr(SparkFiles, "_root_directory", ".")
    monkeypatch.setattr(SparkFiles, "_is_running_on_worker", True)
    monkeypatch.setattr("sys.path", ["./project.zip"] + sys.path)
    with in_driver_directory(DriverDirectory(str(driver), seen=True)):
        assert os.getcwd() == str(driver)
        assert SparkFiles.get("shipped.txt") == str(worker / "shipped.txt")
        assert sys.path[0] == str(worker / "project.zip")
    assert os.getcwd() == str(worker)


def test_a_task_whose_worker_does_not_see_the_directory_refuses_relative_paths(tmp_path):
    (tmp_path / "in.txt").write_text("x\n")
    unseen = DriverDirectory(str(tmp_path / "on-another-host"), seen=False)
    with in_driver_directory(unseen):
        with pytest.raises(RelativePathError, match=r"'\./in\.txt'.*on-another-host"):
            FileSystems.match(["./in.txt"])
        with pytest.raises(RelativePathError, match="'out/part'"):
            FileSystems.create("out/part")
        # Absolute paths and URLs are the workers' own business.
        found = FileSystems.match([str(tmp_path / "*.txt")])[0].metadata_list
        assert [os.path.basename(m.path) for m in found] == ["in.txt"]
    # The task is over: the worker's next task is another run's.
    assert FileSystems.match(["./no-such-file-*.txt"])[0].metadata_list == []


def test_the_relative_paths_a_pipeline_names(tmp_path):
    (tmp_path / "in.csv").write_text("a,b\n1,x\n")
    pipeline = beam.Pipeline()
    lines = pipeline | "Text" >> beam.io.ReadFromText("./in*.txt", validate=False)
    _ = pipeline | "Absolute" >> beam.io.ReadFromText(str(tmp_path / "x.txt"), validate=False)
    _ = pipeline | "Remote" >> beam.io.ReadFromText("s3://bucket/x.txt", validate=False)
    _ = lines | "Out" >> beam.io.WriteToText("out/lines")
    rows = pipeline | "Csv" >> beam.io.ReadFromCsv(str(tmp_path / "*.csv"))
    _ = rows | "Json" >> beam.io.WriteToJson("json/rows")
    _ = pipeline | "Match" >> fileio.MatchFiles("data/*") | fileio.ReadMatches()
    found = relative_paths(pipeline)
    assert found == [("Text/Read", "./in*.txt"), ("Out/Write", "out/lines"),
                     ("Json/_WriteToPandas", "json/rows"),
                     ("Match", "data/*")]
    unseen = DriverDirectory("/home/someone/project", seen=False)
    with pytest.raises(RelativePathError) as refused:
        check_relative_paths(found, unseen, "classic Spark (spark://cluster:7077)")
    message = str(refused.value)
    for step, path in found:
        assert f"{step!r} names {path!r}" in message
    assert "/home/someone/project" in message and "spark://cluster:7077" in message
    check_relative_paths(found, DriverDirectory("/home/someone/project", seen=True), "x")
    check_relative_paths([], unseen, "x")


@pytest.mark.parametrize("runner_name", ["SparkRunner", "SparkConnect"], indirect=True)
def test_the_workers_of_this_host_see_the_drivers_directory(runner, tmp_path):
    """The probe itself (the job a cluster backend runs): the workers find the driver's
    file; nothing of it stays."""
    backend = runner.backend(beam.Pipeline().options)
    (tmp_path / "kept.txt").write_text("x")
    assert probe_directory(backend, str(tmp_path))
    assert not [name for name in os.listdir(tmp_path) if name.startswith(PROBE_FILE_PREFIX)]
    assert backend.sees_directory(str(tmp_path))
    assert not probe_directory(backend, str(tmp_path / "not-there"))
