"""What a micro-batch costs on the SparkRunner: the keys it touches, the Spark jobs it runs,
the side-input elements it keeps; and checkpoints that end in a snapshot resume exactly.

These observe the runner itself (its ``--streaming_report``), so they run on the SparkRunner;
the side-input test checks its panes on every runner.
"""

from __future__ import annotations

import collections
import json
import os
import re

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from test_spark_streaming_checkpoint import WritePanes, read_panes

from runners.spark.state import changelog
from runners.spark.state.checkpoint import latest_checkpoint, read_manifest

from project import REPO
from spark_fixtures import TEST_FOLDERS, spark_session  # noqa: F401 (fixture)

KEYS = 50


def report_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_a_batch_touches_only_its_keys_and_an_idle_batch_runs_no_job(runner, tmp_path):
    """50 keys hold state; a batch with one element reads and writes one key; a batch
    with nothing to do runs no Spark job; the watermark passing the window touches all 50
    (their on-time panes), which then hold nothing."""
    stream = (streams.TestStream()
              .advance_watermark_to(0)                                             # 0
              .add_elements([TimestampedValue((f"key-{n}", n), 1) for n in range(KEYS)])  # 1
              .add_elements([TimestampedValue(("key-7", 100), 2)])                 # 2
              .advance_processing_time(5)                                          # 3
              .advance_watermark_to(12)                                            # 4
              .advance_watermark_to_infinity())                                    # 5
    report = tmp_path / "report.jsonl"
    options = PipelineOptions(streaming=True, streaming_report=str(report))
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        sums = (pipeline | stream | beam.WindowInto(FixedWindows(10))
                | "Sum" >> beam.CombinePerKey(sum))
        assert_that(sums, equal_to([(f"key-{n}", n + (100 if n == 7 else 0))
                                    for n in range(KEYS)]))
    lines = report_lines(report)
    step = "Sum/Group"
    touched = [line["touched_keys"][step] for line in lines]
    held = [line["state_keys"][step] for line in lines]
    jobs = [line["spark_jobs"] for line in lines]
    assert touched[:5] == [0, KEYS, 1, 0, KEYS]
    assert held[:5] == [0, KEYS, KEYS, KEYS, 0]
    # One job for each batch with data (batch 0: assert_that's own impulse); none for the
    # processing-time advance, which makes nothing due; none after the end's panes.
    assert jobs[1:5] == [1, 1, 0, 1]
    assert jobs[-1] == 0
    assert all(line["rounds"] == line["spark_jobs"] for line in lines)


def stream_of_many_batches(batches: int) -> streams.TestStream:
    """Each batch: 20 elements over 10 keys, the watermark one second further."""
    stream = streams.TestStream().advance_watermark_to(0)
    for batch in range(batches):
        stream = stream.add_elements([TimestampedValue((f"key-{(batch + n) % 10}", batch), batch)
                                      for n in range(20)])
        if batch % 4 == 3:
            stream = stream.advance_watermark_to(batch + 1)
    return stream.advance_watermark_to_infinity()


def build_counts(pipeline, panes_directory, batches):
    from apache_beam.transforms.trigger import AccumulationMode, AfterCount, AfterWatermark

    _ = (pipeline
         | "Events" >> stream_of_many_batches(batches)
         | "Windows" >> beam.WindowInto(
             FixedWindows(8), trigger=AfterWatermark(early=AfterCount(5), late=AfterCount(1)),
             accumulation_mode=AccumulationMode.ACCUMULATING, allowed_lateness=4)
         | "Sum" >> beam.CombinePerKey(sum)
         | "Describe" >> beam.MapTuple(lambda key, total: {"key": key, "total": total})
         | "Write" >> beam.ParDo(WritePanes(panes_directory)))


#: Deltas in a chain before a snapshot, for the snapshot test (the driver decides).
DELTAS_PER_SNAPSHOT = 4


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_state_files_reach_a_snapshot_and_a_restart_gives_the_same_panes(runner, tmp_path,
                                                                          monkeypatch):
    """Each batch's tasks write the keys they changed (a delta); a partition's chain starts
    over with a snapshot after DELTAS_PER_SNAPSHOT deltas; a run stopped there and started
    again on the same directory (its stores rebuilt from the snapshot and deltas) ends with
    the panes of an uninterrupted run, every pane once."""
    monkeypatch.setattr(changelog, "MAX_DELTAS", DELTAS_PER_SNAPSHOT)
    batches = 3 * DELTAS_PER_SNAPSHOT + 2
    uninterrupted, first, second = (tmp_path / name for name in ("all", "first", "second"))
    for directory in (uninterrupted, first, second):
        directory.mkdir()
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(streaming=True))
    build_counts(pipeline, str(uninterrupted), batches)
    pipeline.run().wait_until_finish()

    checkpoints = tmp_path / "checkpoints"
    stop_at = 2 * DELTAS_PER_SNAPSHOT + 2
    options = PipelineOptions(streaming=True, checkpoint_dir=str(checkpoints),
                              checkpoint_interval_batches=1, max_batches=stop_at)
    pipeline = beam.Pipeline(runner=runner, options=options)
    build_counts(pipeline, str(first), batches)
    pipeline.run().wait_until_finish()
    manifest = read_manifest(latest_checkpoint(str(checkpoints)))
    assert manifest["batch"] == stop_at
    chains = manifest["state_files"]["Sum/GroupByKey"]
    assert sorted(chains) == ["0", "1"]
    for chain in chains.values():
        kinds = [entry[0] for entry in chain]
        assert kinds[0] == "snapshot" and set(kinds[1:]) <= {"delta"}, kinds
        # A snapshot, written in the background, joins the chain when the partition's next
        # task reports it: the chain may hold one more delta than the limit meanwhile.
        assert len(kinds) <= DELTAS_PER_SNAPSHOT + 2
    # Only the files the chains name are kept (older chains went with the checkpoint
    # that named them last).
    kept = sorted(path.name for path in (checkpoints / "state").rglob("*") if path.is_file())
    named = sorted(changelog.file_name(changelog.StateFile(*entry))
                   for chain in chains.values() for entry in chain)
    assert kept == named

    options = PipelineOptions(streaming=True, checkpoint_dir=str(checkpoints),
                              checkpoint_interval_batches=1)
    pipeline = beam.Pipeline(runner=runner, options=options)
    build_counts(pipeline, str(second), batches)
    pipeline.run().wait_until_finish()

    expected = collections.Counter(pane for pane, _ in read_panes(uninterrupted))
    got = (collections.Counter(pane for pane, _ in read_panes(first))
           + collections.Counter(pane for pane, _ in read_panes(second)))
    assert got == expected
    assert len(read_panes(second)) > 0


def test_side_input_elements_are_kept_while_their_windows_live(make_pipeline, runner_name,
                                                                tmp_path):
    """A windowed side input: each main element reads its window's rate. The side input's
    elements of a window are dropped once its watermark passes the window (the SparkRunner
    reports what it keeps)."""
    stream = (streams.TestStream()
              .advance_watermark_to(0, tag="rates").advance_watermark_to(0, tag="amounts")
              .add_elements([TimestampedValue(2, 1)], tag="rates")
              .advance_watermark_to(10, tag="rates")
              .add_elements([TimestampedValue(5, 3), TimestampedValue(6, 4)], tag="amounts")
              .add_elements([TimestampedValue(10, 11)], tag="rates")
              .advance_watermark_to(20, tag="rates")
              .add_elements([TimestampedValue(7, 12)], tag="amounts")
              .advance_watermark_to(30, tag="amounts")
              .advance_watermark_to(40, tag="rates")
              .advance_watermark_to_infinity(tag="rates")
              .advance_watermark_to_infinity(tag="amounts"))
    report = tmp_path / "report.jsonl"
    pipeline = make_pipeline(streaming=True, streaming_report=str(report))
    inputs = pipeline | stream
    rates = inputs["rates"] | "RateWindows" >> beam.WindowInto(FixedWindows(10))
    amounts = inputs["amounts"] | "AmountWindows" >> beam.WindowInto(FixedWindows(10))
    priced = amounts | "Price" >> beam.Map(lambda amount, rate: amount * rate[0],
                                           rate=beam.pvalue.AsList(rates))
    assert_that(priced, equal_to([10, 12, 70]))
    pipeline.run().wait_until_finish()
    if runner_name != "SparkRunner":
        return
    kept = [sum(line["side_input_elements"].values()) for line in report_lines(report)]
    assert max(kept) == 2  # both windows' rates, while both can be read
    assert kept[-1] == 0  # the side input's watermark passed both windows


#: Spark's own start-up warnings (host name, native Hadoop library): once per JVM.
STARTUP_WARNINGS = ("WARN Utils:", "WARN NativeCodeLoader:")


def test_a_streaming_run_logs_no_warning_while_it_runs(tmp_path):
    """A branching streaming pipeline (one stage read by a stateful DoFn and by a windowed
    sum), checkpointed every two batches, at Spark's default log level: Spark logs nothing
    but its start-up lines. (A stage read by two stages of one job used to make them race
    for its cached blocks: "Block ... already exists on this machine".)"""
    import subprocess
    import sys

    script = (
        "import apache_beam as beam\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "from runners.spark import SparkRunner\n"
        "import test_spark_streaming_checkpoint as t\n"
        f"options = PipelineOptions(streaming=True, spark_master_url='local[2]', "
        f"checkpoint_dir={str(tmp_path / 'checkpoints')!r}, checkpoint_interval_batches=2)\n"
        "pipeline = beam.Pipeline(runner=SparkRunner(), options=options)\n"
        f"t.build(pipeline, {str(tmp_path)!r})\n"
        "pipeline.run().wait_until_finish()\n"
        "print('RUN DONE')\n")
    # Every test folder (the job's DoFns live in tests/state), and the repository.
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        TEST_FOLDERS + [str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    run = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True,
                         text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0 and "RUN DONE" in output, output[-3000:]
    spark_lines = [line for line in output.splitlines()
                   if re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR) ", line)]
    unexpected = [line for line in spark_lines
                  if not any(startup in line for startup in STARTUP_WARNINGS)]
    assert unexpected == [], "\n".join(unexpected[:20])
    assert len(read_panes(tmp_path)) > 10  # it did run: panes were written
