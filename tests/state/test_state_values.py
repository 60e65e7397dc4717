"""A job's state read as values, for a pipeline without type hints.

Beam encodes untyped keys and values with ``FastPrimitivesCoder``, a coder the runner does
not know: it holds their encodings as opaque bytes, and a lifted combine's GroupByKey holds
accumulators, not elements. One real streaming job on the SparkRunner (str keys, no type
hints: a ``CombinePerKey(sum)`` and a stateful DoFn with a bag of tuples) stops after 2
batches, and its checkpoint is read: keys, accumulators, bag values and timers decoded, and
the one value only unpickling could decode (a standard-library object in a bag) shown as
bytes with the reason. The expectations come from the TestStream's events.
"""

from __future__ import annotations

import ast
import collections
import ipaddress
import pickle

import apache_beam as beam
import pytest
from apache_beam.coders import FastPrimitivesCoder, PickleCoder, coders
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.testing import test_stream as streams
from apache_beam.transforms import userstate
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from beam_spark.commands import main as beam_spark
from runners.spark.state.manifest_coders import encode_coder, load_coders
from runners.spark.state.safe_decoding import (
    SafePickleCoder,
    SafePrimitivesCoder,
    UnsafeValueError,
)
from runners.spark.state.table.reader import state_rows

#: (key, value, event time in seconds) of each batch; every event in the window [0, 60).
BATCHES = [[("k1", 1, 1), ("k2", 2, 2)], [("k1", 3, 3), ("k3", 4, 4)]]
#: The value the stateful DoFn keeps as a standard-library object (pickled by Beam).
ADDRESS_VALUE = 4
WINDOW = "[0.0, 60.0)"
COMBINE = "Sum/Group"


class KeepPairs(beam.DoFn):
    """Keeps ``(value, "seen")`` per key and window in a bag (``FastPrimitivesCoder``), an
    IP address for :data:`ADDRESS_VALUE`, and sets a timer at the window's end."""

    PAIRS = userstate.BagStateSpec("pairs", FastPrimitivesCoder())
    END = userstate.TimerSpec("end", userstate.TimeDomain.WATERMARK)

    def process(self, element, window=beam.DoFn.WindowParam,
                pairs=beam.DoFn.StateParam(PAIRS), end=beam.DoFn.TimerParam(END)):
        value = element[1]
        pairs.add(ipaddress.ip_address(f"10.0.0.{value}") if value == ADDRESS_VALUE
                  else (value, "seen"))
        end.set(window.end)

    @userstate.on_timer(END)
    def flush(self, pairs=beam.DoFn.StateParam(PAIRS)):
        yield list(pairs.read())


@pytest.fixture(scope="module")
def rows(tmp_path_factory, spark_session):
    """The checkpoint directory, and its rows after the 2 batches."""
    from runners.spark import SparkRunner

    checkpoint_dir = str(tmp_path_factory.mktemp("state_values") / "checkpoints")
    stream = streams.TestStream()
    for batch in BATCHES:
        stream = stream.add_elements([TimestampedValue((key, value), seconds)
                                      for key, value, seconds in batch])
    options = PipelineOptions([], streaming=True, checkpoint_dir=checkpoint_dir,
                              checkpoint_interval_batches=1, max_batches=len(BATCHES))
    with beam.Pipeline(runner=SparkRunner(spark_session), options=options) as pipeline:
        windowed = pipeline | stream | beam.WindowInto(FixedWindows(60))
        _ = windowed | "Sum" >> beam.CombinePerKey(sum)
        _ = windowed | "Keep" >> beam.ParDo(KeepPairs())
    return checkpoint_dir, list(state_rows(checkpoint_dir))


def test_untyped_keys_and_a_lifted_combines_accumulators_read_as_values(rows):
    _, found = rows
    combine = [row for row in found if row.step == COMBINE]
    accumulators = [row for row in combine if row.kind == "elements"]
    assert {row.name for row in accumulators} == {"accumulator"}
    # sum's accumulators are lists of the values added; per key they add up to its sum.
    sums = collections.Counter()
    for row in accumulators:
        assert row.window == WINDOW
        sums[row.key] += sum(ast.literal_eval(row.value))
    expected = collections.Counter()
    for key, value, _ in (event for batch in BATCHES for event in batch):
        expected[key] += value
    assert sums == expected
    # The key shown is the one its stored bytes encode (the SDK's FastPrimitivesCoder).
    assert all(SafePrimitivesCoder().decode(row.key_bytes) == row.key for row in combine)
    assert all(FastPrimitivesCoder().decode(row.value_bytes) == ast.literal_eval(row.value)
               for row in accumulators)


def test_a_stateful_dofns_untyped_bag_and_timers_read_as_values(rows):
    _, found = rows
    keep = [row for row in found if row.step != COMBINE]
    cells = [row for row in keep if row.kind == "cell"]
    assert {row.name for row in cells} == {"Keep/pairs"}
    decoded = sorted((row.key, row.value) for row in cells if "not decoded" not in row.value)
    assert decoded == sorted((key, repr((value, "seen")))
                             for key, value, _ in (event for batch in BATCHES for event in batch)
                             if value != ADDRESS_VALUE)
    timers = {(row.key, row.window, row.timestamp) for row in keep if row.kind == "timer"}
    assert timers == {(key, WINDOW, 60_000_000) for key in ("k1", "k2", "k3")}


def test_a_value_only_unpickling_could_decode_is_shown_as_bytes_with_why(rows):
    _, found = rows
    refused = [row for row in found if row.kind == "cell" and "not decoded" in row.value]
    assert [row.key for row in refused] == ["k3"]
    (row,) = refused
    assert row.value.startswith(repr(row.value_bytes))
    assert "a pickled ipaddress.IPv4Address" in row.value
    # Beam's own coder reads those bytes as the address: they are the value, kept whole (as
    # a bag keeps its values: each in its nested encoding).
    assert FastPrimitivesCoder().get_impl().decode_nested(row.value_bytes) == (
        ipaddress.ip_address("10.0.0.4"))


def table_cells(lines):
    """The printed table's rows as {column: cell}, cut by the header's dashes."""
    header, dashes = lines[1], lines[2]
    spans, start = [], 0
    for dash in dashes.split("  "):
        spans.append((start, start + len(dash)))
        start += len(dash) + 2
    names = [header[begin:end].strip() for begin, end in spans]
    return [{name: line[begin:end].strip() for name, (begin, end) in zip(names, spans)}
            for line in lines[3:] if line.startswith(COMBINE)]


def test_the_state_command_prints_keys_and_values_decoded(rows, capsys):
    checkpoint_dir, _ = rows
    assert beam_spark(["state", "--checkpoint_dir", checkpoint_dir, "--step", COMBINE]) == 0
    table = table_cells(capsys.readouterr().out.splitlines())
    assert {row["key"] for row in table} == {"k1", "k2", "k3"}
    assert sorted(row["value"] for row in table if row["name"] == "accumulator") == [
        "[1]", "[2]", "[3]", "[4]"]
    assert beam_spark(["state", "--checkpoint_dir", checkpoint_dir]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("1 cell(s) shown as bytes, not decoded: a pickled "
                           "ipaddress.IPv4Address"), last


@pytest.mark.parametrize("value", [
    None, 0, -2 ** 63, 2 ** 63 - 1, 1.5, b"\x00bytes", "text", "ünï", True, False,
    [1, [2, ("three", {4: None})]], (), {"a": {1, 2}}, frozenset({3}),
])
def test_safe_coders_read_what_beams_coders_wrote(value):
    for beams in (FastPrimitivesCoder(), FastPrimitivesCoder().as_deterministic_coder("step")):
        if isinstance(value, (dict, set, frozenset)) and beams.is_deterministic():
            continue  # not deterministic: Beam refuses to encode them so
        for nested in (False, True):
            encoded = beams.get_impl().encode_nested(value) if nested else beams.encode(value)
            impl = SafePrimitivesCoder().get_impl()
            assert (impl.decode_nested(encoded) if nested else impl.decode(encoded)) == value
    assert SafePickleCoder().decode(PickleCoder().encode(value)) == value


class Users:
    """A class of the pipeline's own."""


def test_safe_coders_refuse_what_only_unpickling_builds():
    with pytest.raises(UnsafeValueError, match="a pickled test_state_values.Users"):
        SafePickleCoder().decode(PickleCoder().encode(Users()))
    with pytest.raises(UnsafeValueError, match="a pickled builtins.eval"):
        SafePickleCoder().decode(pickle.dumps(_Evaluates()))
    # A named tuple under the deterministic coder carries its class, pickled.
    point = collections.namedtuple("point", "x y")
    deterministic = FastPrimitivesCoder().as_deterministic_coder("step")
    with pytest.raises(UnsafeValueError, match="a named tuple whose class is pickled"):
        SafePrimitivesCoder().decode(deterministic.encode(point(1, 2)))


class _Evaluates:
    def __reduce__(self):
        return eval, ("1 + 1",)


def test_a_checkpoints_unpickling_coders_are_built_as_safe_ones():
    context = PipelineContext()
    beam_coders = {"primitives": FastPrimitivesCoder(), "pickle": PickleCoder(),
                   "deterministic": FastPrimitivesCoder().as_deterministic_coder("step"),
                   "pair": coders.TupleCoder([coders.StrUtf8Coder(), FastPrimitivesCoder()])}
    ids = {name: context.coders.get_id(coder) for name, coder in beam_coders.items()}
    loaded = load_coders({coder_id: encode_coder(proto) for coder_id, proto
                          in context.to_runner_api().coders.items()})
    assert isinstance(loaded.get(ids["primitives"]), SafePrimitivesCoder)
    assert isinstance(loaded.get(ids["pickle"]), SafePickleCoder)
    assert isinstance(loaded.get(ids["deterministic"]), SafePrimitivesCoder)
    pair = loaded.get(ids["pair"])
    assert pair.decode(beam_coders["pair"].encode(("k", [1]))) == ("k", [1])
    with pytest.raises(UnsafeValueError, match="ipaddress.IPv4Address"):
        pair.decode(beam_coders["pair"].encode(("k", ipaddress.ip_address("10.0.0.1"))))
