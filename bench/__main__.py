"""``python -m bench``: throughput and memory of each workload on each engine, checked equal.

Engines (``--only``):

- ``spark``: the Beam pipeline on our SparkRunner (``runners.spark.SparkRunner``) with
  ``--spark_master_url`` = ``--master``; reported as unavailable if it cannot be imported.
- ``connect``: the same pipeline on our SparkRunner over Spark Connect: a Connect server the
  bench starts from pyspark's jars (``services.connect_server``) with the same master and
  parallelism, its Python workers forking from the runner's daemon as the classic
  session's do, and a client session in this process (no SparkContext on this side), set
  up as the runner sets up the sessions it makes (``ConnectBackend.SESSION_DEFAULTS``).
- ``pyspark``: the same computation written by hand with RDDs (``bench.baselines``).
- ``dataframe``: the same computation written by hand with a DataFrame (``bench.baselines``).
- ``direct``: the Beam pipeline on Beam's DirectRunner (its defaults), in a new Python
  process that has not imported the SparkRunner (``bench.direct``: the runner's fast paths
  patch Beam in the process that imports it).

``spark`` and ``pyspark`` share one SparkSession (created first; the SparkRunner gets the
same master, and the run records whether it reused that session). Every engine first runs
every workload once at ``--warmup-events`` (JVM JIT, Python workers forked and their
imports done, Beam's own caches), unmeasured, before the measured runs.
``parse_filter_project`` reads files (``bench.bids``), and so do Beam's Nexmark workloads
(``nexmark_q0``, ``nexmark_q1``, ``nexmark_q2``, ``nexmark_windowed_sum``: Beam's own
queries, parser and monitors on Nexmark's events; ``bench.nexmark``): they are written once
per event set, before any engine runs them and outside every timing, read by every engine,
and removed when the benchmark ends. Every answer,
warm-up or measured, is compared with a plain Python loop's; any difference fails the run
(exit status 1) after the table is printed.

With ``--repeat N`` each engine runs each workload N times (alternating with the other
engines: machine noise hits them alike) and the median run is reported. Each record is
appended to ``bench/results/<timestamp>.jsonl``.

Examples::

    python -m bench                                  # 1e5 events, every engine
    python -m bench --events 1000000 --only pyspark,direct
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from bench.answers import reference_answer
from bench.bids import BidFiles
from bench.memory import PeakMemory
from bench.nexmark.events import EventFiles
from bench.nexmark.queries import WORKLOADS as NEXMARK_WORKLOADS
from bench.report import RESULTS_DIR, format_table, ratios, write_jsonl
from bench.workloads import (
    READS_FILES,
    WORKLOADS,
    EventSet,
    describe_difference,
)

ENGINES = ("pyspark", "dataframe", "spark", "connect", "direct")
#: Every workload: the benchmark's own (``bench.workloads``), then Beam's Nexmark
#: (``bench.nexmark``).
ALL_WORKLOADS = WORKLOADS + NEXMARK_WORKLOADS


def _count(text: str) -> int:
    """Accept 100000, 1e5 and 100_000."""
    value = float(text.replace("_", ""))
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole, non-negative number")
    return int(value)


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


def _choices(allowed: tuple) -> Callable[[str], List[str]]:
    def parse(text: str) -> List[str]:
        chosen = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in chosen if name not in allowed]
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose a comma-separated subset of {', '.join(allowed)}")
        return chosen
    return parse


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=_count, default=100_000, help="events per run (1e5)")
    parser.add_argument("--only", type=_choices(ENGINES), default=list(ENGINES),
                        help="engines, comma-separated: pyspark,dataframe,spark,connect,direct "
                             "(all)")
    parser.add_argument("--workloads", type=_choices(ALL_WORKLOADS), default=list(ALL_WORKLOADS),
                        help="workloads, comma-separated: " + ",".join(ALL_WORKLOADS) + " (all)")
    parser.add_argument("--seed", type=int, default=2024, help="event generator seed (2024)")
    parser.add_argument("--shards", type=int, default=8, help="generator shards (8)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark partitions (2)")
    parser.add_argument("--bundle-size", type=int, default=None,
                        help="passed to the SparkRunner as --bundle_size")
    parser.add_argument("--no-chains", action="store_true",
                        help="run the SparkRunner with --chain_simple_steps=false: every step "
                             "as Beam's own operation (what chaining saves, in one run)")
    parser.add_argument("--runner-option", action="append", default=[], metavar="OPTION",
                        help="a pipeline option passed to the SparkRunner (and on Connect), "
                             "repeatable, e.g. --runner-option=--bulk_text_io=false: the "
                             "runner's new paths off, in the same code and run")
    parser.add_argument("--warmup-events", type=_count, default=20_000,
                        help="events of the unmeasured warm-up run per engine (0: none)")
    parser.add_argument("--repeat", type=_positive, default=1,
                        help="measured runs per engine and workload; the median run is "
                             "reported, every run's seconds kept (1)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where each run appends its records (bench/results)")
    return parser.parse_args(argv)


class Engines:
    """Runs one workload on one engine; owns the shared SparkSession."""

    def __init__(self, arguments: argparse.Namespace) -> None:
        self.arguments = arguments
        self.session = None
        self.spark_runner_class: Any = None
        self.unavailable: Dict[str, str] = {}
        self.session_shared: Optional[bool] = None
        self.connect_server: Any = None
        self.connect_session: Any = None
        self.bid_files = BidFiles()
        self.nexmark_files = EventFiles()

    def inputs(self, workload: str, event_set: EventSet) -> Optional[str]:
        """The pattern of ``workload``'s input files over ``event_set`` (written on the first
        call: make it before any clock starts), or None for a workload that reads none."""
        if workload in NEXMARK_WORKLOADS:
            return self.nexmark_files.pattern(event_set)
        return self.bid_files.pattern(event_set) if workload in READS_FILES else None

    def prepare(self, engines: List[str]) -> None:
        if "connect" in engines:
            try:
                from bench.session import bench_connect_server

                self.connect_server = bench_connect_server(self.arguments.master,
                                                           self.arguments.parallelism)
                from runners.spark.backends.connect import ConnectBackend

                self.connect_session = self.connect_server.session()
                # As the runner sets up the sessions it makes itself (--spark_remote).
                for key, value in ConnectBackend.SESSION_DEFAULTS.items():
                    self.connect_session.conf.set(key, value)
            except Exception as error:  # the row reports why it could not run
                self.unavailable["connect"] = (
                    f"no Spark Connect server: {type(error).__name__}: {error}")
        if {"spark", "connect"} & set(engines):
            try:
                from runners.spark import SparkRunner
                self.spark_runner_class = SparkRunner
            except Exception as error:  # any import failure means: this row cannot be run
                self.unavailable["spark"] = (
                    f"runners.spark.SparkRunner is not importable: {type(error).__name__}: {error}")
        if {"spark", "pyspark", "dataframe"} & set(engines):
            self.spark_session()

    def close(self) -> None:
        self.bid_files.close()
        self.nexmark_files.close()
        if self.connect_session is not None:
            self.connect_session.stop()
            self.connect_session = None
        if self.connect_server is not None:
            self.connect_server.stop()
            self.connect_server = None

    def spark_session(self) -> Any:
        from bench.session import bench_session

        # getOrCreate: the same session each time, unless a runner stopped it meanwhile.
        self.session = bench_session(self.arguments.master, self.arguments.parallelism)
        return self.session

    def run(self, engine: str, workload: str, event_set: EventSet,
            timing: Dict[str, float]) -> Any:
        """The engine's answer; ``timing["seconds"]``: its run, without reading back the
        lines it wrote (nor writing the input files: see :meth:`inputs`)."""
        inputs = self.inputs(workload, event_set)
        if engine == "pyspark":
            from bench.baselines import run_pyspark

            return run_pyspark(workload, event_set, self.spark_session().sparkContext,
                               self.arguments.parallelism, timing, inputs)
        if engine == "dataframe":
            from bench.baselines import run_dataframe

            return run_dataframe(workload, event_set, self.spark_session(),
                                 self.arguments.parallelism, timing, inputs)
        if engine == "direct":
            from bench.direct import run_direct_runner

            return run_direct_runner(workload, event_set, timing, inputs)
        from bench.beam_jobs import run_beam

        options = [f"--spark_parallelism={self.arguments.parallelism}"]
        if self.arguments.bundle_size:
            options.append(f"--bundle_size={self.arguments.bundle_size}")
        if self.arguments.no_chains:
            options.append("--chain_simple_steps=false")
        options.extend(self.arguments.runner_option)
        if engine == "connect":
            return run_beam(workload, event_set, self.spark_runner_class(self.connect_session),
                            options, timing=timing, inputs=inputs)
        options.append(f"--spark_master_url={self.arguments.master}")
        answer = run_beam(workload, event_set, self.spark_runner_class(), options,
                          timing=timing, inputs=inputs)
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        self.session_shared = active is not None and active is self.session.sparkContext
        return answer


def measure(engines: Engines, engine: str, workload: str, event_set: EventSet,
            expected: Any) -> Dict[str, Any]:
    record: Dict[str, Any] = {"workload": workload, "engine": engine, "events": event_set.events,
                              "load_average_1min": round(os.getloadavg()[0], 2)}
    if engine in engines.unavailable:
        return {**record, "status": "unavailable", "note": engines.unavailable[engine]}
    try:
        timing: Dict[str, float] = {}
        with PeakMemory() as peak:
            began = time.perf_counter()
            answer = engines.run(engine, workload, event_set, timing)
            seconds = timing.get("seconds", time.perf_counter() - began)
    except Exception as error:
        traceback.print_exc()
        return {**record, "status": "failed", "note": f"{type(error).__name__}: {error}"}
    difference = describe_difference(expected, answer)
    peak_mib = peak.result()
    if engine == "direct":
        # Its own process (bench.direct) reports its peak; an idle JVM and idle PySpark
        # workers may exist from other rows, not this engine's.
        peak_mib.update(driver=round(timing["peak_mib"], 1), jvm=None, python_workers=None)
    return {
        **record,
        "status": "ok",
        "seconds": round(seconds, 3),
        "events_per_second": round(event_set.events / seconds, 1) if seconds else None,
        "agrees": not difference,
        "difference": difference or None,
        "peak_mib": peak_mib,
        "driver_lifetime_max_rss_mib": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def median_run(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The run of median seconds among an engine's runs of a workload, with every run's
    seconds (``runs_seconds``); the first that failed or disagreed, if one did.

    >>> median_run([{"status": "ok", "agrees": True, "seconds": s} for s in (3, 1, 2)])
    {'status': 'ok', 'agrees': True, 'seconds': 2, 'runs_seconds': [3, 1, 2]}
    """
    for record in records:
        if record["status"] != "ok" or not record["agrees"]:
            return record
    ranked = sorted(records, key=lambda record: record["seconds"])
    median = dict(ranked[(len(ranked) - 1) // 2])
    if len(records) > 1:
        median["runs_seconds"] = [record["seconds"] for record in records]
    return median


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    run_id = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    results_path = arguments.results_dir / f"{run_id}.jsonl"
    event_set = EventSet(arguments.events, arguments.seed, arguments.shards)
    warmup_set = EventSet(arguments.warmup_events, arguments.seed + 1, arguments.shards)
    engines = Engines(arguments)
    try:
        return _run(arguments, engines, run_id, results_path, event_set, warmup_set)
    finally:
        engines.close()


def _run(arguments: argparse.Namespace, engines: Engines, run_id: str, results_path: Path,
         event_set: EventSet, warmup_set: EventSet) -> int:
    engines.prepare(arguments.only)
    context = {"run_id": run_id, "master": arguments.master, "parallelism": arguments.parallelism,
               "seed": arguments.seed, "shards": arguments.shards,
               "warmup_events": arguments.warmup_events, "cpus": os.cpu_count(),
               "chained_steps": not arguments.no_chains,
               "runner_options": arguments.runner_option,
               "python": platform.python_version()}

    failures: List[str] = []
    if arguments.warmup_events:
        print(f"warm-up: {arguments.warmup_events:,} events per engine and workload", flush=True)
        for workload in arguments.workloads:
            expected = reference_answer(workload, warmup_set)
            engines.inputs(workload, warmup_set)  # written now, outside every engine's time
            for engine in arguments.only:
                record = measure(engines, engine, workload, warmup_set, expected)
                if record["status"] == "ok" and not record["agrees"]:
                    failures.append(f"warm-up {workload} on {engine}: {record['difference']}")

    records: List[Dict[str, Any]] = []
    for workload in arguments.workloads:
        print(f"measuring {workload} at {arguments.events:,} events", flush=True)
        engines.inputs(workload, event_set)  # written now, outside every engine's time
        with PeakMemory() as peak:
            began = time.perf_counter()
            expected = reference_answer(workload, event_set)
            seconds = time.perf_counter() - began
        records.append({"workload": workload, "engine": "python", "events": arguments.events,
                        "status": "ok", "seconds": round(seconds, 3),
                        "events_per_second": round(arguments.events / seconds, 1),
                        "agrees": True, "peak_mib": {**peak.result(), "jvm": None,
                                                     "python_workers": None},
                        "note": "computes the reference answer (one core, no engine)"})
        runs: Dict[str, List[Dict[str, Any]]] = {engine: [] for engine in arguments.only}
        for _ in range(arguments.repeat):
            for engine in arguments.only:
                runs[engine].append(measure(engines, engine, workload, event_set, expected))
        for engine in arguments.only:
            record = median_run(runs[engine])
            if engine == "spark" and record["status"] == "ok":
                record["shared_spark_session"] = engines.session_shared
            records.append(record)
            print(f"  {engine}: {record['status']} {record.get('seconds', '')}", flush=True)
            if record["status"] == "ok" and not record["agrees"]:
                failures.append(f"{workload} on {engine}: {record['difference']}")
            if record["status"] == "failed":
                failures.append(f"{workload} on {engine} failed: {record['note']}")

    records = [{**context, **record} for record in records]
    write_jsonl(results_path, records + [{**context, **ratio} for ratio in ratios(records)])
    print()
    print(format_table(records))
    print(f"\nmemory: peak PSS sampled every 0.2 s during each run (bench/memory.py); "
          f"results in {results_path}")
    if failures:
        print("\nFAILED: the engines do not all give the reference answer:", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
