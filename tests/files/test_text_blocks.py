"""Text reads and writes handing their values to and from a chain a block at a time give what
Beam's own operations give.

A bulk read whose one consumer is a chain hands it each block of lines with the restriction's
element as their carrier (``ChainedStepsOperation.process_values``); a chain whose last step
is ``WriteImpl``'s ``WindowInto(GlobalWindows)`` appends each value alone in the global window
to the writing step's block (``BulkTextWrite``, a ``BlockSink``). Each case runs the fused
stage in process (:func:`test_text_io.run_stage`) twice: every step as Beam's own operation
(``--bulk_text_io`` and ``--chain_simple_steps`` off), then the runner's (both on), and
compares the output elements in order (value, timestamp, windows, pane), the element count of
every PCollection, the sampled byte sizes (where Beam sampled every element, and that every
PCollection has some), user metrics by step, the bytes written, and exceptions (type and
message, the step named). A spy proves the block hand-over ran.

The SparkRunner and Spark Connect runs of the same shapes are Beam's Nexmark benchmark's
(``bench/nexmark``) and ``test_file_io.py``.
"""

from __future__ import annotations

import typing

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import FixedWindows, GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.chains.operation import ChainedStepsOperation
from runners.spark.text_io import write as text_write

from test_text_io import (
    MIXED,
    NAMESPACE,
    PROCESS,
    READ_RANGE,
    SLIDING,
    _source_of,
    ranges,
    restrictions,
    run_stage,
)
from test_text_write import WRITE, BadStr, Model, _files_of, _inputs

TAKES_BLOCKS = (ChainedStepsOperation, "process_values")
APPENDS_TO_BLOCKS = (text_write.BulkTextWrite, "open_block")


class StampFn(beam.DoFn):
    """Counts what it sees (a user metric of its step), stamps each line with its length."""

    def __init__(self):
        self.lines = Metrics.counter(NAMESPACE, "lines")

    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        self.lines.inc()
        yield beam.window.TimestampedValue((element, timestamp.micros), 5 + len(element[0]))


class DescribeFn(beam.DoFn):
    """Invoked once per window of its element (as Beam's invoker does for a window
    parameter)."""

    def process(self, element, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        (line, _), micros = element
        if line == "bad":
            raise ValueError(f"no description for {line!r}")
        yield f"{line} at {micros} in {window} ({pane.timing})"


def _after_the_read(read):
    def build(pipeline):
        return (pipeline | "Read" >> read()
                | "Pair" >> beam.Map(lambda line: (line, len(line)))
                | "Stamp" >> beam.ParDo(StampFn())
                | "Keep" >> beam.Filter(lambda pair: pair[0][1] % 3 != 1)
                | "Window" >> beam.WindowInto(FixedWindows(4))
                | "Describe" >> beam.ParDo(DescribeFn()))
    return build


def compare(build, suffix, inputs, monkeypatch, spied):
    """Run the stage as Beam's operations, then as the runner's; assert the same results;
    return the runner's run, which must have called ``spied``."""
    beam_run = run_stage(build, suffix, inputs, False, monkeypatch, spied, chain_steps=False)
    ours = run_stage(build, suffix, inputs, True, monkeypatch, spied, chain_steps=True)
    assert beam_run.bulk_calls == 0
    assert ours.bulk_calls >= 1  # the block hand-over ran
    assert ours.error == beam_run.error
    assert ours.elements == beam_run.elements  # the same elements, in the same order
    assert ours.counts == beam_run.counts
    assert ours.user_metrics == beam_run.user_metrics
    assert set(ours.sizes) == set(beam_run.sizes)
    for pcollection, sampled in beam_run.sizes.items():
        if beam_run.counts.get(pcollection, 0) <= 10:  # Beam sampled every element
            assert ours.sizes[pcollection] == sampled, pcollection
        elif beam_run.counts.get(pcollection):
            assert ours.sizes[pcollection][0] >= 10, pcollection  # (count, sum, min, max)
    return ours


def _many_lines(count: int) -> bytes:
    return b"".join(b"line %d of the file\n" % index for index in range(count))


@pytest.mark.parametrize("chunk", [None, 9, 20_000])
def test_a_chain_after_read_from_text_takes_its_lines_in_blocks(chunk, tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_bytes(MIXED)
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "many.txt").write_bytes(_many_lines(30_000))
    read = lambda: beam.io.ReadFromText(str(tmp_path / "*"))  # noqa: E731
    inputs = restrictions(_source_of(read()), chunk)
    ours = compare(_after_the_read(read), PROCESS, inputs, monkeypatch, TAKES_BLOCKS)
    assert len(ours.elements) > 5_000
    assert ours.user_metrics[("Stamp", NAMESPACE, "lines")] == 30_000 + 6


def test_a_chain_after_read_all_from_text_takes_lines_in_windows_with_panes(
        tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_bytes(MIXED)
    (tmp_path / "many.txt").write_bytes(_many_lines(5_000))

    def read():
        return beam.io.ReadAllFromText(with_filename=True)

    def build(pipeline):
        return _after_the_read(read)(pipeline | "Patterns" >> beam.Create(["unused"])
                                     | "Slide" >> beam.WindowInto(SLIDING))

    ours = compare(build, READ_RANGE, ranges(str(tmp_path / "*"), 4096), monkeypatch,
                   TAKES_BLOCKS)
    assert len(ours.elements) > 5_000  # each line once per window of its range
    assert all(" in [" in value for value, *_ in ours.elements)  # a window each


def test_an_error_in_the_chain_names_its_step_as_beam_does(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_bytes(_many_lines(3_000) + b"bad\n" + _many_lines(10))
    read = lambda: beam.io.ReadFromText(str(tmp_path / "a.txt"))  # noqa: E731
    ours = compare(_after_the_read(read), PROCESS, restrictions(_source_of(read()), None),
                   monkeypatch, TAKES_BLOCKS)
    kind, message = ours.error
    assert kind is ValueError and "no description for 'bad'" in message
    assert "Describe" in message


class CountThenTotal(beam.DoFn):
    """Passes its elements on, then outputs how many it saw from ``finish_bundle`` (which the
    chain runs through the steps after it)."""

    def start_bundle(self):
        self.seen = 0

    def process(self, element):
        self.seen += 1
        yield element

    def finish_bundle(self):
        yield WindowedValue(f"total {self.seen}", MAX_TIMESTAMP, [GlobalWindow()])


def _write_build(prefix: str, format_step=None, **settings):
    def build(pipeline):
        return (pipeline | beam.Impulse()
                | "Any" >> beam.Map(lambda _: 0).with_output_types(typing.Any)
                | "In" >> beam.Reshuffle()
                | "Format" >> (format_step or beam.Map(lambda value: value))
                | "Write" >> beam.io.WriteToText(prefix, **settings))
    return build


def compare_writes(tmp_path, inputs, monkeypatch, format_step=None, **settings):
    """Write ``inputs`` through a chain as Beam's operations, then as the runner's; assert
    the same files, outputs, counts and metrics; return the runner's run."""
    runs, files = [], []
    for ours in (False, True):
        directory = tmp_path / ("ours" if ours else "beam")
        directory.mkdir()
        run = run_stage(_write_build(str(directory / "out"), format_step, **settings), WRITE,
                        inputs, ours, monkeypatch, APPENDS_TO_BLOCKS, chain_steps=ours)
        runs.append(run)
        files.append(_files_of(run) if run.error is None else [])
    (beam_run, ours), (beam_files, our_files) = runs, files
    assert ours.error == beam_run.error
    assert our_files == beam_files  # the same bytes, file by file
    assert [element[1:] for element in ours.elements] == [
        element[1:] for element in beam_run.elements]  # timestamps, windows, panes
    assert ours.counts == beam_run.counts
    assert ours.user_metrics == beam_run.user_metrics
    assert beam_run.bulk_calls == 0 and ours.bulk_calls >= 1
    return ours


@pytest.mark.parametrize("count", [1, 2048, 5000])
def test_a_chain_before_write_to_text_appends_to_its_blocks(count, tmp_path, monkeypatch):
    ours = compare_writes(tmp_path, _inputs([Model(index) for index in range(count)]),
                          monkeypatch, header="# header", file_name_suffix=".gz")
    # One bundle: each block opened by its first value.
    assert ours.bulk_calls == -(-count // text_write.BLOCK_SIZE)


def test_elements_in_windows_between_blocks_keep_their_order(tmp_path, monkeypatch):
    values = [Model(index) for index in range(3000)]
    inputs = (_inputs(values[:1000]) + _inputs(values[1000:1100], sliding=True)
              + _inputs(values[1100:]))
    compare_writes(tmp_path, inputs, monkeypatch)


def test_an_error_writing_a_full_block_is_beams(tmp_path, monkeypatch):
    values = [Model(index) for index in range(2100)]
    values[100] = BadStr()
    ours = compare_writes(tmp_path, _inputs(values), monkeypatch)
    assert ours.error is not None and "no text for this one" in ours.error[1]


def test_what_finish_bundle_outputs_goes_to_the_block_after_the_elements(tmp_path, monkeypatch):
    ours = compare_writes(tmp_path, _inputs([Model(index) for index in range(3000)]),
                          monkeypatch, beam.ParDo(CountThenTotal()))
    ((_, written),) = _files_of(ours)
    assert written.endswith(b"total 3000\n")
