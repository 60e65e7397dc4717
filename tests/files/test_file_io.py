"""Beam's file IO on every runner: CSV and JSON written and read back, elements unchanged.

Beam reads CSV and JSON with a splittable DoFn that has a side input (the files' indices),
so the read crosses the Reshuffle Beam puts into a splittable DoFn's expansion: each row
must come back with its own values and types, whatever the encoding of the file.
"""

from __future__ import annotations

import csv
import json
import os

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from spark_fixtures import spark_session  # noqa: F401 (fixture)

ROWS = [beam.Row(name="café", count=1), beam.Row(name="naïve", count=2),
        beam.Row(name="plain", count=3)]


def _described(row):
    """A row read back as (name, count, the types of both, the file's name)."""
    return (row.name, row.count, type(row.name).__name__, type(row.count).__name__,
            os.path.basename(row.file))


def test_csv_written_and_read_back_in_latin_1(make_pipeline, tmp_path):
    with make_pipeline() as p:
        _ = p | beam.Create(ROWS) | beam.io.WriteToCsv(str(tmp_path / "rows"),
                                                      encoding="latin-1")
    written = sorted(tmp_path.glob("rows*"))
    assert written, sorted(os.listdir(tmp_path))
    assert "café".encode("latin-1") in b"".join(path.read_bytes() for path in written)
    expected = []
    for path in written:
        with open(path, encoding="latin-1", newline="") as lines:
            expected.extend((record["name"], int(record["count"]), "str", "int", path.name)
                            for record in csv.DictReader(lines))
    assert sorted(name for name, *_ in expected) == ["café", "naïve", "plain"]
    with make_pipeline() as p:
        rows = p | beam.io.ReadFromCsv(str(tmp_path / "rows*"), encoding="latin-1",
                                       filename_column="file")
        assert_that(rows | beam.Map(_described), equal_to(expected))


def test_json_written_and_read_back(make_pipeline, tmp_path):
    with make_pipeline() as p:
        _ = p | beam.Create(ROWS) | beam.io.WriteToJson(str(tmp_path / "rows"),
                                                       force_ascii=False)
    written = sorted(tmp_path.glob("rows*"))
    assert written, sorted(os.listdir(tmp_path))
    records = [json.loads(line) for path in written
               for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted(records, key=str) == sorted(
        ({"name": row.name, "count": row.count} for row in ROWS), key=str)
    with make_pipeline() as p:
        rows = p | beam.io.ReadFromJson(str(tmp_path / "rows*"))
        assert_that(rows | beam.Map(lambda row: (row.name, row.count, type(row.count).__name__)),
                    equal_to([(row.name, row.count, "int") for row in ROWS]))


def test_json_lines_in_latin_1_from_two_files(make_pipeline, tmp_path):
    (tmp_path / "a.json").write_bytes('{"name": "café", "count": 1}\n'.encode("latin-1"))
    (tmp_path / "b.json").write_bytes(
        '{"name": "naïve", "count": 2}\n{"name": "plain", "count": 3}\n'.encode("latin-1"))
    with make_pipeline() as p:
        rows = p | beam.io.ReadFromJson(str(tmp_path / "*.json"), encoding="latin-1")
        assert_that(rows | beam.Map(lambda row: (row.name, row.count)),
                    equal_to([(row.name, row.count) for row in ROWS]))


def test_the_reshuffle_of_a_splittable_read_reads_only_its_elements(tmp_path):
    """The plan itself: the Reshuffle stage of ReadFromCsv's splittable DoFn has one input,
    the split elements, and not the DoFn's side input (the files' indices)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark.planning.execution_plan import RESHUFFLE_STAGE, pipeline_proto, plan

    (tmp_path / "in.csv").write_text("a,b\n1,x\n")
    pipeline = beam.Pipeline()
    _ = pipeline | beam.io.ReadFromCsv(str(tmp_path / "*.csv"))
    stages = plan(pipeline_proto(pipeline, PipelineOptions([]))).stages
    (split_reshuffle,) = [stage for stage in stages if stage.kind == RESHUFFLE_STAGE and any(
        step.endswith("ParDo(_ReadFromPandasDoFn)/Reshuffle") for step in stage.steps)]
    assert [spec.buffer_id.rsplit(b"_", 1)[-1] for spec in split_reshuffle.inputs] == [b"split"]
