"""Reading a streaming job's keyed state from its checkpoint, as a table.

One real job on the SparkRunner (the pipeline of ``test_rescale``: a GroupByKey with early
and late firings, a stateful DoFn with a bag and an event-time timer, over 24 keys) stops
after 3 batches with ``--max_batches`` (its final checkpoint), is read, resumes for 2 more
batches (the watermark passes the first window: its panes fire, its timers fire, its bag
is cleared) and is read again. The expectations are computed from the TestStream's events
here, not from the runner.
"""

from __future__ import annotations

import collections
import os
import pickle
import shutil
import time

import pytest
from apache_beam.coders import VarIntCoder, coders
from apache_beam.runners.pipeline_context import PipelineContext
from test_rescale import KEYS, run

from runners.spark.state.changelog import CorruptStateFileError
from runners.spark.state.manifest_coders import encode_coder, load_coders
from runners.spark.state.table.cli import main
from runners.spark.state.table.reader import (
    StateReadError,
    batch_changes,
    checkpoint_info,
    read_state,
    state_changes,
    state_rows,
)
from runners.spark.state.table.rows import UnsafeStateError, load_plain

GBK = "Sum/GroupByKey"


def added(batches: int) -> list:
    """(key, window start, value) of every element the first ``batches`` batches add (the
    schedule of ``test_rescale.events_stream``: 0-based element index within its batch)."""
    def each(offset, seconds, value):
        return [(key, ((seconds + index % 3) // 10) * 10, value + index)
                for index, key in enumerate(KEYS[offset::2])]

    schedule = [each(0, 1, 1) + each(1, 2, 2), each(0, 3, 10) + each(1, 12, 20),
                each(1, 4, 5), [], each(0, 5, 100)]
    return [element for batch in schedule[:batches] for element in batch]


def window_text(start: int) -> str:
    return f"[{float(start)}, {float(start + 10)})"


@pytest.fixture(scope="module")
def job(tmp_path_factory, spark_session):
    """Checkpoint directory, and the readings after 3 and after 5 batches."""
    from runners.spark import SparkRunner

    base = tmp_path_factory.mktemp("state_table")
    checkpoint_dir = str(base / "checkpoints")
    run(SparkRunner(spark_session), base / "out", checkpoint_dir=checkpoint_dir,
        spark_parallelism=4, max_batches=3)
    first = checkpoint_info(checkpoint_dir)
    started = time.monotonic()
    first_rows = list(state_rows(checkpoint_dir))
    read_seconds = time.monotonic() - started
    run(SparkRunner(spark_session), base / "out", checkpoint_dir=checkpoint_dir,
        spark_parallelism=4, max_batches=2)
    return {"dir": checkpoint_dir, "first": first, "first_rows": first_rows,
            "read_seconds": read_seconds, "second": checkpoint_info(checkpoint_dir),
            "second_rows": list(state_rows(checkpoint_dir)), "base": base}


def _stateful(rows):
    return [row for row in rows if row.step != GBK]


def test_the_groupbykey_holds_exactly_the_elements_of_its_unfired_windows(job):
    """Accumulating panes keep every element of a window until it expires: after 3 batches
    (the watermark has not moved) every element added so far, decoded and as bytes."""
    rows = [row for row in job["first_rows"] if row.step == GBK]
    found = collections.Counter((row.key, row.window, int(row.value))
                                for row in rows if row.kind == "elements")
    expected = collections.Counter((key, window_text(start), value)
                                   for key, start, value in added(3))
    assert found == expected
    assert all(VarIntCoder().decode(row.value_bytes) == int(row.value)
               for row in rows if row.kind == "elements")
    assert all(row.key_bytes.decode("utf-8") == row.key for row in rows)
    # One end-of-window timer and one watermark hold per key and window with elements.
    timers = {(row.key, row.window, row.timestamp) for row in rows if row.kind == "timer"}
    assert timers == {(key, window_text(start), (start + 10) * 1_000_000)
                      for key, start, _ in added(3)}
    holds = {(row.key, row.window) for row in rows if row.kind == "hold"}
    assert holds == {(key, window_text(start)) for key, start, _ in added(3)}
    assert {row.version for row in rows} <= set(range(1, job["first"].version + 1))
    assert job["read_seconds"] < 5


def test_the_stateful_dofn_holds_a_timer_and_a_bag_per_key_and_window(job):
    rows = _stateful(job["first_rows"])
    timers = {(row.key, row.window, row.timestamp) for row in rows if row.kind == "timer"}
    assert timers == {(key, window_text(start), (start + 10) * 1_000_000)
                      for key, start, _ in added(3)}
    cells = [row for row in rows if row.kind == "cell"]
    assert {row.name for row in cells} == {"Count/seen"}
    assert {row.key for row in cells} == set(KEYS)
    assert {(row.key, row.window) for row in cells} <= {
        (key, window_text(start)) for key, start, _ in added(3)}
    values = collections.defaultdict(set)
    for key, start, value in added(3):
        values[(key, window_text(start))].add(value)
    assert all(int(row.value) in values[(row.key, row.window)] for row in cells)
    assert all(VarIntCoder().decode(row.value_bytes) == int(row.value) for row in cells)


def test_the_stateful_dofns_bag_holds_every_value_added_to_it(job):
    found = collections.Counter((row.key, row.window, int(row.value))
                                for row in _stateful(job["first_rows"]) if row.kind == "cell")
    assert found == collections.Counter((key, window_text(start), value)
                                        for key, start, value in added(3))


def test_the_change_feed_is_the_difference_of_two_readings(job):
    before, after = job["first"], job["second"]
    assert after.batch == 5 and after.version > before.version

    def by_key(rows):
        states = collections.defaultdict(set)
        for row in rows:
            states[(row.step, row.key_bytes)].add(row)
        return states

    old, new = by_key(job["first_rows"]), by_key(job["second_rows"])
    last = {}
    for change in state_changes(job["dir"], before.version, after.version):
        last[(change.step, change.key_bytes)] = (change.version, change.change_type)
    latest = {key: change for key, (_, change) in last.items()}
    changed = {key for key in new if new[key] != old.get(key)}
    assert {key for key, change in latest.items() if change == "update"} == changed
    assert {key for key, change in latest.items()
            if change == "delete" and key in old} == set(old) - set(new)
    assert not {key for key, change in latest.items() if change == "delete"} & set(new)
    assert changed and set(old) - set(new)  # the window [0, 10) fired: both kinds occur
    with pytest.raises(StateReadError, match="cannot be read"):
        list(state_changes(job["dir"], before.version, after.version + 1))
    # Between batches: the manifest knows each batch's store version.
    assert list(batch_changes(job["dir"], 3, 5)) == list(
        state_changes(job["dir"], before.version, after.version))
    with pytest.raises(StateReadError, match=r"batch\(es\) \[9\]"):
        list(batch_changes(job["dir"], 3, 9))


def test_an_earlier_batch_is_refused_naming_the_batches_there_are(job):
    with pytest.raises(StateReadError, match=r"batches \[5\]"):
        list(state_rows(job["dir"], batch=3))


def test_a_corrupted_state_file_fails_its_checksum(job, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(job["dir"], copy)
    deltas = sorted(os.path.join(folder, name) for folder, _, names in
                    os.walk(os.path.join(copy, "state")) for name in names
                    if name.startswith("delta-"))
    with open(deltas[0], "r+b") as file:
        file.seek(-1, os.SEEK_END)
        last = file.read(1)
        file.seek(-1, os.SEEK_END)
        file.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(CorruptStateFileError, match="fails its checksum"):
        list(state_rows(copy))


def test_a_checkpoint_superseded_while_it_is_read_is_named(job, tmp_path):
    """A running job's newer checkpoint deletes files the older one names: a reading half
    way through says so (``read_state`` reads once more; a reading not yet started reads
    the newer checkpoint)."""
    copy = str(tmp_path / "copy")
    shutil.copytree(job["dir"], copy)
    rows = state_rows(copy, steps=[GBK])
    next(rows)  # partition 0 read
    shutil.copytree(os.path.join(copy, "checkpoint-00000005"),
                    os.path.join(copy, "checkpoint-00000006"))
    last = os.path.join(copy, "state", "Sum_GroupByKey-3fca91a2", "00003")
    for name in os.listdir(last):
        os.remove(os.path.join(last, name))
    with pytest.raises(StateReadError, match="superseded by a newer one"):
        list(rows)


class NotACoder:
    """A class a checkpoint's bytes might name."""


class UsersCoder(coders.Coder):
    """A coder of the user's own (its pickle names this module, not Beam's)."""

    def encode(self, value):
        return value

    def decode(self, encoded):
        return encoded


def test_blobs_and_coders_naming_other_classes_are_refused():
    with pytest.raises(UnsafeStateError, match="NotACoder"):
        load_plain(pickle.dumps((2, [], [(("id", 1), "count", [NotACoder()])], {})))
    assert load_plain(pickle.dumps((2, {b"k": [b"v"]}, {}))) == (2, {b"k": [b"v"]}, {})
    context = PipelineContext()
    beams = coders.FastPrimitivesCoder()
    users = UsersCoder()
    loaded = load_coders({name: encode_coder(context.coders.get_proto(coder))
                          for name, coder in (("beam", beams), ("user", users))})
    assert loaded.get("beam").decode(loaded.get("beam").encode((1, "a"))) == (1, "a")
    assert loaded.get("user") is None and "not one of Beam's coder classes" in loaded.why("user")


def test_the_command_line_prints_an_aligned_table(job, capsys):
    assert main(["--checkpoint_dir", job["dir"], "--step", GBK, "--limit", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "state at batch 5" in lines[0] and "5 row(s)" in lines[0]
    assert lines[1].split()[:3] == ["step", "partition", "key"]
    assert len(lines) == 2 + 1 + 5 and all(line.startswith(GBK) for line in lines[3:])
    assert main(["--checkpoint_dir", job["dir"], "--changes", "3", "5", "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "changes after batch 3 up to batch 5" in lines[0] and "change_type" in lines[1]
    assert main(["--checkpoint_dir", job["dir"], "--batch", "3"]) == 1
    assert "batches [5]" in capsys.readouterr().err


def test_read_state_gives_the_rows_as_a_dataframe(job, spark_session):
    frame = read_state(spark_session, job["dir"], steps=[GBK])
    assert frame.count() == sum(1 for row in job["second_rows"] if row.step == GBK)
    assert frame.columns[:4] == ["step", "partition", "key", "key_bytes"]
