"""The runner's block writes of ``WriteToText`` (``--bulk_text_io``) write what Beam writes.

As ``test_text_io.py`` does for the read: the fused stage holding ``WriteImpl``'s writing
step (a file per bundle; a file per shard with ``num_shards``) runs in process with the
option off and on, on the same elements (strings, bytes, objects written by their ``str``,
more than a block of them, elements in several windows); compared: the bytes of every file
written (header, footer, newlines, compression), what the step outputs, the element count
of every PCollection, user metrics (a coder that counts) and exceptions. A spy proves which
path wrote: the block writes for Beam's ``_TextSink``, Beam's own for a user's sink class
and for a limit of records per file.

The SparkRunner and Spark Connect runs are in ``test_file_io.py``.
"""

from __future__ import annotations

import bz2
import gzip
import os
import typing
import zlib

import apache_beam as beam
import pytest
import zstandard
from apache_beam.coders import coders
from apache_beam.io import textio
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow, SlidingWindows, WindowFn
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.text_io import write as text_write

from test_text_io import NAMESPACE, run_stage

WRITE = "/WriteBundles"
SPIED = (text_write, "write_records")
SLIDING = SlidingWindows(60, 20)


class Model:
    """An element written by its ``str`` (as Nexmark's models are)."""

    def __init__(self, number):
        self.number = number

    def __str__(self):
        return f'{{"number": {self.number}, "name": "caf\\u00e9"}}'


class Loud(str):
    def __str__(self):
        return self.upper()


class BadStr:
    def __str__(self):
        raise ValueError("no text for this one")


class Surrogate:
    def __str__(self):
        return "lone \ud800 surrogate"


class CountingCoder(coders.Coder):
    def encode(self, value):
        Metrics.counter(NAMESPACE, "encoded").inc()
        return b"<" + str(value).encode("utf-8") + b">"

    def decode(self, encoded):
        raise NotImplementedError

    def is_deterministic(self):
        return True


class OwnSink(textio._TextSink):
    """A user's sink: Beam's text sink that writes each record twice."""

    def write_encoded_record(self, file_handle, encoded_value):
        super().write_encoded_record(file_handle, encoded_value)
        super().write_encoded_record(file_handle, encoded_value)


def _decompressed(name: str, data: bytes) -> bytes:
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith(".bz2"):
        return bz2.decompress(data)
    if name.endswith(".deflate"):
        return zlib.decompress(data)
    if name.endswith(".zst"):
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return data


def _build(prefix: str, write: typing.Callable[[str], beam.PTransform]):
    def build(pipeline):
        return (pipeline | beam.Impulse()
                | "Any" >> beam.Map(lambda _: 0).with_output_types(typing.Any)
                | "In" >> beam.Reshuffle() | "Write" >> write(prefix))
    return build


def _inputs(values, sliding: bool = False) -> list:
    elements = []
    for index, value in enumerate(values):
        timestamp = Timestamp(5 + 17 * index)
        windows = (list(SLIDING.assign(WindowFn.AssignContext(timestamp))) if sliding
                   else [GlobalWindow()])
        elements.append(WindowedValue(value, timestamp, windows))
    return elements


def _files_of(run) -> list:
    """The bytes of every file the step wrote (its outputs name them), in a stable order."""
    written = []
    for value, *_ in run.elements:
        path = value[1] if isinstance(value, tuple) else value
        with open(path, "rb") as file:
            written.append((os.path.basename(path).split(".", 1)[1], file.read()))
    return sorted(written)


def compare_writes(tmp_path, write, inputs, monkeypatch, bulk: bool = True):
    """Write ``inputs`` with the option off, then on (each into a directory of its own);
    assert the same files, outputs, counts and metrics; return (Beam's files, the run)."""
    runs, files = [], []
    for text_io in (False, True):
        directory = tmp_path / ("ours" if text_io else "beam")
        directory.mkdir()
        run = run_stage(_build(str(directory / "out"), write), WRITE, inputs, text_io,
                        monkeypatch, SPIED)
        runs.append(run)
        files.append(_files_of(run) if run.error is None else [])
    (beam_run, ours), (beam_files, our_files) = runs, files
    assert ours.error == beam_run.error
    assert our_files == beam_files  # the same bytes, file by file
    assert len(ours.elements) == len(beam_run.elements)
    assert [element[1:] for element in ours.elements] == [
        element[1:] for element in beam_run.elements]  # timestamps, windows, panes
    assert ours.counts == beam_run.counts
    assert ours.user_metrics == beam_run.user_metrics
    assert beam_run.bulk_calls == 0
    assert (ours.bulk_calls > 0) == bulk, ours.bulk_calls
    return beam_files, ours


WRITE_CASES = {
    "strings": ({}, ["a", "caf\u00e9", "", "two\nlines", "\u2603"]),
    "objects": ({}, [Model(1), 2, 3.5, {"k": [1]}, None, Loud("loud"), Model(7)]),
    "bytes_and_strings": ({}, [b"raw \xff", "text", b"", Model(3)]),
    "no_newlines": ({"append_trailing_newlines": False}, ["a", "b", Model(2)]),
    "header_and_footer": ({"header": "# head\u00e9r", "footer": "# foot"}, ["x", "y"]),
    "more_than_a_block": ({}, [Model(index) for index in range(5000)]),
    "gzip": ({"file_name_suffix": ".gz", "header": "h"}, [Model(i) for i in range(3000)]),
    "bzip2": ({"file_name_suffix": ".bz2"}, [str(i) for i in range(3000)]),
    "deflate": ({"file_name_suffix": ".deflate"}, [str(i) for i in range(3000)]),
    "zstd": ({"file_name_suffix": ".zst"}, [Model(i) for i in range(3000)]),
    "counting_coder": ({"coder": CountingCoder()}, ["a", 1, Model(1)]),
    "no_elements": ({}, []),
}


@pytest.mark.parametrize("name", sorted(WRITE_CASES))
def test_write_to_text_writes_the_bytes_beam_writes(name, tmp_path, monkeypatch):
    settings, values = WRITE_CASES[name]
    beam_files, _ = compare_writes(
        tmp_path, lambda prefix: beam.io.WriteToText(prefix, **settings), _inputs(values),
        monkeypatch, bulk=bool(values))
    assert len(beam_files) == (1 if values else 0)
    if values and "coder" not in settings:
        content = _decompressed(beam_files[0][0], beam_files[0][1])
        assert str(values[-1]).encode("utf-8") in content or values[-1] in content


def test_elements_in_several_windows_are_each_written(tmp_path, monkeypatch):
    """WriteImpl's WindowInto(GlobalWindows) makes an element of each window: each is
    written once, in order, by the block writes."""
    beam_files, _ = compare_writes(
        tmp_path, lambda prefix: beam.io.WriteToText(prefix),
        _inputs(["a", "b", "c"], sliding=True), monkeypatch)
    assert beam_files[0][1] == b"a\na\na\nb\nb\nb\nc\nc\nc\n"


def test_errors_are_beams(tmp_path, monkeypatch):
    for index, bad in enumerate((BadStr(), Surrogate())):
        directory = tmp_path / str(index)
        directory.mkdir()
        _, ours = compare_writes(directory, lambda prefix: beam.io.WriteToText(prefix),
                                 _inputs(["fine", bad, "after"]), monkeypatch)
        kind, message = ours.error
        assert "[while running 'Write/Write/WriteImpl/WriteBundles']" in message
        assert ("no text for this one" in message) or ("surrogates not allowed" in message)


def test_a_file_per_shard_writes_the_bytes_beam_writes(tmp_path, monkeypatch):
    """``num_shards``: the step after WriteImpl's GroupByKey writes each shard's values."""
    inputs = [WindowedValue((shard, [Model(i) for i in range(shard, 4500, 2)]), Timestamp(0),
                            [GlobalWindow()]) for shard in range(2)]
    beam_files, _ = compare_writes(
        tmp_path, lambda prefix: beam.io.WriteToText(prefix, num_shards=2, header="h"),
        inputs, monkeypatch)
    assert len(beam_files) == 2


def test_a_user_sink_and_a_record_limit_keep_beams_writer(tmp_path, monkeypatch):
    for index, make in enumerate((
            lambda prefix: beam.io.Write(OwnSink(prefix)),
            lambda prefix: beam.io.WriteToText(prefix, max_records_per_shard=2))):
        directory = tmp_path / str(index)
        directory.mkdir()
        beam_files, ours = compare_writes(directory, make, _inputs(["a", "b", "c"]),
                                          monkeypatch, bulk=False)
        assert not ours.annotated
        assert beam_files


# ---------------------------------------------------------------------------------------
# WriteImpl's one-element stages (initialize, pre-finalize, finalize): planned for the driver
# only for Beam's own file sinks on local paths (runners/spark/text_io/sink_stages.py).

def _driver_side(build, **options) -> list:
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark.planning import execution_plan

    pipeline = beam.Pipeline()
    build(pipeline)
    plan = execution_plan.plan(execution_plan.pipeline_proto(pipeline, PipelineOptions([])),
                               **options)
    return sorted(stage.steps[-1].split("/")[-1] for stage in plan.stages
                  if stage.driver_side)


def test_only_beams_own_write_stages_are_planned_for_the_driver(tmp_path):
    prefix = str(tmp_path / "out")
    write_stages = ["FinalizeWrite", "InitializeWrite", "PreFinalize"]
    assert _driver_side(lambda p: p | beam.Create([1]) | beam.io.WriteToText(prefix)) == (
        write_stages)
    assert _driver_side(lambda p: p | beam.Create([1]) | beam.io.WriteToText(
        prefix, num_shards=2, file_name_suffix=".gz")) == write_stages
    assert _driver_side(lambda p: p | beam.Create([1]) | beam.io.WriteToText(prefix),
                        driver_stages=False) == []
    # A user's sink class: its methods are the user's code, run in tasks.
    assert _driver_side(lambda p: p | beam.Create([1]) | beam.io.Write(OwnSink(prefix))) == []
    # Remote storage: reached with the workers' credentials.
    assert _driver_side(lambda p: p | beam.Create([1])
                        | beam.io.WriteToText("s3://bucket/out")) == []
    # A user's Create | Map stage, even of one element, stays a Spark stage.
    assert _driver_side(lambda p: p | beam.Create([1]) | beam.Map(str)
                        | beam.io.WriteToText(prefix)) == write_stages
    assert _driver_side(lambda p: p | beam.Create([1]) | beam.Map(str)) == []
