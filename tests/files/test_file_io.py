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
import pytest
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


# ---------------------------------------------------------------------------------------
# Text read on every runner: Beam's text source (read in bulk by the SparkRunner, see
# tests/files/test_text_io.py) gives what the DirectRunner gives.

TEXT = b"header\none\r\ntwo\rstill two\n\nlast without newline"


def _text_files(directory) -> dict:
    """Text files of every kind the read meets: odd line endings and a header, compressed
    (gzip, bzip2 and zstd), empty, one line longer than a read chunk."""
    import bz2
    import gzip

    import zstandard

    files = {
        "a.txt": TEXT,
        "b.txt.gz": gzip.compress(b"header\nfour\nfive\n"),
        "c.txt.bz2": bz2.compress(b"header\r\nsix\r\n"),
        "d.txt.zst": zstandard.ZstdCompressor().compress(b"header\nseven"),
        "empty.txt": b"",
        "long.txt": b"header\n" + b"x" * (3 << 20) + b"\nend\n",
    }
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return files


def _lines_after_header(files: dict) -> list:
    import bz2
    import gzip

    import zstandard

    lines = []
    for name, content in files.items():
        if name.endswith(".gz"):
            content = gzip.decompress(content)
        elif name.endswith(".bz2"):
            content = bz2.decompress(content)
        elif name.endswith(".zst"):
            content = zstandard.ZstdDecompressor().decompress(content)
        records = content.split(b"\n")
        if records and records[-1] == b"":
            records.pop()
        lines.extend((name, record.removesuffix(b"\r").decode()) for record in records[1:])
    return lines


def test_text_read_from_files_of_every_kind(make_pipeline, tmp_path):
    files = _text_files(tmp_path)
    expected = _lines_after_header(files)
    assert ("a.txt", "two\rstill two") in expected and ("d.txt.zst", "seven") in expected
    with make_pipeline() as p:
        lines = p | beam.io.ReadFromText(str(tmp_path / "*"), skip_header_lines=1)
        assert_that(lines | "Short" >> beam.Map(lambda line: line[:20]),
                    equal_to([line[:20] for _, line in expected]), label="lines")
        named = p | beam.io.ReadFromTextWithFilename(str(tmp_path / "*.txt"),
                                                     skip_header_lines=1)
        assert_that(named | "Named" >> beam.Map(lambda pair: (os.path.basename(pair[0]),
                                                              pair[1][:20])),
                    equal_to([(name, line[:20]) for name, line in expected
                              if name.endswith(".txt")]), label="named")
        read_all = (p | beam.Create([str(tmp_path / "*.gz"), str(tmp_path / "a.txt")])
                    | beam.io.ReadAllFromText(with_filename=True, skip_header_lines=1))
        assert_that(read_all | "NamedAll" >> beam.Map(lambda pair: (os.path.basename(pair[0]),
                                                                     pair[1])),
                    equal_to([(name, line) for name, line in expected
                              if name in ("a.txt", "b.txt.gz")]), label="read_all")


def test_text_read_with_a_delimiter_an_escape_and_newlines_kept(make_pipeline, tmp_path):
    (tmp_path / "d.txt").write_bytes(b"a|b\\|c|\r\n|d\\\\|e")
    with make_pipeline() as p:
        delimited = p | "Delimited" >> beam.io.ReadFromText(
            str(tmp_path / "d.txt"), delimiter=b"|", escapechar=b"\\")
        assert_that(delimited, equal_to(["a", "b\\|c", "\r\n", "d\\\\", "e"]), label="escaped")
        kept = p | "Kept" >> beam.io.ReadFromText(str(tmp_path / "d.txt"),
                                                  strip_trailing_newlines=False,
                                                  coder=beam.coders.BytesCoder())
        assert_that(kept, equal_to([b"a|b\\|c|\r\n", b"|d\\\\|e"]), label="kept")


def test_bulk_text_io_off_reads_the_same_with_the_same_counts(spark_session, tmp_path):  # noqa: F811
    """``--bulk_text_io=false`` (Beam's own read) and the default give the same lines and
    the same element count of every PCollection."""
    from apache_beam.metrics import monitoring_infos
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark import SparkRunner

    files = _text_files(tmp_path)
    expected = [line for _, line in _lines_after_header(files)]
    counts = {}
    for flag in ("true", "false"):
        options = PipelineOptions(["--bulk_text_io", flag])
        pipeline = beam.Pipeline(runner=SparkRunner(spark_session), options=options)
        lines = (pipeline | "Read" >> beam.io.ReadFromText(str(tmp_path / "*"),
                                                           skip_header_lines=1)
                 | "Length" >> beam.Map(len))
        assert_that(lines, equal_to([len(line) for line in expected]))
        result = pipeline.run()
        result.wait_until_finish()
        counts[flag] = sorted(
            (info.labels["PCOLLECTION"], monitoring_infos.extract_counter_value(info))
            for info in result.monitoring_metrics().monitoring_infos()
            if info.urn == monitoring_infos.ELEMENT_COUNT_URN)
    assert counts["true"] == counts["false"]
    assert len(expected) in [count for _, count in counts["true"]]


# ---------------------------------------------------------------------------------------
# WriteToText on every runner: file names, header, footer, compression, shards (the
# SparkRunner writes Beam's text sink a block of records at a time, see
# tests/files/test_text_write.py).

def _lines_of(path) -> list:
    import gzip

    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8").split("\n")


def test_text_written_with_shards_a_template_a_header_and_gzip(make_pipeline, tmp_path):
    values = [f"caf\u00e9 {index}" for index in range(50)] + [b"raw bytes".decode()]
    with make_pipeline() as p:
        lines = p | beam.Create(values)
        _ = lines | "Sharded" >> beam.io.WriteToText(
            str(tmp_path / "sharded"), num_shards=3, shard_name_template="-SS-of-NN",
            file_name_suffix=".txt.gz", header="# header", footer="# footer")
        _ = lines | "PerBundle" >> beam.io.WriteToText(str(tmp_path / "bundles"),
                                                       file_name_suffix=".txt")
    sharded = sorted(path.name for path in tmp_path.glob("sharded*"))
    assert sharded == [f"sharded-{shard:02d}-of-03.txt.gz" for shard in range(3)]
    written = []
    for name in sharded:
        file_lines = _lines_of(tmp_path / name)
        assert file_lines[0] == "# header" and file_lines[-2:] == ["# footer", ""]
        written.extend(file_lines[1:-2])
    assert sorted(written) == sorted(values)
    bundles = sorted(tmp_path.glob("bundles*"))
    assert bundles and all(path.name.endswith(".txt") and "-of-" in path.name
                           for path in bundles)
    assert sorted(line for path in bundles for line in _lines_of(path)[:-1]) == sorted(values)
    assert not [path for path in tmp_path.iterdir() if path.name.startswith("beam-temp")]


def test_bulk_text_io_off_writes_the_same_files(spark_session, tmp_path):  # noqa: F811
    """``--bulk_text_io=false`` (Beam's writer) and the default write the same bytes."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark import SparkRunner

    contents = {}
    for flag in ("true", "false"):
        options = PipelineOptions(["--bulk_text_io", flag])
        with beam.Pipeline(runner=SparkRunner(spark_session), options=options) as p:
            _ = (p | beam.Create(range(5000)) | beam.Map(lambda x: {"n": x, "s": "\u00e9"})
                 | beam.io.WriteToText(str(tmp_path / flag / "out"), header="h",
                                       file_name_suffix=".gz"))
        contents[flag] = sorted(path.read_bytes() for path in (tmp_path / flag).iterdir())
    assert contents["true"] == contents["false"] and len(contents["true"]) >= 1


def test_write_stages_in_the_driver_write_the_same_files_with_one_job(spark_session, tmp_path,  # noqa: F811
                                                                      monkeypatch):
    """``--write_stages_in_driver`` (default): WriteImpl's initialize, pre-finalize and
    finalize stages run in the driver on a local master: one Spark job instead of four, the
    same files (names, header, footer, gzip), the same element counts; old files of the
    output's name replaced (pre-finalize); no temporary directory left."""
    import gzip

    from apache_beam.metrics import monitoring_infos
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark import SparkRunner
    from runners.spark.execution import run_context

    jobs = []
    collect = run_context.RunContext.collect

    def counted(self, dataset):
        jobs.append(dataset)
        return collect(self, dataset)

    monkeypatch.setattr(run_context.RunContext, "collect", counted)
    results = {}
    for flag in ("true", "false"):
        directory = tmp_path / flag
        directory.mkdir()
        (directory / "out-00001-of-00003.txt.gz").write_bytes(b"stale")
        jobs.clear()
        options = PipelineOptions(["--write_stages_in_driver", flag])
        pipeline = beam.Pipeline(runner=SparkRunner(spark_session), options=options)
        _ = (pipeline | beam.Create([f"line {index}" for index in range(30)])
             | beam.io.WriteToText(str(directory / "out"), num_shards=3, header="h",
                                   footer="f", file_name_suffix=".txt.gz"))
        result = pipeline.run()
        result.wait_until_finish()
        names = sorted(path.name for path in directory.iterdir())
        lines = sorted(line for path in directory.iterdir()
                       for line in gzip.decompress(path.read_bytes()).decode().split("\n"))
        counts = sorted(
            (info.labels["PCOLLECTION"], monitoring_infos.extract_counter_value(info))
            for info in result.monitoring_metrics().monitoring_infos()
            if info.urn == monitoring_infos.ELEMENT_COUNT_URN)
        results[flag] = (names, lines, counts, len(jobs))
    assert results["true"][:3] == results["false"][:3]
    names, lines, _, _ = results["true"]
    assert names == [f"out-{shard:05d}-of-00003.txt.gz" for shard in range(3)]
    assert lines.count("h") == 3 and lines.count("f") == 3 and "line 29" in lines
    assert (results["true"][3], results["false"][3]) == (1, 4)


def test_a_failing_write_stage_fails_the_same_way_in_the_driver(spark_session, tmp_path):  # noqa: F811
    """InitializeWrite cannot make its temporary directory (a file is in the way): the same
    error, in the driver or in a task."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark import SparkRunner

    (tmp_path / "blocked").write_text("a file, not a directory")
    errors = {}
    for flag in ("true", "false"):
        options = PipelineOptions(["--write_stages_in_driver", flag])
        pipeline = beam.Pipeline(runner=SparkRunner(spark_session), options=options)
        _ = (pipeline | beam.Create(["x"])
             | beam.io.WriteToText(str(tmp_path / "blocked" / "out")))
        with pytest.raises(Exception) as raised:
            pipeline.run().wait_until_finish()
        message = str(raised.value)
        errors[flag] = (type(raised.value), message[:message.index("beam-temp-")]
                        if "beam-temp-" in message else message)
    assert errors["true"] == errors["false"]
    assert "Not a directory" in errors["true"][1]
