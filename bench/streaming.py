"""``python -m bench.streaming``: sustained streaming throughput and per-batch latency.

The workload: a keyed fixed-window sum with early and late firings (fixed 60 s windows,
``early_and_late_firings(early_every_seconds=1, late_every_count=1)``, accumulating, 20 keys)
over an unbounded synthetic source, on the SparkRunner's streaming loop
(``--streaming``, ``local[2]`` by default). The source is a splittable DoFn
(:class:`SyntheticEvents`): ``--shards`` restrictions, each emitting ``events_per_batch /
shards`` events per call and then self-checkpointing, so every micro-batch reads
``--events-per-batch`` events; its watermark estimator follows event time (minus 5 s of
allowed disorder). Every 50th event is 70 s late (behind the watermark, within the allowed
lateness of 120 s), so LATE panes fire too.

Batches run back to back (``--batch_interval_seconds`` 0.01): the figures are the loop's
capacity, not a paced rate. Reported, from the loop's per-batch report
(``--streaming_report``): events per second sustained (events of the measured batches over
their processing time; batch 0 starts the workers and is not measured), p50/p95/max batch
latency (processing time of a batch), and where the time goes: Spark jobs per batch (the
run's job group), SDK harness time per batch (Beam's ``process_bundle_msecs`` of every
transform, summed over both task slots), and the rest (Spark scheduling, shuffle of the keyed
step's state and input, driver). The final pane of each (team, window) is checked against a
plain Python sum; a difference fails the run.

Each run appends one JSON record to ``bench/results/streaming-<timestamp>.jsonl``.

Examples::

    python -m bench.streaming                        # 10k events per batch, 12 batches
    python -m bench.streaming --events-per-batch 50000 --batches 8
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.timestamp import Timestamp

from bench.workloads import FIRST_EVENT_TIME, TEAMS

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Event time advances by one second every this many events (over all shards).
EVENTS_PER_EVENT_SECOND = 1000
#: Every LATE_EVERY-th event is LATE_BY_SECONDS behind its neighbours.
LATE_EVERY, LATE_BY_SECONDS = 50, 70
WINDOW_SECONDS, ALLOWED_LATENESS = 60, 120
#: The source's watermark trails the event time by this much (allowed disorder).
DISORDER_SECONDS = 5


def synthetic_event(seed: int, index: int) -> Tuple[str, int, int]:
    """The ``index``-th event of the stream: (team, score 1..100, event time in seconds)."""
    mixed = (index * 2654435761 + seed * 97) & 0xFFFFFFFF
    event_time = FIRST_EVENT_TIME + index // EVENTS_PER_EVENT_SECOND
    if index % LATE_EVERY == 0 and index:
        event_time -= LATE_BY_SECONDS
    return TEAMS[mixed % len(TEAMS)], 1 + (mixed >> 8) % 100, event_time


class _ShardOffsets(RestrictionProvider):
    """Element (shard, shards, per call, events per shard, seed): offsets [0, events per shard)."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[3])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class SyntheticEvents(beam.DoFn):
    """An unbounded source: shard ``s`` emits events ``s, s + shards, ...``, ``per call`` of
    them per call, then self-checkpoints; its watermark follows their event time."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_ShardOffsets()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        shard, shards, per_call, _, seed = element
        start = tracker.current_restriction().start
        for offset in range(start, start + per_call):
            if not tracker.try_claim(offset):
                return
            index = offset * shards + shard
            team, score, event_time = synthetic_event(seed, index)
            yield beam.window.TimestampedValue((team, score), event_time)
        watermark.set_watermark(Timestamp(
            FIRST_EVENT_TIME + index // EVENTS_PER_EVENT_SECOND - DISORDER_SECONDS))
        tracker.defer_remainder()


class _AppendPanes(beam.DoFn):
    """Appends every pane as a JSON line to a file of its worker process (a sink that works
    in streaming on any runner)."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, element, span=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        team, total = element
        path = os.path.join(self._directory, f"panes-{os.getpid()}.jsonl")
        with open(path, "a", encoding="utf-8") as panes:
            panes.write(json.dumps([team, int(span.start), pane.index, pane.timing, total]) + "\n")


def build(pipeline: beam.Pipeline, shards: int, per_call: int, per_shard: int, seed: int,
          panes_dir: str) -> None:
    """Source -> fixed 60 s windows, early (every second) / on-time / late (every element)
    panes, accumulating -> sum per team -> panes appended to files.

    Beam's WindowInto and CombinePerKey with the project's trigger preset, rather than
    ``WindowedAggregation``: that composite also counts dropped late data per element (an
    extra keyed join), which costs several times the sum itself and is not what this
    benchmark measures.
    """
    from apache_beam.transforms import trigger, window

    from transforms.aggregations import SumFn
    from triggers.presets import early_and_late_firings

    when = early_and_late_firings(early_every_seconds=1, late_every_count=1,
                                  allowed_lateness=ALLOWED_LATENESS)
    _ = (pipeline
         | beam.Create([(shard, shards, per_call, per_shard, seed) for shard in range(shards)])
         | "Source" >> beam.ParDo(SyntheticEvents())
         | beam.WindowInto(window.FixedWindows(WINDOW_SECONDS), trigger=when.trigger,
                           allowed_lateness=ALLOWED_LATENESS,
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
         | "Sum" >> beam.CombinePerKey(SumFn())
         | beam.ParDo(_AppendPanes(panes_dir)))


def reference(seed: int, events: int) -> Dict[Tuple[str, int], int]:
    totals: Dict[Tuple[str, int], int] = {}
    for index in range(events):
        team, score, event_time = synthetic_event(seed, index)
        key = (team, event_time - event_time % WINDOW_SECONDS)
        totals[key] = totals.get(key, 0) + score
    return totals


def final_panes(panes_dir: str) -> Dict[Tuple[str, int], int]:
    latest: Dict[Tuple[str, int], Tuple[int, int]] = {}
    for path in glob.glob(os.path.join(panes_dir, "panes-*.jsonl")):
        with open(path, encoding="utf-8") as panes:
            for line in panes:
                team, start, index, _, total = json.loads(line)
                if (team, start) not in latest or latest[(team, start)][0] < index:
                    latest[(team, start)] = (index, total)
    return {key: total for key, (_, total) in latest.items()}


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _sdk_millis(result: Any) -> Optional[float]:
    """Beam's process_bundle_msecs of every transform, summed (None if not reported)."""
    try:
        metrics = result.monitoring_metrics().query()
    except Exception:  # a runner without system metrics
        return None
    total = 0.0
    for metric in metrics.get("counters", []):
        if "process_bundle_msecs" in str(metric.key.metric.name):
            total += metric.committed
    return total or None


def run(arguments: argparse.Namespace) -> Dict[str, Any]:
    from bench.session import bench_session
    from runners.spark import SparkRunner

    session = bench_session(arguments.master, arguments.parallelism)
    per_call = max(1, arguments.events_per_batch // arguments.shards)
    per_shard = per_call * arguments.batches
    events = per_shard * arguments.shards
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as scratch:
        report = os.path.join(scratch, "report.jsonl")
        options = PipelineOptions([
            "--streaming", f"--spark_master_url={arguments.master}",
            f"--spark_parallelism={arguments.parallelism}", "--batch_interval_seconds=0.01",
            f"--streaming_report={report}"])
        pipeline = beam.Pipeline(runner=SparkRunner(session), options=options)
        build(pipeline, arguments.shards, per_call, per_shard, arguments.seed, scratch)
        began = time.perf_counter()
        result = pipeline.run()
        result.wait_until_finish()
        seconds = time.perf_counter() - began
        tracker = session.sparkContext.statusTracker()
        jobs = len(tracker.getJobIdsForGroup(result._job_group))
        batches = [json.loads(line) for line in open(report, encoding="utf-8")]
        answer = final_panes(scratch)
    expected = reference(arguments.seed, events)
    measured = [batch["millis"] for batch in batches[1:arguments.batches]]  # reading batches
    sdk = _sdk_millis(result)
    return {
        "workload": "streaming_keyed_windowed_sum_early_late",
        "master": arguments.master, "parallelism": arguments.parallelism,
        "events": events, "events_per_batch": per_call * arguments.shards,
        "batches": len(batches), "seconds": round(seconds, 2),
        "sustained_events_per_second": round(
            per_call * arguments.shards * len(measured) / (sum(measured) / 1000), 1),
        "batch_millis_p50": percentile(measured, 0.5),
        "batch_millis_p95": percentile(measured, 0.95),
        "batch_millis_max": max(measured), "first_batch_millis": batches[0]["millis"],
        "spark_jobs_per_batch": round(jobs / len(batches), 2),
        "sdk_harness_millis_per_batch": None if sdk is None else round(sdk / len(batches), 1),
        "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
        "agrees": answer == expected,
        "windows": len(expected),
    }


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--events-per-batch", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=12, help="batches that read events")
    parser.add_argument("--shards", type=int, default=4, help="source restrictions (4)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    arguments = parser.parse_args(argv)
    if arguments.events_per_batch < arguments.shards or arguments.batches < 2:
        parser.error("--events-per-batch must be >= --shards and --batches >= 2")
    return arguments


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    record = run(arguments)
    arguments.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    with open(arguments.results_dir / f"streaming-{stamp}.jsonl", "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
    for name, value in record.items():
        print(f"{name:32s} {value}")
    if not record["agrees"]:
        print("FAILED: the final panes differ from the reference sums", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
