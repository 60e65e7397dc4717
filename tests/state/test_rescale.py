"""Rescaling a streaming job at a restart: its keyed state re-split into another number of
key partitions gives the panes of an uninterrupted run.

SparkRunner and Spark Connect (the runner's feature: the DirectRunner has no checkpoints).
The pipeline keeps both kinds of keyed state, over 24 keys so every partition holds some: a
windowed sum's GroupByKey with early and late firings (trigger state, watermark holds) and a
stateful DoFn with a bag and an event-time timer per window (user state and timers). Each
run stops itself with ``--max_batches`` (writing its final checkpoint); the next resumes with
another ``--spark_parallelism``. The crash test kills a real driver (a subprocess) while its
re-split job runs.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as streams
from apache_beam.transforms import userstate
from apache_beam.transforms.trigger import AccumulationMode, AfterCount, AfterWatermark
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from runners.spark.state.checkpoint import latest_checkpoint, read_manifest
from runners.spark.state.rescale import rescaled_directory
from triggers.panes import DescribePanes

KEYS = [f"k{index:02d}" for index in range(24)]
#: Where the crash test's driver says it killed itself (in the subprocess only).
KILL_ENV = "RESCALE_TEST_KILL_MARKER"


def events_stream() -> streams.TestStream:
    """Eight batches: two windows of 10 s, early panes every 2 elements of a key, late
    panes, 10 s of allowed lateness."""
    def each(offset, seconds, value):
        return [TimestampedValue((key, value + index), seconds + (index % 3))
                for index, key in enumerate(KEYS[offset::2])]

    return (streams.TestStream()
            .add_elements(each(0, 1, 1) + each(1, 2, 2))    # 1
            .add_elements(each(0, 3, 10) + each(1, 12, 20))  # 2: EARLY for the even keys
            .add_elements(each(1, 4, 5))                    # 3: EARLY for the odd keys
            .advance_watermark_to(11)                       # 4: ON_TIME [0, 10)
            .add_elements(each(0, 5, 100))                  # 5: LATE [0, 10)
            .add_elements(each(1, 14, 7))                   # 6
            .advance_watermark_to(21)                       # 7: ON_TIME [10, 20)
            .add_elements(each(1, 15, 1000))                # 8: LATE [10, 20)
            .advance_watermark_to_infinity())


class CountAtWindowEnd(beam.DoFn):
    """A stateful DoFn: each key's elements of a window in a bag, emitted as a count when an
    event-time timer at the window's end fires."""

    SEEN = userstate.BagStateSpec("seen", VarIntCoder())
    WINDOW_END = userstate.TimerSpec("window_end", userstate.TimeDomain.WATERMARK)

    def process(self, element, window=beam.DoFn.WindowParam,
                seen=beam.DoFn.StateParam(SEEN), end=beam.DoFn.TimerParam(WINDOW_END)):
        seen.add(element[1])
        end.set(window.end)

    @userstate.on_timer(WINDOW_END)
    def flush(self, key=beam.DoFn.KeyParam, window=beam.DoFn.WindowParam,
              seen=beam.DoFn.StateParam(SEEN)):
        values = sorted(seen.read())
        seen.clear()
        yield {"key": key, "window": [float(window.start), float(window.end)],
               "values": values}


class WriteRecords(beam.DoFn):
    """Writes each record as a JSON file (atomically: a killed driver leaves no partial one)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def process(self, record):
        name = os.path.join(self.directory, uuid.uuid4().hex)
        with open(name + ".tmp", "w", encoding="utf-8") as file:
            json.dump(record, file, sort_keys=True)
        os.replace(name + ".tmp", name + ".json")


def build(pipeline: beam.Pipeline, directory: str) -> None:
    windowed = (pipeline
                | "Events" >> events_stream().with_output_types(beam.typehints.KV[str, int])
                | "Windows" >> beam.WindowInto(
                    FixedWindows(10),
                    trigger=AfterWatermark(early=AfterCount(2), late=AfterCount(1)),
                    accumulation_mode=AccumulationMode.ACCUMULATING, allowed_lateness=10))
    _ = (windowed
         | "Sum" >> beam.CombinePerKey(sum)
         | "Describe" >> DescribePanes()
         | "WritePanes" >> beam.ParDo(WriteRecords(directory)))
    _ = (windowed
         | "Count" >> beam.ParDo(CountAtWindowEnd()).with_input_types(
             beam.typehints.KV[str, int])
         | "WriteCounts" >> beam.ParDo(WriteRecords(directory)))


def options(**given) -> PipelineOptions:
    return PipelineOptions([], streaming=True, checkpoint_interval_batches=2, **given)


def records(directory) -> collections.Counter:
    found = collections.Counter()
    for name in os.listdir(directory):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as file:
                found[file.read()] += 1
    return found


def run(runner, directory, **given) -> None:
    os.makedirs(directory, exist_ok=True)
    pipeline = beam.Pipeline(runner=runner, options=options(**given))
    build(pipeline, str(directory))
    pipeline.run().wait_until_finish()


def uninterrupted(runner, tmp_path) -> collections.Counter:
    run(runner, tmp_path / "uninterrupted", spark_parallelism=4)
    expected = records(tmp_path / "uninterrupted")
    timings = {json.loads(record)["pane"]["timing"] for record in expected
               if "pane" in json.loads(record)}
    assert timings == {"EARLY", "ON_TIME", "LATE"}
    assert sum(1 for record in expected if "values" in json.loads(record)) > len(KEYS)
    return expected


def state_directories(checkpoint_dir) -> list:
    """The step directories holding state files."""
    root = os.path.join(checkpoint_dir, "state")
    return sorted(name for name in os.listdir(root)
                  if any(files for _, _, files in os.walk(os.path.join(root, name))))


@pytest.mark.parametrize("runner_name", ["SparkRunner", "SparkConnect"], indirect=True)
def test_a_job_resumed_at_8_then_at_2_partitions_gives_the_panes_of_an_uninterrupted_run(
        runner, tmp_path):
    expected = uninterrupted(runner, tmp_path)
    checkpoint_dir = str(tmp_path / "checkpoints")
    out = tmp_path / "resumed"
    run(runner, out, checkpoint_dir=checkpoint_dir, spark_parallelism=4, max_batches=3)
    first = read_manifest(latest_checkpoint(checkpoint_dir))
    assert (first["batch"], first["parallelism"]) == (3, 4)
    steps = sorted(first["state_files"])
    assert len(steps) == 2
    assert all(len(first["state_files"][step]) == 4 for step in steps)  # every partition

    run(runner, out, checkpoint_dir=checkpoint_dir, spark_parallelism=8, max_batches=2)
    second = read_manifest(latest_checkpoint(checkpoint_dir))
    assert (second["batch"], second["parallelism"]) == (5, 8)
    for step in steps:  # the state of all 24 keys, re-split over 8 partitions
        assert len(second["state_files"][step]) == 8, step
        assert second["state_keys"][step] > 0
    # The old layout's files are gone once the new checkpoint names the new one.
    assert state_directories(checkpoint_dir) == sorted(
        rescaled_directory(step, 8, 3) for step in steps)

    run(runner, out, checkpoint_dir=checkpoint_dir, spark_parallelism=2)
    final = read_manifest(latest_checkpoint(checkpoint_dir))
    assert final["parallelism"] == 2
    assert state_directories(checkpoint_dir) == sorted(
        rescaled_directory(step, 2, 5) for step in steps)
    assert records(out) == expected  # every pane and count once, as uninterrupted

    # Started again without --spark_parallelism, it keeps the checkpoint's 2 partitions.
    run(runner, tmp_path / "again", checkpoint_dir=checkpoint_dir)
    assert read_manifest(latest_checkpoint(checkpoint_dir))["parallelism"] == 2
    assert records(tmp_path / "again") == collections.Counter()


def resume_and_kill_during_the_resplit(checkpoint_dir: str, directory: str) -> None:
    """The crash test's driver (in a subprocess): resumes at 8 partitions, and SIGKILLs
    itself once the re-split has written a new partition (its job still running)."""
    import threading

    from runners.spark import SparkRunner

    from spark_fixtures import shared_spark_session

    manifest = read_manifest(latest_checkpoint(checkpoint_dir))
    steps = sorted(manifest["state_files"])
    new = [os.path.join(checkpoint_dir, "state", rescaled_directory(step, 8, manifest["batch"]))
           for step in steps]

    def kill_once_written() -> None:
        while True:
            written = [name for path in new if os.path.isdir(path) for _, _, names in os.walk(path)
                       for name in names if name.startswith("snapshot-")]
            if written:
                with open(os.environ[KILL_ENV], "w", encoding="utf-8") as file:
                    json.dump({"snapshots": len(written),
                               "parallelism": read_manifest(latest_checkpoint(
                                   checkpoint_dir))["parallelism"]}, file)
                os.killpg(os.getpgrp(), signal.SIGKILL)
            time.sleep(0.005)

    threading.Thread(target=kill_once_written, daemon=True).start()
    run(SparkRunner(shared_spark_session()), directory, checkpoint_dir=checkpoint_dir,
        spark_parallelism=8)


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_a_driver_killed_during_a_resplit_resumes_either_way_with_the_same_panes(
        runner, tmp_path):
    expected = uninterrupted(runner, tmp_path)
    checkpoint_dir = str(tmp_path / "checkpoints")
    out = tmp_path / "resumed"
    run(runner, out, checkpoint_dir=checkpoint_dir, spark_parallelism=4, max_batches=3)
    before = read_manifest(latest_checkpoint(checkpoint_dir))

    marker = tmp_path / "killed.json"
    here = os.path.dirname(os.path.abspath(__file__))
    environment = dict(os.environ, **{KILL_ENV: str(marker)})
    environment["PYTHONPATH"] = os.pathsep.join(
        [here, os.path.dirname(here)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    with open(tmp_path / "killed.log", "wb") as log:
        process = subprocess.run(
            [sys.executable, "-c", "import test_rescale as t; "
             f"t.resume_and_kill_during_the_resplit({checkpoint_dir!r}, {str(out)!r})"],
            env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            timeout=400)
    assert process.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    killed = json.loads(marker.read_text())
    # It died with part of the new layout written, the old checkpoint still the latest.
    assert killed["snapshots"] >= 1 and killed["parallelism"] == 4
    assert read_manifest(latest_checkpoint(checkpoint_dir)) == before

    # Resumed at the old parallelism, it runs on (the half-written layout is deleted) ...
    run(runner, out, checkpoint_dir=checkpoint_dir, spark_parallelism=4, max_batches=2)
    assert read_manifest(latest_checkpoint(checkpoint_dir))["parallelism"] == 4
    assert all(not name.endswith("-b3") for name in state_directories(checkpoint_dir))
    # ... and at 8 to the end: every pane and count once, as uninterrupted.
    run(runner, out, checkpoint_dir=checkpoint_dir, spark_parallelism=8)
    assert read_manifest(latest_checkpoint(checkpoint_dir))["parallelism"] == 8
    assert records(out) == expected
