"""``python -m bench.nexmark.profile``: where an event's CPU goes in Spark's Python workers
when Beam's Nexmark runs on our SparkRunner, per fused stage and per step.

For each query (on ``local[N]``, classic Spark), after an unmeasured warm-up run:

1. a **timing run**: every function the runner runs over a partition is metered
   (:mod:`bench.nexmark.meters`): the CPU each fused stage and shuffle function spends on
   its own (without its input's), and what no meter covers (PySpark's worker, records to
   and from the JVM, the Python side of Spark's shuffle); and the whole run's CPU from
   ``/proc``: the Python workers' and the JVM's.
2. a **profile run**: the same, with a cProfile per stage, split by step and kind of work
   (:mod:`bench.nexmark.attribution`). cProfile inflates what calls many functions, so
   each row shows the profiled CPU (the profile's times scaled to the CPU the stage used
   while profiled) and an estimate without the profiler (cProfile's cost per call, as
   calibrated in this process, taken out, then scaled to the timing run's CPU of the
   stage): read the second for where the time goes, the first for what cProfile saw.
3. the **hand-written RDD program** on the same files, measured from ``/proc`` as 1.

Every answer is checked against the reference. Results are printed and written as JSON
into ``bench/results/nexmark-profile-<time>.json``. The machine's load average is printed
with each run: other processes' load stretches wall time, not the CPU measured.

Examples::

    python -m bench.nexmark.profile --events 200000
    python -m bench.nexmark.profile --events 200000 --queries nexmark_q0 --top 20
    python -m bench.nexmark.profile --queries nexmark_q0 --runner-option=--bulk_text_io=false
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.nexmark import attribution, meters
from bench.nexmark.baselines import run_nexmark_rdd
from bench.nexmark.events import EventFiles
from bench.nexmark.pipelines import build_query, run_nexmark
from bench.nexmark.queries import WORKLOADS, reference_answer
from bench.report import RESULTS_DIR
from bench.workloads import EventSet, describe_difference

_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree_cpu(root: int = 0) -> Dict[str, float]:
    """CPU seconds so far of this process's descendants: the JVMs (``jvm``) and the Python
    processes under them (``python``: Spark's worker daemon and workers, with the workers
    that exited)."""
    root = root or os.getpid()
    children: Dict[int, List[int]] = defaultdict(list)
    names: Dict[int, str] = {}
    times: Dict[int, Tuple[float, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        pid = int(entry)
        children[int(fields[1])].append(pid)
        names[pid] = name
        own = (int(fields[11]) + int(fields[12])) / _TICKS
        reaped = (int(fields[13]) + int(fields[14])) / _TICKS
        times[pid] = (own, reaped)
    totals = {"jvm": 0.0, "python": 0.0}
    stack = list(children[root])
    while stack:
        pid = stack.pop()
        stack.extend(children[pid])
        own, reaped = times[pid]
        if names[pid] == "java":
            totals["jvm"] += own
        elif names[pid].startswith("python"):
            totals["python"] += own + reaped
    return totals


def _delta(before: Dict[str, float], after: Dict[str, float]) -> Dict[str, float]:
    return {key: after[key] - before[key] for key in before}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _metered_run(session: Any, workload: str, event_set: EventSet, inputs: str,
                 profile: bool, directory: str, runner_options: Sequence[str] = ()
                 ) -> Dict[str, Any]:
    """One metered run of ``workload`` on the SparkRunner (given ``runner_options`` besides
    the parallelism): its answer, times and meters."""
    from runners.spark import SparkRunner

    run_id = uuid.uuid4().hex
    stages: Dict[str, Any] = {}
    load = _load()
    before = process_tree_cpu()
    timing: Dict[str, float] = {}
    with meters.metering(directory, run_id, profile, stages):
        answer = run_nexmark(workload, event_set, SparkRunner(session),
                             [f"--spark_parallelism={session.sparkContext.defaultParallelism}",
                              *runner_options],
                             timing=timing, inputs=inputs)
    tree = _delta(before, process_tree_cpu())
    meters.flush_workers(session.sparkContext, directory, run_id)
    workers = meters.read_workers(directory, run_id)
    labels: Dict[str, Dict[str, Any]] = {}
    for record in workers:
        for label, totals in record["labels"].items():
            entry = labels.setdefault(label, {"cpu": 0.0, "wall": 0.0, "tasks": 0, "gc": 0.0,
                                              "collections": 0, "workers_cpu": [],
                                              "stats": []})
            entry["cpu"] += totals.cpu
            entry["gc"] += totals.gc_cpu
            entry["collections"] += totals.collections
            entry["wall"] += totals.wall
            entry["tasks"] += totals.tasks
            entry["workers_cpu"].append(round(totals.cpu, 3))
            entry["stats"].append(totals.stats)
    return {"answer": answer, "seconds": timing["seconds"], "cpu": tree, "labels": labels,
            "stages": stages, "load_average_1min": load, "workers": len(workers),
            "flushed": all(record["flushed"] for record in workers)}


def _rdd_run(session: Any, workload: str, event_set: EventSet, inputs: str) -> Dict[str, Any]:
    load = _load()
    before = process_tree_cpu()
    timing: Dict[str, float] = {}
    answer = run_nexmark_rdd(workload, event_set, session.sparkContext,
                             session.sparkContext.defaultParallelism, timing, inputs)
    return {"answer": answer, "seconds": timing["seconds"],
            "cpu": _delta(before, process_tree_cpu()), "load_average_1min": load}


def _per_event(seconds: float, events: int) -> float:
    return seconds / events * 1e6


def profile_query(session: Any, workload: str, event_set: EventSet, inputs: str,
                  pipeline_roots: Dict[str, str], overhead: Tuple[float, float],
                  top: int, runner_options: Sequence[str] = ()) -> Dict[str, Any]:
    """The timing, profile and RDD runs of one query, as a report (a dict); ``runner_options``
    go to the SparkRunner."""
    expected = reference_answer(workload, event_set)
    with tempfile.TemporaryDirectory(prefix="bench-meters-") as timing_dir, \
            tempfile.TemporaryDirectory(prefix="bench-meters-") as profile_dir:
        timed = _metered_run(session, workload, event_set, inputs, False, timing_dir,
                             runner_options)
        profiled = _metered_run(session, workload, event_set, inputs, True, profile_dir,
                                runner_options)
    rdd = _rdd_run(session, workload, event_set, inputs)
    events = event_set.events
    report: Dict[str, Any] = {
        "workload": workload, "events": events, "runner_options": list(runner_options),
        "answers_agree": {name: not describe_difference(expected, run["answer"])
                          for name, run in (("timing", timed), ("profile", profiled),
                                            ("rdd", rdd))},
        "runs": {name: {"seconds": round(run["seconds"], 3),
                        "load_average_1min": run["load_average_1min"],
                        "python_us_per_event": round(_per_event(run["cpu"]["python"], events), 2),
                        "jvm_us_per_event": round(_per_event(run["cpu"]["jvm"], events), 2)}
                 for name, run in (("ours", timed), ("ours_profiled", profiled), ("rdd", rdd))},
        "flushed": timed["flushed"] and profiled["flushed"],
        "labels": [],
    }
    metered_cpu = sum(entry["cpu"] for label, entry in timed["labels"].items()
                      if label != meters.OUTSIDE)
    report["runs"]["ours"]["metered_python_us_per_event"] = round(
        _per_event(metered_cpu, events), 2)
    for label in sorted(profiled["labels"], key=lambda name: -profiled["labels"][name]["cpu"]):
        entry = profiled["labels"][label]
        stats = attribution.merge_stats(entry["stats"])
        timed_entry = timed["labels"].get(label, {})
        unprofiled = timed_entry.get("cpu")
        if label == meters.OUTSIDE:
            # Its meter also runs while a worker waits for a task: the /proc total minus
            # the metered functions is its CPU in the timing run.
            unprofiled = max(timed["cpu"]["python"] - metered_cpu, 0.0)
        rows = attribution.breakdown(stats, pipeline_roots, entry["cpu"], unprofiled, overhead)
        stage = profiled["stages"].get(label)
        report["labels"].append({
            "label": label,
            "steps": list(stage.steps) if stage is not None else [],
            "profiled_us_per_event": round(_per_event(entry["cpu"], events), 2),
            "profiled_wall_us_per_event": round(_per_event(entry["wall"], events), 2),
            "unprofiled_us_per_event": (round(_per_event(unprofiled, events), 2)
                                        if unprofiled is not None else None),
            "tasks": timed_entry.get("tasks"),
            "garbage_collection_us_per_event": round(
                _per_event(timed_entry.get("gc", 0.0), events), 2),
            "garbage_collections": timed_entry.get("collections"),
            "cpu_seconds_per_worker_process": sorted(timed_entry.get("workers_cpu", []),
                                                     reverse=True),
            "rows": [{"step": step, "kind": kind,
                      "profiled_us_per_event": round(_per_event(cpu, events), 3),
                      "estimated_us_per_event": round(_per_event(estimate, events), 3)}
                     for (step, kind), (cpu, estimate)
                     in sorted(rows.items(), key=lambda item: -item[1][1])],
            "top_functions": [{"function": name,
                               "profiled_us_per_event": round(_per_event(cpu, events), 3),
                               "calls_per_event": round(calls / events, 2)}
                              for name, cpu, calls
                              in attribution.top_functions(stats, entry["cpu"], top)],
        })
    return report


def format_report(report: Dict[str, Any], minimum: float = 0.05) -> str:
    """A query's report as text: the runs, then each label's rows (step, kind), largest
    estimate first, down to ``minimum`` us per event."""
    runs = report["runs"]
    lines = [f"== {report['workload']}, {report['events']:,} events; answers agree: "
             f"{report['answers_agree']}"
             + (f"; runner options {' '.join(report['runner_options'])}"
                if report.get("runner_options") else ""),
             f"{'run':<14} {'seconds':>8} {'load':>5} {'py us/ev':>9} {'JVM us/ev':>10}"]
    for name, run in runs.items():
        lines.append(f"{name:<14} {run['seconds']:8.2f} {run['load_average_1min']:5.1f} "
                     f"{run['python_us_per_event']:9.2f} {run['jvm_us_per_event']:10.2f}")
    lines.append(f"metered functions (timing run): {runs['ours']['metered_python_us_per_event']}"
                 f" us/event of Python CPU; every worker flushed: {report['flushed']}")
    for label in report["labels"]:
        if (label["unprofiled_us_per_event"] or 0) < minimum and \
                label["profiled_us_per_event"] < minimum:
            continue
        lines.append("")
        lines.append(f"-- {label['label']}: {label['unprofiled_us_per_event']} us/event "
                     f"unprofiled, {label['profiled_us_per_event']} profiled "
                     f"(wall {label['profiled_wall_us_per_event']})")
        if label["steps"]:
            lines.append(f"   steps: {', '.join(label['steps'])}")
        lines.append(f"   tasks: {label['tasks']}; CPU s per worker process (timing run): "
                     f"{label['cpu_seconds_per_worker_process']}; of its CPU, garbage "
                     f"collection {label['garbage_collection_us_per_event']} us/event "
                     f"({label['garbage_collections']} collections)")
        lines.append(f"   {'est. us/ev':>10} {'prof. us/ev':>11}  step: kind")
        by_step: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
        for row in label["rows"]:
            if row["kind"] == attribution.JVM_WAIT:
                lines.append(f"   (waiting on the JVM, wall: {row['profiled_us_per_event']:.2f} "
                             "us/event, not CPU)")
            else:
                by_step[row["step"]].append(row)
        for step, rows in sorted(by_step.items(), key=lambda item: -sum(
                row["estimated_us_per_event"] for row in item[1])):
            estimated = sum(row["estimated_us_per_event"] for row in rows)
            profiled_total = sum(row["profiled_us_per_event"] for row in rows)
            if max(estimated, profiled_total) < minimum:
                continue
            lines.append(f"   {estimated:10.2f} {profiled_total:11.2f}  {step}")
            for row in rows:
                if max(row["estimated_us_per_event"], row["profiled_us_per_event"]) < minimum:
                    continue
                lines.append(f"   {row['estimated_us_per_event']:10.2f} "
                             f"{row['profiled_us_per_event']:11.2f}    {row['kind']}")
        lines.append(f"   top functions (profiled us/event, calls/event):")
        for function in label["top_functions"]:
            lines.append(f"   {function['profiled_us_per_event']:10.2f} "
                         f"{function['calls_per_event']:8.2f}  {function['function']}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nexmark.profile",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--queries", default=",".join(WORKLOADS),
                        help=f"comma-separated, of {', '.join(WORKLOADS)} (all)")
    parser.add_argument("--events", type=lambda text: int(float(text)), default=200_000,
                        help="events per profiled run (2e5)")
    parser.add_argument("--warmup-events", type=lambda text: int(float(text)), default=20_000,
                        help="events of the unmeasured warm-up run per query (2e4)")
    parser.add_argument("--seed", type=int, default=2024, help="event generator seed (2024)")
    parser.add_argument("--shards", type=int, default=8, help="event file shards (8)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark partitions (2)")
    parser.add_argument("--top", type=int, default=12, help="functions listed per label (12)")
    parser.add_argument("--runner-option", action="append", default=[], metavar="OPTION",
                        help="a pipeline option for the SparkRunner, repeatable "
                             "(--runner-option=--bulk_text_io=false)")
    parser.add_argument("--results-dir", type=os.path.abspath, default=str(RESULTS_DIR),
                        help="where the profile's records are appended (bench/results)")
    arguments = parser.parse_args(argv)
    queries = [query.strip() for query in arguments.queries.split(",") if query.strip()]
    unknown = [query for query in queries if query not in WORKLOADS]
    if unknown:
        parser.error(f"unknown queries {unknown}; choose from {', '.join(WORKLOADS)}")

    import apache_beam as beam

    from bench.session import bench_session

    session = bench_session(arguments.master, arguments.parallelism)
    overhead = attribution.calibrate()
    event_set = EventSet(arguments.events, arguments.seed, arguments.shards)
    warmup_set = EventSet(arguments.warmup_events, arguments.seed + 1, arguments.shards)
    reports = []
    failed = False
    with EventFiles() as files:
        inputs, warmup_inputs = files.pattern(event_set), files.pattern(warmup_set)
        for workload in queries:
            from runners.spark import SparkRunner

            if arguments.warmup_events:
                run_nexmark(workload, warmup_set, SparkRunner(session),
                            [f"--spark_parallelism={arguments.parallelism}",
                             *arguments.runner_option],
                            inputs=warmup_inputs)
                run_nexmark_rdd(workload, warmup_set, session.sparkContext,
                                arguments.parallelism, inputs=warmup_inputs)
            pipeline = beam.Pipeline()
            build_query(pipeline, workload, inputs, os.path.join(tempfile.gettempdir(), "unused"))
            report = profile_query(session, workload, event_set, inputs,
                                   attribution.step_roots(pipeline), overhead, arguments.top,
                                   arguments.runner_option)
            report["calibrated_overhead_us_per_call"] = [round(value * 1e6, 4)
                                                         for value in overhead]
            reports.append(report)
            failed = failed or not all(report["answers_agree"].values())
            print(format_report(report), flush=True)
            print(flush=True)
    path = os.path.join(arguments.results_dir, "nexmark-profile-"
                        + datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ".json")
    os.makedirs(arguments.results_dir, exist_ok=True)
    with open(path, "w") as output:
        json.dump({"master": arguments.master, "parallelism": arguments.parallelism,
                   "cpus": os.cpu_count(), "reports": reports}, output, indent=1)
    print(f"results in {path}; cProfile's calibrated cost per call: "
          f"{overhead[0] * 1e6:.3f} us to the callee, {overhead[1] * 1e6:.3f} us to the caller")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
