"""The streaming benchmark's Beam pipelines, run on the SparkRunner in streaming.

Each reads an unbounded synthetic source, a splittable DoFn whose shards emit one batch's
worth of events per call and then self-checkpoint, so every micro-batch reads the same
number of events; its watermark estimator follows event time (minus the allowed disorder).
Batches run back to back (``--batch_interval_seconds`` 0.01): the figures are the loop's
capacity, not a paced rate. Panes are appended to files (one per worker process and bundle)
and read back to check them.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import trigger, window
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.timestamp import Timestamp

from bench.memory import PeakMemory
from bench.streaming import workloads


class _ShardOffsets(RestrictionProvider):
    """Element (shard, shards, per call, events per shard, seed): offsets [0, per shard)."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[3])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class WindowedSumEvents(beam.DoFn):
    """Shard ``s`` emits events ``s, s + shards, ...``, ``per call`` of them per call."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_ShardOffsets()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        shard, shards, per_call, _, seed = element
        start = tracker.current_restriction().start
        index = start * shards + shard
        for offset in range(start, start + per_call):
            if not tracker.try_claim(offset):
                return
            index = offset * shards + shard
            team, score, event_time = workloads.windowed_sum_event(seed, index)
            yield beam.window.TimestampedValue((team, score), event_time)
        watermark.set_watermark(Timestamp(workloads.windowed_sum_watermark(index)))
        tracker.defer_remainder()


class ScalingEvents(beam.DoFn):
    """Shard ``s`` emits events ``s, s + shards, ...``, ``per call`` of them per call: each
    event a new key; event time one second per call (per batch)."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_ShardOffsets()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        shard, shards, per_call, _, _ = element
        start = tracker.current_restriction().start
        batch = start // per_call
        for offset in range(start, start + per_call):
            if not tracker.try_claim(offset):
                return
            key, value, event_time = workloads.scaling_event(offset * shards + shard, batch)
            yield beam.window.TimestampedValue((key, value), event_time)
        watermark.set_watermark(Timestamp(
            workloads.FIRST_EVENT_TIME + batch - workloads.DISORDER_SECONDS))
        tracker.defer_remainder()


class AppendPanes(beam.DoFn):
    """Appends a bundle's panes as JSON lines ``[key, window start, index, value]`` to a file
    of its own (a sink that works in streaming on any runner)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._lines: List[str] = []

    def start_bundle(self):
        self._lines = []

    def process(self, element, span=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, total = element
        self._lines.append(json.dumps([key, int(span.start), pane.index, total]))

    def finish_bundle(self):
        if self._lines:
            name = os.path.join(self._directory, f"panes-{os.getpid()}-{time.time_ns()}.jsonl")
            with open(name, "w", encoding="utf-8") as panes:
                panes.write("\n".join(self._lines) + "\n")
        self._lines = []


def windowed_sum(pipeline: beam.Pipeline, shards: int, per_call: int, per_shard: int,
                 seed: int, panes_dir: str) -> None:
    """Source -> fixed 60 s windows, early (every second) / on-time / late (every element)
    panes, accumulating -> sum per team -> panes appended to files.

    Beam's WindowInto and CombinePerKey with the project's trigger preset, rather than
    ``WindowedAggregation``: that composite also counts dropped late data per element (an
    extra keyed join), which is not what this benchmark measures.
    """
    from transforms.aggregations import SumFn
    from triggers.presets import early_and_late_firings

    when = early_and_late_firings(early_every_seconds=1, late_every_count=1,
                                  allowed_lateness=workloads.ALLOWED_LATENESS)
    _ = (pipeline
         | beam.Create([(shard, shards, per_call, per_shard, seed) for shard in range(shards)])
         | "Source" >> beam.ParDo(WindowedSumEvents())
         | beam.WindowInto(window.FixedWindows(workloads.WINDOW_SECONDS), trigger=when.trigger,
                           allowed_lateness=workloads.ALLOWED_LATENESS,
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
         | "Sum" >> beam.CombinePerKey(SumFn())
         | beam.ParDo(AppendPanes(panes_dir)))


def state_scaling(pipeline: beam.Pipeline, shards: int, per_call: int, per_shard: int,
                  seed: int, panes_dir: str) -> None:
    """Source (a new key per event) -> 1-hour windows, a pane per element (early firing),
    accumulating -> sum per key -> panes appended to files."""
    from transforms.aggregations import SumFn

    _ = (pipeline
         | beam.Create([(shard, shards, per_call, per_shard, seed) for shard in range(shards)])
         | "Source" >> beam.ParDo(ScalingEvents())
         | beam.WindowInto(window.FixedWindows(workloads.SCALING_WINDOW_SECONDS),
                           trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
         | "Sum" >> beam.CombinePerKey(SumFn())
         | beam.ParDo(AppendPanes(panes_dir)))


def latest_panes(panes_dir: str) -> Dict[Any, int]:
    """{(key, window start): value of the key's latest pane in that window}."""
    latest: Dict[Any, Any] = {}
    for path in glob.glob(os.path.join(panes_dir, "panes-*.jsonl")):
        with open(path, encoding="utf-8") as panes:
            for line in panes:
                key, start, index, total = json.loads(line)
                if (key, start) not in latest or latest[(key, start)][0] < index:
                    latest[(key, start)] = (index, total)
    return {key: total for key, (_, total) in latest.items()}


def run(session: Any, build: Callable, master: Optional[str], parallelism: int, shards: int,
        events_per_batch: int, batches: int, seed: int, drain: bool = True,
        source_batches: Optional[int] = None, checkpoint_dir: Optional[str] = None,
        checkpoint_interval: int = 10, panes_dir: Optional[str] = None,
        allow_empty: bool = False) -> Dict[str, Any]:
    """Run one pipeline over ``batches`` batches of events; returns the per-batch report
    lines, the latest panes and the peak memory.

    With ``drain`` the job runs until its source is exhausted and every window fired (it
    ends by itself); without, it stops after ``batches`` batches. ``source_batches``: the
    source holds that many batches (default ``batches``; more, for a run resumed from its
    ``checkpoint_dir`` to go on with). With ``allow_empty``, ``events_per_batch`` 0 makes
    every batch empty: the source runs and reads nothing (run it without ``drain``).
    """
    from runners.spark import SparkRunner

    per_call = max(0 if allow_empty else 1, events_per_batch // shards)
    per_shard = max(per_call, 1) * (source_batches or batches)
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as scratch:
        panes = panes_dir or scratch
        report = os.path.join(scratch, "report.jsonl")
        flags = ["--streaming", f"--spark_parallelism={parallelism}",
                 "--batch_interval_seconds=0.01", f"--streaming_report={report}"]
        if master is not None:  # None: a Spark Connect session's server has its own
            flags.append(f"--spark_master_url={master}")
        if not drain:
            flags.append(f"--max_batches={batches}")
        if checkpoint_dir:
            flags += [f"--checkpoint_dir={checkpoint_dir}",
                      f"--checkpoint_interval_batches={checkpoint_interval}"]
        pipeline = beam.Pipeline(runner=SparkRunner(session), options=PipelineOptions(flags))
        build(pipeline, shards, per_call, per_shard, seed, panes)
        began = time.perf_counter()
        with PeakMemory() as memory:
            result = pipeline.run()
            result.wait_until_finish()
        seconds = time.perf_counter() - began
        lines = [json.loads(line) for line in open(report, encoding="utf-8")]
        rescales = result.metrics().query(MetricsFilter().with_namespace(
            "spark_streaming").with_name("rescale_millis"))["distributions"]
        return {"lines": lines, "rescale_millis": sum(
                    metric.committed.sum for metric in rescales) if rescales else None, "panes": latest_panes(panes), "seconds": seconds,
                "events": per_call * shards * batches, "events_per_batch": per_call * shards,
                "peak_memory_mib": memory.result()}
