"""Checkpoints of the SparkRunner's streaming loop: a killed driver resumes with the same panes.

SparkRunner only: checkpoints (``--checkpoint_dir``) are the Spark runner's fault tolerance;
the DirectRunner keeps its state in one process and has no checkpoints to resume from.

The pipeline keeps both kinds of keyed state: a windowed sum's GroupByKey (trigger state)
and a stateful DoFn's running count. The restart test kills a real driver. Run 1 runs in a
subprocess (its own Spark); a gate DoFn blocks on one element of the stream, in run 1 only,
after writing a marker file, so the kill lands at a known batch: batches 1-4 done, a
checkpoint written after batch 3 (``--checkpoint_interval_batches=3``). The test SIGKILLs
the process group (driver, JVM, Python workers). Run 2 resumes from the same ``--checkpoint_dir`` and runs to the end.
Run 1's sink records, with each pane, the latest checkpoint when the pane was written, so
the panes of batch 4 (after the last checkpoint, emitted again by run 2: at-least-once
between checkpoints) are told apart from those the checkpoint covers.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as streams
from apache_beam.transforms import userstate
from apache_beam.transforms.trigger import AccumulationMode, AfterCount, AfterWatermark
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from runners.spark.state.changelog import StateFile, file_name
from runners.spark.state.checkpoint import (
    MANIFEST,
    CheckpointError,
    CheckpointMismatchError,
    latest_checkpoint,
    read_manifest,
)
from runners.spark.state.encoding import (
    StateVersionError,
    TriggerStateCodec,
    decode_user_state,
)
from runners.spark.state.store import step_directory_name
from triggers.panes import DescribePanes

from spark_fixtures import spark_session  # noqa: F401 (fixture)

INTERVAL = 3
GATE = ("gate", 1)
#: Run 1 only (its environment reaches its Spark workers): where the gate reports it blocked.
GATE_ENV = "CHECKPOINT_TEST_GATE_FILE"
#: Run 1 only: the checkpoint directory its sink reads to tag each pane.
SEEN_ENV = "CHECKPOINT_TEST_SEEN_DIR"
#: How long run 1 may take to reach the gate (Spark start-up included); a hang fails the test.
RUN_1_LIMIT_SECONDS = 450


def events_stream() -> streams.TestStream:
    """One event per batch. Windows [0, 10) and [10, 20), early pane every 2 elements, late
    pane per late element, 10 s of allowed lateness, accumulating."""
    return (streams.TestStream()
            .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("a", 2), 3),
                           TimestampedValue(("b", 5), 2)])                    # 1: EARLY a
            .add_elements([TimestampedValue(("b", 1), 4),
                           TimestampedValue(("a", 4), 12)])                   # 2: EARLY b
            .advance_watermark_to(11)                                         # 3: ON_TIME a, b
            .add_elements([TimestampedValue(("a", 10), 7)])                   # 4: LATE a
            .add_elements([TimestampedValue(GATE, 16), TimestampedValue(("b", 20), 9),
                           TimestampedValue(("b", 7), 15)])                   # 5: LATE b; gate
            .advance_watermark_to(21)                                         # 6: ON_TIME
            .add_elements([TimestampedValue(("a", 5), 18)])                   # 7: LATE a
            .advance_watermark_to_infinity())                                 # 8, then 9


class Gate(beam.DoFn):
    """Passes every element; in run 1, blocks forever on :data:`GATE` (until killed)."""

    def process(self, element):
        marker = os.environ.get(GATE_ENV)
        if marker and tuple(element) == GATE:
            with open(marker, "w", encoding="utf-8") as file:
                file.write("blocked")
            threading.Event().wait()
        yield element


class WritePanes(beam.DoFn):
    """Writes each pane record as a JSON file (atomically: a kill leaves no partial file),
    with the batch of the latest checkpoint at that moment in run 1."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def process(self, record):
        checkpoints = os.environ.get(SEEN_ENV)
        latest = latest_checkpoint(checkpoints) if checkpoints else None
        seen = read_manifest(latest)["batch"] if latest else None
        name = os.path.join(self.directory, uuid.uuid4().hex)
        with open(name + ".tmp", "w", encoding="utf-8") as file:
            json.dump({"pane": record, "checkpoint_seen": seen}, file)
        os.replace(name + ".tmp", name + ".json")


class RunningCount(beam.DoFn):
    """A stateful DoFn: each element's key with how many elements the key had so far."""

    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        so_far = (count.read() or 0) + 1
        count.write(so_far)
        yield {"key": element[0], "elements_so_far": so_far}


def build(pipeline: beam.Pipeline, panes_directory: str, window_seconds: int = 10) -> None:
    """Panes of a windowed sum (GroupByKey state) and running counts (stateful DoFn state)."""
    events = pipeline | "Events" >> events_stream() | "Gate" >> beam.ParDo(Gate())
    _ = (events
         | "Count" >> beam.ParDo(RunningCount())
         | "WriteCounts" >> beam.ParDo(WritePanes(panes_directory)))
    _ = (events
         | "Windows" >> beam.WindowInto(
             FixedWindows(window_seconds),
             trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
             accumulation_mode=AccumulationMode.ACCUMULATING, allowed_lateness=10)
         | "Sum" >> beam.CombinePerKey(sum)
         | "Describe" >> DescribePanes()
         | "Write" >> beam.ParDo(WritePanes(panes_directory)))


def manifests(checkpoint_dir) -> list:
    return sorted(name for name in os.listdir(checkpoint_dir) if name.startswith("checkpoint-"))


def streaming_options(**options) -> PipelineOptions:
    return PipelineOptions(streaming=True, checkpoint_interval_batches=INTERVAL, **options)


def read_panes(directory: str):
    """[(pane as a hashable JSON string, checkpoint seen)] of every file written."""
    found = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as file:
                written = json.load(file)
            found.append((json.dumps(written["pane"], sort_keys=True),
                          written["checkpoint_seen"]))
    return found


def batches_run(result) -> int:
    counters = result.metrics().query(
        MetricsFilter().with_namespace("spark_streaming").with_name("batches"))["counters"]
    return sum(counter.committed for counter in counters)


def run_1(checkpoint_dir: str, panes_dir: str) -> None:
    """Run 1's driver (in a subprocess): the test's Spark settings, a SparkRunner on them."""
    from runners.spark import SparkRunner

    from spark_fixtures import shared_spark_session

    pipeline = beam.Pipeline(runner=SparkRunner(shared_spark_session()),
                             options=streaming_options(checkpoint_dir=checkpoint_dir))
    build(pipeline, panes_dir)
    pipeline.run().wait_until_finish()


def start_run_1(tmp_path):
    checkpoint_dir, panes_dir = tmp_path / "checkpoints", tmp_path / "run-1"
    panes_dir.mkdir()
    gate = tmp_path / "gate-reached"
    # This module's folder (tests/state) and tests/ itself (spark_fixtures).
    here = os.path.dirname(os.path.abspath(__file__))
    environment = dict(os.environ, **{GATE_ENV: str(gate), SEEN_ENV: str(checkpoint_dir)})
    environment["PYTHONPATH"] = os.pathsep.join(
        [here, os.path.dirname(here)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    log = open(tmp_path / "run-1.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-c",
         f"import test_spark_streaming_checkpoint as t; t.run_1({str(checkpoint_dir)!r}, "
         f"{str(panes_dir)!r})"],
        env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, log, gate, checkpoint_dir, panes_dir


def kill_at_gate(process, log, gate, log_path) -> int:
    deadline = time.monotonic() + RUN_1_LIMIT_SECONDS
    try:
        while not gate.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("run 1 never reached the gate:\n"
                                     + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and Python workers
        process.wait()
        log.close()
    return process.returncode


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_killed_driver_resumes_from_its_checkpoint_with_the_same_panes(runner, tmp_path):
    process, log, gate, checkpoint_dir, panes_dir = start_run_1(tmp_path)
    try:
        # The uninterrupted run, meanwhile (no checkpoints), on the test session.
        uninterrupted_dir = tmp_path / "uninterrupted"
        uninterrupted_dir.mkdir()
        pipeline = beam.Pipeline(runner=runner, options=streaming_options())
        build(pipeline, str(uninterrupted_dir))
        result = pipeline.run()
        result.wait_until_finish()
        all_batches = batches_run(result)
    finally:
        returncode = kill_at_gate(process, log, gate, tmp_path / "run-1.log")
    assert returncode == -signal.SIGKILL

    # Run 1 completed batches 1-4; its checkpoint is of batch 3.
    checkpoint = latest_checkpoint(str(checkpoint_dir))
    manifest = read_manifest(checkpoint)
    assert manifest["batch"] == 3
    assert manifests(checkpoint_dir) == ["checkpoint-00000003"]
    # The keyed state is not in the driver's data: each key partition of both keyed steps
    # (the sum's GroupByKey, the running count) wrote the keys each batch changed (deltas),
    # which the manifest names; batch 4's tasks wrote theirs too, after the checkpoint.
    assert len(manifest["state_files"]) == 2
    for step, chains in manifest["state_files"].items():
        directory = checkpoint_dir / "state" / step_directory_name(step)
        # Partitions whose keys changed (both, or the one all of a step's keys hash to).
        assert chains and set(chains) <= {"0", "1"}, step
        assert sorted(os.listdir(directory)) == sorted(f"{int(p):05d}" for p in chains)
        for partition, chain in chains.items():
            assert {entry[0] for entry in chain} == {"delta"}, step
            on_disk = set(os.listdir(directory / f"{int(partition):05d}"))
            named = {file_name(StateFile(*entry)) for entry in chain}
            assert named <= on_disk
            later = [name for name in on_disk - named
                     if int(name.split("-")[1].split(".")[0]) <= max(e[1] for e in chain)]
            assert later == [], step

    run_2_dir = tmp_path / "run-2"
    run_2_dir.mkdir()
    pipeline = beam.Pipeline(runner=runner,
                             options=streaming_options(checkpoint_dir=str(checkpoint_dir)))
    build(pipeline, str(run_2_dir))
    result = pipeline.run()
    result.wait_until_finish()
    assert batches_run(result) == all_batches - 3  # resumed after batch 3
    # It checkpointed after batches 6 and 9 (its last), keeping only the latest.
    assert manifests(checkpoint_dir) == [f"checkpoint-{all_batches:08d}"]
    # A checkpoint a killed driver left half-written (its data, no manifest yet: the
    # manifest is written last) is skipped for the one before it ...
    (checkpoint_dir / f"checkpoint-{all_batches + 3:08d}").mkdir()
    (checkpoint_dir / f"checkpoint-{all_batches + 3:08d}" / "data.bin").write_bytes(b"x")
    assert latest_checkpoint(str(checkpoint_dir)).endswith(f"checkpoint-{all_batches:08d}")
    # ... but a manifest that cannot be read is an error, never "no checkpoint" (starting
    # over would drop the state it names).
    damaged = checkpoint_dir / f"checkpoint-{all_batches + 6:08d}"
    damaged.mkdir()
    (damaged / MANIFEST).write_text('{"form')
    with pytest.raises(CheckpointError, match=f"checkpoint-{all_batches + 6:08d} is unreadable"):
        latest_checkpoint(str(checkpoint_dir))
    shutil.rmtree(damaged)

    uninterrupted = collections.Counter(pane for pane, _ in read_panes(uninterrupted_dir))
    run_1 = read_panes(panes_dir)
    covered = collections.Counter(pane for pane, seen in run_1 if seen != 3)
    replayed = collections.Counter(pane for pane, seen in run_1 if seen == 3)
    run_2 = collections.Counter(pane for pane, _ in read_panes(run_2_dir))
    timings = {json.loads(pane)["pane"]["timing"] for pane in uninterrupted
               if "pane" in json.loads(pane)}
    assert timings == {"EARLY", "ON_TIME", "LATE"}
    # Batches 1-3: EARLY and ON_TIME panes of a and b; counts a 1-3, b 1-2.
    assert sum(covered.values()) == 4 + 5
    # Batch 4: LATE a pane; count a 4 (a restart without state would say 1).
    assert sum(replayed.values()) == 1 + 1
    assert covered + run_2 == uninterrupted  # every pane once, as in one uninterrupted run
    assert replayed - run_2 == collections.Counter()  # emitted again: at-least-once

    # The final checkpoint is refused to another pipeline (other windows) ...
    other = beam.Pipeline(runner=runner,
                          options=streaming_options(checkpoint_dir=str(checkpoint_dir)))
    build(other, str(tmp_path), window_seconds=5)
    with pytest.raises(CheckpointMismatchError, match="state cannot carry over") as error:
        other.run().wait_until_finish()
    assert str(checkpoint_dir) in str(error.value)
    assert "step 'Sum/GroupByKey': its window changed" in str(error.value)
    assert "empty --checkpoint_dir" in str(error.value)
    # ... and to this one once it claims state of another version.
    final = latest_checkpoint(str(checkpoint_dir))
    manifest = read_manifest(final)
    manifest["state_version"] = 0
    with open(os.path.join(final, MANIFEST), "w", encoding="utf-8") as file:
        json.dump(manifest, file)
    same = beam.Pipeline(runner=runner,
                         options=streaming_options(checkpoint_dir=str(checkpoint_dir)))
    build(same, str(tmp_path))
    with pytest.raises(StateVersionError, match="version 0") as error:
        same.run().wait_until_finish()
    assert str(checkpoint_dir) in str(error.value)


def test_state_blobs_of_another_version_are_refused():
    """Keyed state is read only at the version it was written with (no Spark needed)."""
    with pytest.raises(StateVersionError, match="version 0"):
        decode_user_state(pickle.dumps((0, {}, {})))
    codec = TriggerStateCodec(FixedWindows(10).get_window_coder(), beam.coders.VarIntCoder())
    with pytest.raises(StateVersionError, match="version 7"):
        codec.decode(pickle.dumps((7, [], [], {})))
