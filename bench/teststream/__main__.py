"""``python -m bench.teststream``: TestStream pipelines on our SparkRunner and the DirectRunner.

TestStream is how users prove lateness and refinement behaviour, on the runner they deploy
to; this measures what such a proof costs on each runner, in one run, on ``local[2]``:

* the pipelines of :mod:`bench.teststream.pipelines` (fixed, sliding and session windows;
  early, on-time and late firings; a stateful DoFn with timers; a side input the main input
  waits for), each run ``--repeats`` times on each engine; the output of every run is
  compared with the DirectRunner's (a difference fails the benchmark);
* Beam's own ``TestStreamTranscriptTest`` (``apache_beam/transforms/trigger_test.py``) for
  the transcripts of ``--transcripts``, through Beam's own test harness with
  ``--runner`` set to each engine (a failing test fails the benchmark; Beam skips the
  transcripts it marks broken on its DirectRunner there).

Printed: the median seconds per pipeline on each engine (Spark already started: the first,
unmeasured run starts it), the rounds our runner ran, and the p50 time of a round that held
a handful of elements (from the runner's ``--streaming_report``: every batch of one round
with at most :data:`SMALL_ROUND_ELEMENTS` source elements). A record goes to
``bench/results/teststream-<timestamp>.jsonl``.

Example::

    python -m bench.teststream --repeats 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from bench.report import RESULTS_DIR, percentile, write_jsonl
from bench.teststream.pipelines import PIPELINES, read_elements

#: A round of at most this many source elements counts as "a handful" for the fixed cost.
SMALL_ROUND_ELEMENTS = 10
TRANSCRIPTS = ("fixed_default", "fixed_default_late_data", "early_late_sessions",
               "discarding_early_fixed", "known_late_data_watermark")


def _run(runner: Any, build: Callable, report: Optional[str]) -> Dict[str, Any]:
    """One run of a pipeline: seconds, what it wrote, its report lines."""
    with tempfile.TemporaryDirectory(prefix="bench-teststream-") as scratch:
        out = os.path.join(scratch, "out")
        os.makedirs(out)
        flags = ["--streaming"] + ([f"--streaming_report={report}"] if report else [])
        pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(flags))
        build(pipeline, out)
        began = time.perf_counter()
        pipeline.run().wait_until_finish()
        seconds = time.perf_counter() - began
        written = read_elements(out)
    lines = []
    if report and os.path.exists(report):
        with open(report, encoding="utf-8") as file:
            lines = [json.loads(line) for line in file]
        os.remove(report)
    return {"seconds": seconds, "written": written, "lines": lines}


def _transcript(name: str, runner_flags: str) -> Dict[str, Any]:
    """Beam's own TestStreamTranscriptTest for transcript ``name``, on the runner the flags
    name (Beam's TestPipeline reads them)."""
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.transforms import trigger_test

    TestPipeline.pytest_test_pipeline_options = runner_flags
    test = trigger_test.TestStreamTranscriptTest(f"test_{name}")
    began = time.perf_counter()
    result = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0).run(
        unittest.TestSuite([test]))
    return {"seconds": time.perf_counter() - began, "ok": result.wasSuccessful(),
            "skipped": bool(result.skipped)}


def measure(arguments: argparse.Namespace) -> Dict[str, Any]:
    from apache_beam.runners.direct.direct_runner import DirectRunner

    from bench.session import bench_session
    from runners.spark import SparkRunner

    session = bench_session(arguments.master, arguments.parallelism)
    ours = SparkRunner(session)
    scratch = tempfile.mkdtemp(prefix="bench-teststream-report-")
    report = os.path.join(scratch, "report.jsonl")
    first = next(iter(PIPELINES.values()))
    warm = {"ours": _run(ours, first, None)["seconds"],
            "direct": _run(DirectRunner(), first, None)["seconds"]}
    record: Dict[str, Any] = {"master": arguments.master, "parallelism": arguments.parallelism,
                              "repeats": arguments.repeats, "warm_up_seconds": warm,
                              "pipelines": {}, "transcripts": {}}
    small_rounds: List[int] = []
    for name, build in PIPELINES.items():
        direct = [_run(DirectRunner(), build, None) for _ in range(arguments.repeats)]
        spark = [_run(ours, build, report) for _ in range(arguments.repeats)]
        expected = direct[0]["written"]
        lines = [line for run in spark for line in run["lines"]]
        small = [line["millis"] for line in lines
                 if line["rounds"] == 1 and line["source_elements"] <= SMALL_ROUND_ELEMENTS]
        small_rounds += small
        record["pipelines"][name] = {
            "direct_seconds": statistics.median(run["seconds"] for run in direct),
            "ours_seconds": statistics.median(run["seconds"] for run in spark),
            "rounds_per_run": sum(line["rounds"] for line in lines) / len(spark),
            "compact_rounds_per_run": sum(line.get("compact_rounds", 0) for line in lines)
            / len(spark),
            "small_round_millis_p50": percentile(small, 0.5) if small else None,
            "elements": len(expected),
            "agrees": all(run["written"] == expected for run in direct + spark)}
    flags = {"direct": "--runner=DirectRunner",
             "ours": f"--runner=runners.spark.SparkRunner --spark_master_url={arguments.master}"}
    for name in arguments.transcripts:
        record["transcripts"][name] = {
            engine: [_transcript(name, engine_flags) for _ in range(arguments.repeats)]
            for engine, engine_flags in flags.items()}
    record["small_round_millis_p50"] = percentile(small_rounds, 0.5) if small_rounds else None
    record["small_rounds"] = len(small_rounds)
    record["ours_median_seconds"] = statistics.median(
        [entry["ours_seconds"] for entry in record["pipelines"].values()]
        + [statistics.median(run["seconds"] for run in runs["ours"])
           for runs in record["transcripts"].values()])
    record["load_average_1min"] = round(os.getloadavg()[0], 2)
    return record


def agrees(record: Dict[str, Any]) -> bool:
    return (all(entry["agrees"] for entry in record["pipelines"].values())
            and all(run["ok"] for runs in record["transcripts"].values()
                    for engine in runs.values() for run in engine))


def print_record(record: Dict[str, Any]) -> None:
    print(f"\nTestStream pipelines, median of {record['repeats']} runs each, {record['master']}"
          f" (Spark started first: {record['warm_up_seconds']['ours']:.1f} s)")
    print(f"  {'pipeline':44s} {'DirectRunner s':>14s} {'ours s':>8s} {'rounds':>7s} "
          f"{'compact':>8s} {'round p50 ms':>13s} {'output':>7s}")
    for name, entry in record["pipelines"].items():
        round_p50 = entry["small_round_millis_p50"]
        print(f"  {name:44s} {entry['direct_seconds']:14.2f} {entry['ours_seconds']:8.2f} "
              f"{entry['rounds_per_run']:7.1f} {entry['compact_rounds_per_run']:8.1f} "
              f"{'-' if round_p50 is None else f'{round_p50:.0f}':>13s} "
              f"{'same' if entry['agrees'] else 'DIFFERS':>7s}")
    for name, runs in record["transcripts"].items():
        direct = statistics.median(run["seconds"] for run in runs["direct"])
        ours = statistics.median(run["seconds"] for run in runs["ours"])
        ok = all(run["ok"] for engine in runs.values() for run in engine)
        skipped = any(run["skipped"] for run in runs["direct"])
        direct_text = "skipped" if skipped else f"{direct:.2f}"
        print(f"  {'Beam transcript ' + name:44s} {direct_text:>14s} {ours:8.2f} {'':7s} "
              f"{'':8s} {'':>13s} {'passes' if ok else 'FAILS':>7s}")
    print(f"  median seconds per pipeline, ours: {record['ours_median_seconds']:.2f}")
    print(f"  a round of at most {SMALL_ROUND_ELEMENTS} elements: p50 "
          f"{record['small_round_millis_p50']} ms ({record['small_rounds']} rounds)")
    print(f"  load average {record['load_average_1min']}")


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.teststream",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each pipeline on each runner; the median is reported (3)")
    parser.add_argument("--transcripts", default=",".join(TRANSCRIPTS),
                        help="Beam transcript tests to run (comma-separated names)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark partitions (2)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where each run appends its records (bench/results)")
    arguments = parser.parse_args(argv)
    arguments.transcripts = [name for name in arguments.transcripts.split(",") if name]
    if arguments.repeats < 1:
        parser.error("--repeats: at least 1")
    return arguments


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    record = measure(arguments)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    write_jsonl(arguments.results_dir / f"teststream-{stamp}.jsonl", [record])
    print_record(record)
    if not agrees(record):
        print("FAILED: an output differs from the DirectRunner's, or a Beam test failed",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
