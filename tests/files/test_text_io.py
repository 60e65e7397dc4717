"""The runner's bulk text read (``--bulk_text_io``) gives what Beam's own read gives.

Each case writes files (odd line endings, delimiters, escapes, headers, compression, long
lines, empty files), plans a read of them with the option on and off, and runs the fused
stage that reads (the process step of ``ReadFromText``'s splittable DoFn, or
``ReadAllFromText``'s ``_ReadRange``) in process (:class:`runners.spark.worker.bundles.
StageProcessor`, no Spark) on the same restrictions: each file split into ranges of a few
bytes as Beam splits it (``FileBasedSource.split`` with a small bundle size), and whole.
Compared: the output elements *in order* (value, timestamp, windows, pane), the element
count of every PCollection, the sampled byte sizes where Beam samples every element, user
metrics (a coder that counts), and exceptions (type, message naming the step). A spy on the
bulk path proves which path ran: the bulk read for Beam's text source, Beam's own for a
user's source class and for settings it leaves to Beam.

The SparkRunner and Spark Connect runs are in ``test_file_io.py``.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import os
import random
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
import pytest
import zstandard
from apache_beam.coders import coders
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.io import filebasedsource, iobase, textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.metrics import Metrics, monitoring_infos
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.transforms.window import GlobalWindow, IntervalWindow, SlidingWindows
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import (
    PANE_INFO_UNKNOWN,
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
)

from runners.spark.chains.planning import RUNNER_OPERATION
from runners.spark.planning import execution_plan
from runners.spark.text_io import lines as text_lines
from runners.spark.text_io import read as text_read
from runners.spark.worker.bundles import StageProcessor

NAMESPACE = "text_io_test"


class CountingCoder(coders.Coder):
    """A user's coder: decodes latin-1, counts what it decodes (a user metric of the read)."""

    def decode(self, encoded):
        Metrics.counter(NAMESPACE, "decoded").inc()
        return encoded.decode("latin-1")

    def encode(self, value):
        return value.encode("latin-1")

    def is_deterministic(self):
        return True


class FailingCoder(CountingCoder):
    def decode(self, encoded):
        if b"bad" in encoded:
            raise ValueError(f"cannot decode {encoded!r}")
        return super().decode(encoded)


class UpperTextSource(textio._TextSource):
    """A user's FileBasedSource: Beam's text source, its records upper-cased."""

    def read_records(self, file_name, range_tracker):
        for record in super().read_records(file_name, range_tracker):
            yield record.upper()


class ReadUpper(beam.PTransform):
    def __init__(self, pattern):
        super().__init__()
        self.source = UpperTextSource(pattern, 0, CompressionTypes.AUTO, True,
                                      coders.StrUtf8Coder(), validate=False)

    def expand(self, pbegin):
        return pbegin | iobase.Read(self.source)


# ---------------------------------------------------------------------------------------
# Files.

MIXED = (b"first\nsecond\r\nthird\rstill third\n\n\r\nlast without newline")
UNICODE = "caf\u00e9\nna\u00efve \u2603\r\n\u00fcber\n".encode("utf-8")


def _noise(seed: int, count: int) -> bytes:
    """Random short lines of letters, separators and escape characters."""
    choices = [b"a", b"b", b"\n", b"\r", b"\\", b"|", b"#", b"\xc3\xa9", b"xy", b"\r\n"]
    generator = random.Random(seed)
    return b"".join(generator.choice(choices) for _ in range(count))


def _compressed(kind: str, data: bytes) -> bytes:
    if kind == "gz":
        return gzip.compress(data)
    if kind == "bz2":
        return bz2.compress(data)
    if kind == "deflate":
        return zlib.compress(data)
    if kind == "zst":
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(kind)


# ---------------------------------------------------------------------------------------
# The harness: the reading stage, in process.

@dataclasses.dataclass
class StageRun:
    elements: list  # (value, timestamp, windows, pane), in order
    counts: dict  # PCollection id -> element_count
    sizes: dict  # PCollection id -> sampled byte sizes
    user_metrics: dict  # (step, namespace, name) -> counter value
    error: Any  # (type, message) of what the bundle raised, or None
    bulk_calls: int  # calls of the runner's path (the spied function)
    annotated: list  # steps the plan marked for the runner's operations


def _plan_of(build: Callable[[Any], Any], text_io: bool, chain_steps: bool = True):
    options = PipelineOptions([])
    pipeline = beam.Pipeline(options=options)
    lines = build(pipeline)
    _ = (pipeline | "Probe" >> beam.Impulse()
         | "Sink" >> beam.Map(lambda _, side: None, beam.pvalue.AsIter(lines)))
    return execution_plan.plan(execution_plan.pipeline_proto(pipeline, options),
                               text_io=text_io, chain_steps=chain_steps)


def _reading_stage(plan, suffix: str):
    (stage,) = [stage for stage in plan.stages
                if any(step.endswith(suffix) for step in stage.steps)]
    return stage


def _port_coder(context, descriptor, transform_id: str):
    port = beam_fn_api_pb2.RemoteGrpcPort.FromString(
        descriptor.transforms[transform_id].spec.payload)
    return context.coders.get_by_id(port.coder_id).get_impl()


#: What each run spies on: the one entry of the runner's bulk path.
SPIED = (text_read.TextFile, "emit")


def run_stage(build: Callable[[Any], Any], suffix: str, inputs: Sequence[WindowedValue],
              text_io: bool, monkeypatch, spied: tuple = SPIED,
              chain_steps: bool = True) -> StageRun:
    """Plan the pipeline ``build`` makes (its result read as a side input, so the stage
    writes it out), run the stage whose step ends in ``suffix`` on ``inputs`` (one bundle),
    and decode what it writes; ``spied``: ``(owner, name)`` of the function whose calls
    are counted."""
    plan = _plan_of(build, text_io, chain_steps)
    stage = _reading_stage(plan, suffix)
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    annotated = [transform.unique_name for transform in descriptor.transforms.values()
                 if RUNNER_OPERATION in transform.annotations]
    context = PipelineContext(plan.components)
    (spec,) = stage.inputs
    coder = _port_coder(context, descriptor, spec.transform_id)
    stream = create_OutputStream()
    for element in inputs:
        coder.encode_to_stream(element, stream, True)
    calls = []
    owner, name = spied
    original = _ORIGINALS.setdefault(spied, getattr(owner, name))

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    processor = StageProcessor(stage.descriptor)
    try:
        outputs, _, _, infos = processor.run_bundle({spec.transform_id: [stream.get()]}, {})
    except Exception as error:  # noqa: BLE001 - compared with Beam's own
        return StageRun([], {}, {}, {}, (type(error), str(error)), len(calls), annotated)
    elements = []
    for output_id, _ in stage.outputs:
        output_coder = _port_coder(context, descriptor, output_id)
        for chunk in outputs.get(output_id, []):
            input_stream = create_InputStream(chunk)
            while input_stream.size() > 0:
                element = output_coder.decode_from_stream(input_stream, True)
                elements.append((element.value, element.timestamp, tuple(element.windows),
                                 element.pane_info))
    counts, sizes, user_metrics = {}, {}, {}
    for info in infos:
        if info.urn == monitoring_infos.ELEMENT_COUNT_URN:
            counts[info.labels["PCOLLECTION"]] = monitoring_infos.extract_counter_value(info)
        elif info.urn == monitoring_infos.SAMPLED_BYTE_SIZE_URN:
            sizes[info.labels["PCOLLECTION"]] = monitoring_infos.extract_distribution(info)
        elif info.urn == monitoring_infos.USER_COUNTER_URN:
            user_metrics[(info.labels["PTRANSFORM"], info.labels["NAMESPACE"],
                          info.labels["NAME"])] = monitoring_infos.extract_counter_value(info)
    return StageRun(elements, counts, sizes, user_metrics, None, len(calls), annotated)


_ORIGINALS: dict = {}


def restrictions(source: Any, chunk: int | None) -> list[WindowedValue]:
    """What the process step of Beam's bounded-source SDF receives for ``source``: its
    restrictions as ``SplitAndSizeRestrictions`` makes them (``chunk`` bytes each, or Beam's
    own size), with the watermark estimator's initial state, as the Impulse left them."""
    provider = iobase._SDFBoundedSourceRestrictionProvider(desired_chunk_size=chunk)
    initial = provider.initial_restriction(source)
    return [WindowedValue(((source, (restriction, None)),
                           provider.restriction_size(source, restriction)),
                          MIN_TIMESTAMP, [GlobalWindow()])
            for restriction in provider.split(source, initial)]


def ranges(pattern: str, chunk: int, with_windows: bool = True) -> list[WindowedValue]:
    """What ``ReadAllFromText``'s ``_ReadRange`` receives for ``pattern``: ``(metadata,
    range)`` of each file, ``chunk`` bytes each (``_ExpandIntoRanges``), each element at its
    own timestamp, in two windows, with a pane (all of which the read's output keeps)."""
    expand = filebasedsource._ExpandIntoRanges(True, CompressionTypes.AUTO, chunk, 0)
    elements = []
    for index, pair in enumerate(expand.process(pattern)):
        if with_windows:  # SLIDING's windows of the timestamp
            windows = [IntervalWindow(-50, 50), IntervalWindow(0, 100)]
            pane = PaneInfo(True, False, PaneInfoTiming.EARLY, 0, 0) if index % 2 else (
                PANE_INFO_UNKNOWN)
        else:
            windows, pane = [GlobalWindow()], PANE_INFO_UNKNOWN
        elements.append(WindowedValue(pair, Timestamp(7 + index), windows, pane))
    return elements


def compare(build, suffix: str, inputs, monkeypatch, bulk: bool = True) -> StageRun:
    """Run the read with the option off and on; assert the same results; return the bulk
    run (``bulk``: whether the bulk path must have read every restriction)."""
    beam_run = run_stage(build, suffix, inputs, False, monkeypatch)
    ours = run_stage(build, suffix, inputs, True, monkeypatch)
    assert beam_run.bulk_calls == 0 and not beam_run.annotated
    assert ours.annotated and all(name.endswith(suffix) for name in ours.annotated)
    assert ours.error == beam_run.error
    assert ours.elements == beam_run.elements  # the same elements, in the same order
    assert ours.counts == beam_run.counts
    assert ours.user_metrics == beam_run.user_metrics
    for pcollection, sampled in beam_run.sizes.items():
        if beam_run.counts.get(pcollection, 0) <= 10:  # Beam sampled every element
            assert ours.sizes[pcollection] == sampled, pcollection
    if bulk:
        assert ours.bulk_calls >= 1
    else:
        assert ours.bulk_calls == 0
    return ours


def _source_of(transform: beam.PTransform) -> Any:
    return transform._source


# ---------------------------------------------------------------------------------------
# ReadFromText and ReadFromTextWithFilename: the splittable DoFn's process step.

PROCESS = "/Process"


@dataclasses.dataclass
class Case:
    files: dict  # name -> content (bytes)
    settings: dict  # ReadFromText's arguments
    chunks: tuple = (None, 5, 13)  # bundle sizes to split each file into (None: Beam's)
    with_filename: bool = False
    bulk: bool = True


READ_CASES = {
    "mixed_line_endings": Case({"a.txt": MIXED}, {}),
    "unicode": Case({"u.txt": UNICODE}, {}),
    "kept_newlines": Case({"a.txt": MIXED}, {"strip_trailing_newlines": False}),
    "header": Case({"a.txt": MIXED}, {"skip_header_lines": 2}),
    "header_longer_than_file": Case({"a.txt": b"one\ntwo"}, {"skip_header_lines": 3}),
    "header_line_without_newline": Case({"a.txt": b"one\ntwo"}, {"skip_header_lines": 2}),
    "custom_delimiter": Case({"d.txt": b"a|b||c\n|d\r|"}, {"delimiter": b"|"}),
    "long_delimiter": Case({"d.txt": b"a#|b#|#||c#|d#"}, {"delimiter": b"#|"}),
    "escaped_newlines": Case({"e.txt": b"a\\\nb\nc\\\\\nd\\\r\ne\\\n\nf"},
                             {"escapechar": b"\\"}),
    "escaped_delimiter": Case({"e.txt": b"a\\|b|c\\\\|d\\"},
                              {"delimiter": b"|", "escapechar": b"\\"}),
    "escapechar_in_delimiter_left_to_beam": Case(
        {"e.txt": b"a|;b;c|;;d"}, {"delimiter": b"|;", "escapechar": b";"}, bulk=False),
    "empty_and_only_newlines": Case({"empty.txt": b"", "newlines.txt": b"\n\n\r\n"}, {}),
    "noise": Case({f"n{seed}.txt": _noise(seed, 400) for seed in range(3)}, {},
                  chunks=(None, 7, 64)),
    "noise_escaped": Case({f"n{seed}.txt": _noise(seed, 400) for seed in range(3)},
                          {"escapechar": b"#", "skip_header_lines": 1}, chunks=(None, 9)),
    "noise_delimited": Case({f"n{seed}.txt": _noise(seed, 400) for seed in range(3)},
                            {"delimiter": b"xy", "strip_trailing_newlines": False},
                            chunks=(None, 11)),
    "gzip": Case({"g.txt.gz": _compressed("gz", MIXED)}, {"skip_header_lines": 1}),
    "bzip2": Case({"b.txt.bz2": _compressed("bz2", UNICODE)}, {}),
    "deflate": Case({"d.txt.deflate": _compressed("deflate", MIXED)}, {}),
    "zstd": Case({"z.txt.zst": _compressed("zst", MIXED)}, {}),
    "gzip_named_plainly": Case({"g.data": _compressed("gz", MIXED)},
                               {"compression_type": CompressionTypes.GZIP}),
    "bytes_coder": Case({"a.txt": MIXED + b"\xff\xfe"}, {"coder": coders.BytesCoder()}),
    "counting_coder": Case({"a.txt": MIXED}, {"coder": CountingCoder()}),
    "with_filename": Case({"a.txt": MIXED, "b.txt.gz": _compressed("gz", UNICODE)}, {},
                          with_filename=True),
    "long_lines": Case({"long.txt": b"x" * (3 << 20) + b"\n" + b"y" * 10 + b"\n"
                        + b"z" * (2 << 20)}, {}, chunks=(None, 1 << 20)),
    "many_lines": Case({"many.txt": b"".join(b"line %d\n" % index
                                             for index in range(200_000))}, {},
                       chunks=(None, 300_001)),
}


@pytest.mark.parametrize("name", sorted(READ_CASES))
def test_read_from_text_as_beam_reads_it(name, tmp_path, monkeypatch):
    case = READ_CASES[name]
    for file_name, content in case.files.items():
        (tmp_path / file_name).write_bytes(content)
    pattern = str(tmp_path / "*")
    kind = beam.io.ReadFromTextWithFilename if case.with_filename else beam.io.ReadFromText
    transform = kind(pattern, **case.settings)

    def build(pipeline):
        return pipeline | "Read" >> kind(pattern, **case.settings)

    for chunk in case.chunks:
        inputs = restrictions(_source_of(transform), chunk)
        ours = compare(build, PROCESS, inputs, monkeypatch,
                       bulk=case.bulk and any(content for content in case.files.values()))
        if case.bulk:
            assert ours.bulk_calls == len(inputs)  # every restriction read in bulk


def test_a_split_in_the_middle_of_a_crlf_and_of_a_delimiter(tmp_path, monkeypatch):
    """Every split point of a small file: each line read once, by the range it starts in."""
    data = b"ab\r\ncd#|ef\r\n\r\ngh#|#|ij"
    (tmp_path / "f.txt").write_bytes(data)
    for settings, expected in (({}, ["ab", "cd#|ef", "", "gh#|#|ij"]),
                               ({"delimiter": b"#|"}, ["ab\r\ncd", "ef\r\n\r\ngh", "", "ij"])):
        transform = beam.io.ReadFromText(str(tmp_path / "f.txt"), **settings)
        for chunk in range(1, len(data) + 1):
            inputs = restrictions(_source_of(transform), chunk)
            ours = compare(lambda p, s=settings: p | "Read" >> beam.io.ReadFromText(
                str(tmp_path / "f.txt"), **s), PROCESS, inputs, monkeypatch)
            assert [value for value, *_ in ours.elements] == expected, (settings, chunk)


def test_a_user_source_class_keeps_beams_read(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_bytes(MIXED)
    transform = ReadUpper(str(tmp_path / "a.txt"))
    ours = compare(lambda p: p | "Read" >> ReadUpper(str(tmp_path / "a.txt")), PROCESS,
                   restrictions(transform.source, 7), monkeypatch, bulk=False)
    assert [value for value, *_ in ours.elements][:2] == ["FIRST", "SECOND"]


def test_errors_name_the_step_as_beam_does(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_bytes(b"good\nbad line\ngood again\n")
    (tmp_path / "u.txt").write_bytes(b"fine\ncaf\xe9\n")
    cases = [
        (lambda: beam.io.ReadFromText(str(tmp_path / "a.txt"), coder=FailingCoder()),
         "cannot decode"),
        (lambda: beam.io.ReadFromText(str(tmp_path / "u.txt")), "can't decode byte 0xe9"),
    ]
    for make, message in cases:
        inputs = restrictions(_source_of(make()), None)
        ours = compare(lambda p, m=make: p | "Read" >> m(), PROCESS, inputs, monkeypatch)
        kind, text = ours.error  # (Beam's DoFnRunner does not name a splittable DoFn's step)
        assert message in text
    # A file gone between the split and the read.
    (tmp_path / "gone.txt").write_bytes(b"soon gone\n")
    inputs = restrictions(_source_of(beam.io.ReadFromText(str(tmp_path / "gone.txt"))), None)
    os.remove(tmp_path / "gone.txt")
    ours = compare(lambda p: p | "Read" >> beam.io.ReadFromText(
        str(tmp_path / "gone.txt"), validate=False), PROCESS, inputs, monkeypatch)
    assert ours.error is not None and "gone.txt" in ours.error[1]


# ---------------------------------------------------------------------------------------
# ReadAllFromText: the _ReadRange ParDo, its elements in windows, with timestamps and panes.

READ_RANGE = "/ReadRange"
SLIDING = SlidingWindows(100, 50)

READ_ALL_CASES = {
    "plain": ({"a.txt": MIXED, "u.txt": UNICODE}, {}),
    "with_filename": ({"a.txt": MIXED, "b.txt.bz2": _compressed("bz2", MIXED)},
                      {"with_filename": True}),
    "header_and_gzip": ({"a.txt": MIXED, "g.txt.gz": _compressed("gz", MIXED)},
                        {"skip_header_lines": 1}),
    "delimiter_kept": ({"d.txt": b"a|b||c\n|d\r|"},
                       {"delimiter": b"|", "strip_trailing_newlines": False}),
    "escaped": ({"e.txt": b"a\\\nb\nc\\\\\nd\\\r\ne\\\n\nf"}, {"escapechar": b"\\"}),
    "counting_coder": ({"a.txt": MIXED}, {"coder": CountingCoder()}),
    "empty_file": ({"empty.txt": b"", "a.txt": b"x\n"}, {}),
}


@pytest.mark.parametrize("name", sorted(READ_ALL_CASES))
def test_read_all_from_text_as_beam_reads_it(name, tmp_path, monkeypatch):
    files, settings = READ_ALL_CASES[name]
    for file_name, content in files.items():
        (tmp_path / file_name).write_bytes(content)
    pattern = str(tmp_path / "*")

    def build(pipeline):
        return (pipeline | "Patterns" >> beam.Create([pattern])
                | "Slide" >> beam.WindowInto(SLIDING)
                | "ReadAll" >> beam.io.ReadAllFromText(**settings))

    for chunk in (4, 1 << 20):
        inputs = ranges(pattern, chunk)
        ours = compare(build, READ_RANGE, inputs, monkeypatch)
        assert {windows for _, _, windows, _ in ours.elements} == {
            (IntervalWindow(-50, 50), IntervalWindow(0, 100))}
        assert len({pane for *_, pane in ours.elements}) == min(len(inputs), 2)


# ---------------------------------------------------------------------------------------
# The line reader alone, against Beam's _TextSource.read_records on random files.

@pytest.mark.parametrize("chunk_size", [1, 3, 64, text_lines.CHUNK_SIZE])
def test_random_files_and_ranges_read_as_beam_reads_them(chunk_size, tmp_path, monkeypatch):
    """Random bytes and settings, every range split at random points, our chunks as small
    as one byte (chunk boundaries everywhere): the records of each range are Beam's."""
    from apache_beam.io.range_trackers import OffsetRangeTracker

    monkeypatch.setattr(text_lines, "CHUNK_SIZE", chunk_size)
    generator = random.Random(chunk_size)
    path = str(tmp_path / "f.txt")
    compared = 0
    for _ in range(400):
        data = _noise(generator.randrange(1 << 30), generator.choice([0, 1, 5, 40, 300]))
        (tmp_path / "f.txt").write_bytes(data)
        line_format = text_lines.LineFormat(
            generator.choice([None, None, b"|", b"#|", b"ab"]),
            generator.choice([None, None, b"\\", b"#"]), generator.random() < 0.7,
            generator.choice([0, 0, 1, 2]))
        if text_lines.supported(line_format) is not None:
            continue
        source = textio._TextSource(
            path, 0, CompressionTypes.UNCOMPRESSED, line_format.strip_trailing_newlines,
            coders.BytesCoder(), validate=False,
            skip_header_lines=line_format.skip_header_lines,
            delimiter=line_format.delimiter, escapechar=line_format.escapechar)
        cuts = sorted({0, len(data), *(generator.randint(0, len(data)) for _ in range(3))})
        bounds = [(start, stop) for start, stop in zip(cuts, cuts[1:]) if start < stop]
        for start, stop in bounds + [(0, None)]:
            tracker = OffsetRangeTracker(
                start, OffsetRangeTracker.OFFSET_INFINITY if stop is None else stop)
            expected = list(source.read_records(path, tracker))
            with open(path, "rb") as file:
                got = [record for block in text_lines.records(file, line_format, start, stop)
                       for record in block.raw_records()]
            assert got == expected, (data, line_format, start, stop)
            compared += 1
    assert compared > 300


def test_unsupported_formats_are_said_so():
    assert text_lines.supported(text_lines.LineFormat(escapechar=b"\n")) is not None
    assert text_lines.supported(text_lines.LineFormat(b"ab", b"b")) is not None
    assert text_lines.supported(text_lines.LineFormat(b"ab", b"\\")) is None
    assert text_lines.supported(text_lines.LineFormat()) is None


def test_the_option_off_plans_no_runner_operation(tmp_path):
    def build(pipeline):
        return pipeline | beam.io.ReadFromText(str(tmp_path / "*"), validate=False)

    for text_io, expected in ((True, 1), (False, 0)):
        plan = _plan_of(build, text_io)
        marked = [transform.unique_name for stage in plan.stages if stage.descriptor
                  for transform in beam_fn_api_pb2.ProcessBundleDescriptor.FromString(
                      stage.descriptor).transforms.values()
                  if RUNNER_OPERATION in transform.annotations]
        assert len(marked) == expected, marked
        assert all(name.endswith(PROCESS) for name in marked)


