"""``python -m bench.streaming.phases``: where a micro-batch's time goes, phase by phase, on
classic Spark and on Spark Connect, on the driver (client) and in Spark (server).

The latency workload (:func:`bench.streaming.beam.windowed_sum`) runs on a classic session
and on a Connect server, both ``local[2]`` and both writing Spark's event log, at two sizes:
an *empty* batch (the source reads nothing: its stage still runs, a query of one stage) and
``--events-per-batch`` events (10,000: the source, the combine's keyed step, the panes).
Each batch's time is split into phases from two records of the same wall clock:

* the driver's own, taken here by wrapping what the runner calls (nothing in the runner is
  changed): on Connect every gRPC call of the session's client (``ExecutePlan`` with the
  time of its first and last response, ``AnalyzePlan`` by method, ``Config``, artifacts,
  ``ReleaseExecute``), the conversion of a DataFrame's plan to protobuf
  (``LogicalPlan.to_proto``) and, inside it, the pickling of each Python function
  (``PythonUDF.to_plan``), and the backend's ``collect`` (the query, then the decoding of
  its Arrow result into records); on classic the backend's ``collect`` and broadcasts;
* the server's, from its event log (``spark.eventLog.enabled``): for a Connect operation
  the times it started, was analysed and was ready for execution (optimised and planned)
  and finished (Spark Connect's own listener events), and the submission and completion of
  the Spark jobs it ran; on classic the jobs.

A batch's time is then: the engine's own Python (what no wrapped call covers: planning the
round, the streaming loop's bookkeeping), pickling the functions, building the protobuf,
the ``AnalyzePlan`` and other round trips, and per query: request to server, analysis,
optimisation and planning, until the first job starts, the jobs, until the operation is
finished, results to the client, decoding. Figures are medians over the measured batches
(batch 0 is not measured), with the RPCs a batch makes and the bytes a query sends. With
``--warmup-runs N`` each engine first runs the workload N times unmeasured: a Connect
server started for the run is still compiling its planning code in its first runs
(measured on 2 cores, 10,000 events a batch: the server's analysis, planning and wait for
the first job took 58-80 ms a batch in the first runs, 31 ms after two runs).

Examples::

    python -m bench.streaming.phases                     # both engines, both sizes
    python -m bench.streaming.phases --engines connect --batches 6 --sizes 10000
    python -m bench.streaming.phases --sizes 10000 --warmup-runs 2   # both engines warm
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.report import RESULTS_DIR, percentile, write_jsonl
from bench.streaming import beam as streaming_beam
from bench.streaming.driver_probes import Span, Timeline, probe_classic, probe_connect
from bench.streaming.event_log import Operation, Stage, read_event_log

#: What the phase table shows, in order, with its label.
PHASES: Tuple[Tuple[str, str], ...] = (
    ("engine", "engine's own Python (planning, loop)"),
    ("pickle", "pickling functions (client)"),
    ("to_proto", "building the plan protobuf (client)"),
    ("analyze_rpc", "AnalyzePlan round trips"),
    ("other_rpc", "other round trips (Config, artifacts)"),
    ("submit", "request to server / job submission"),
    ("analysis", "server: analysis"),
    ("planning", "server: optimisation + physical plan"),
    ("to_job", "server: until the first job starts"),
    ("jobs", "Spark jobs (tasks)"),
    ("after_jobs", "server: after the jobs, results out"),
    ("transfer", "results to the client"),
    ("decode", "DataFrame building, results decoded"),
)
# ----- phases of a batch
def _exclusive(spans: List[Span]) -> List[Tuple[Span, float]]:
    """Each span with its own time: its duration less that of the spans nested in it (one
    thread's calls nest)."""
    ordered = sorted(spans, key=lambda span: (span.start, -span.end))
    own = {id(span): span.seconds for span in ordered}
    stack: List[Span] = []
    for span in ordered:
        while stack and stack[-1].end <= span.start:
            stack.pop()
        if stack and span.end <= stack[-1].end + 1e-6:
            own[id(stack[-1])] -= span.seconds
        stack.append(span)
    return [(span, max(0.0, own[id(span)])) for span in ordered]


def batch_phases(start: float, end: float, spans: List[Span], thread: int,
                 operations: Dict[str, Operation], jobs: List[Tuple[float, float]],
                 stages: Sequence[Stage] = ()) -> Dict[str, Any]:
    """The phases of the batch that ran from ``start`` to ``end`` in ``thread``
    (milliseconds), and what it asked of the server."""
    inside = [span for span in spans if span.thread == thread and start - 0.002 <= span.start
              and span.end <= end + 0.002]
    phases = {name: 0.0 for name, _ in PHASES}
    counts: Dict[str, int] = {}
    sizes = {"plan_bytes": 0, "result_bytes": 0, "pickled_functions": 0, "pickled_bytes": 0}
    for span, own in _exclusive(inside):
        kind = span.kind
        if kind.startswith("rpc:"):
            method = kind[4:]
            label = method + (f"({span.extra['what']})" if span.extra.get("what") else "")
            counts[label] = counts.get(label, 0) + 1
        if kind == "pickle":
            phases["pickle"] += own
            sizes["pickled_functions"] += 1
            sizes["pickled_bytes"] += span.extra.get("bytes", 0)
        elif kind == "to_proto":
            phases["to_proto"] += own
        elif kind == "rpc:AnalyzePlan":
            phases["analyze_rpc"] += own
        elif kind in ("rpc:ExecutePlan", "rpc:ReattachExecute"):
            sizes["plan_bytes"] += span.extra.get("request_bytes", 0)
            sizes["result_bytes"] += span.extra.get("result_bytes", 0)
            _split_query(span, own, operations.get(span.extra.get("operation", "")), jobs,
                         phases)
        elif kind == "decode":
            phases["decode"] += own
        elif kind == "collect":  # classic: submission, jobs, results; Connect: decoding
            if any(s.kind.startswith("rpc:") for s in inside):
                phases["decode"] += own
            elif own > 0.001:
                _split_classic(span, own, jobs, phases)
            else:
                phases["engine"] += own
        elif kind.startswith("rpc:") or kind == "other_rpc":
            phases["other_rpc"] += own
    sizes["spark_jobs"] = len(_jobs_within(jobs, start, end))
    covered = sum(own for span, own in _exclusive(inside))
    phases["engine"] += max(0.0, (end - start) - covered)
    figures = {name: round(value * 1000, 1) for name, value in phases.items()}
    figures["total"] = round((end - start) * 1000, 1)
    timeline = [[_label(span), round((span.start - start) * 1000, 1),
                 round((span.end - start) * 1000, 1), own_ms(own)]
                for span, own in _exclusive(inside)]
    for stage in stages:
        if start <= stage.submitted and stage.completed <= end + 0.002:
            timeline.append([f"stage {stage.stage} ({len(stage.tasks)} tasks: "
                             + ", ".join(f"{own_ms(finish - launch):.0f}"
                                         + (f" py {python:.0f}" if python else "")
                                         for launch, finish, python in stage.tasks) + ")",
                             own_ms(stage.submitted - start), own_ms(stage.completed - start),
                             own_ms(stage.completed - stage.submitted)])
    for begin, finish in _jobs_within(jobs, start, end):
        timeline.append(["job", own_ms(begin - start), own_ms(finish - start),
                         own_ms(finish - begin)])
    for operation in operations.values():
        if start <= operation.started <= end:
            timeline.append([f"operation (analysed +{own_ms((operation.analyzed or 0) - operation.started)}, "
                             f"ready +{own_ms((operation.ready or 0) - operation.started)})",
                             own_ms(operation.started - start),
                             own_ms((operation.finished or operation.started) - start), 0])
    timeline.sort(key=lambda entry: entry[1])
    return {"phases": figures, "rpcs": counts, **sizes, "timeline": timeline}


def _label(span: Span) -> str:
    if span.kind == "pickle":
        return f"pickle {span.extra.get('function', '')} {span.extra.get('bytes', 0):,} B"
    if span.kind.startswith("rpc:"):
        details = [f"{key} {value}" for key, value in span.extra.items()
                   if key in ("what", "request_bytes", "result_bytes", "caller")]
        return span.kind + (f" ({', '.join(details)})" if details else "")
    return span.kind


def own_ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _jobs_within(jobs: List[Tuple[float, float]], start: float,
                 end: float) -> List[Tuple[float, float]]:
    return [job for job in jobs if start - 0.002 <= job[0] and job[1] <= end + 0.002]


def _split_query(span: Span, own: float, operation: Optional[Operation],
                 jobs: List[Tuple[float, float]], phases: Dict[str, float]) -> None:
    """An ExecutePlan's time: request, analysis, planning, to the job, jobs, after, results."""
    if operation is None or None in (operation.analyzed, operation.ready, operation.finished):
        phases["submit"] += own  # not in the event log (a command): all of it
        return
    ran = _jobs_within(jobs, operation.ready, operation.finished)
    first_job = min((job[0] for job in ran), default=operation.finished)
    last_job = max((job[1] for job in ran), default=first_job)
    points = [span.start, operation.started, operation.analyzed, operation.ready, first_job,
              last_job, operation.finished, span.end]
    for position in range(1, len(points)):  # clocks in ms on one side: keep it monotonic
        points[position] = max(points[position], points[position - 1])
    for name, (begin, until) in zip(("submit", "analysis", "planning", "to_job", "jobs",
                                     "after_jobs", "transfer"), zip(points, points[1:])):
        phases[name] += until - begin


def _split_classic(span: Span, own: float, jobs: List[Tuple[float, float]],
                   phases: Dict[str, float]) -> None:
    ran = _jobs_within(jobs, span.start, span.end)
    if not ran:
        phases["submit"] += own
        return
    first, last = min(job[0] for job in ran), max(job[1] for job in ran)
    phases["submit"] += max(0.0, first - span.start)
    phases["jobs"] += max(0.0, last - first)
    phases["transfer"] += max(0.0, span.end - last)


# ----- runs
def measure(engine: str, session: Any, log_directory: str, events_per_batch: int,
            batches: int, arguments: argparse.Namespace) -> Dict[str, Any]:
    """One run of the latency workload on ``session`` with its phases per batch."""
    timeline = Timeline()
    probe = (probe_connect(session, timeline) if engine == "connect"
             else probe_classic(timeline))
    threads: Dict[str, int] = {}
    original_run = None
    from runners.spark.streaming import loop

    original_run = loop.StreamingExecution.run

    def run(execution: Any) -> None:
        threads["loop"] = threading.get_ident()
        return original_run(execution)

    loop.StreamingExecution.run = run
    try:
        with probe:
            result = streaming_beam.run(
                session, streaming_beam.windowed_sum,
                arguments.master if engine == "classic" else None, arguments.parallelism,
                arguments.shards, events_per_batch, batches, arguments.seed, drain=False,
                allow_empty=True)
    finally:
        loop.StreamingExecution.run = original_run
    time.sleep(1.5)  # the event log is written by a listener thread of its own
    operations, jobs, stages = read_event_log(log_directory)
    measured = []
    for line in result["lines"][1:]:
        end = line["time"]
        start = end - line["millis"] / 1000
        measured.append(batch_phases(start, end, timeline.spans, threads["loop"], operations,
                                     jobs, stages))
    return summarize(engine, events_per_batch, measured)


def warm_up(engine: str, session: Any, arguments: argparse.Namespace) -> None:
    """``--warmup-runs`` unmeasured runs of the workload at the largest size."""
    for _ in range(arguments.warmup_runs):
        streaming_beam.run(session, streaming_beam.windowed_sum,
                           arguments.master if engine == "classic" else None,
                           arguments.parallelism, arguments.shards, max(arguments.sizes),
                           arguments.batches, arguments.seed, drain=False, allow_empty=True)


def summarize(engine: str, events_per_batch: int,
              measured: List[Dict[str, Any]]) -> Dict[str, Any]:
    names = [name for name, _ in PHASES] + ["total"]
    medians = {name: percentile([batch["phases"][name] for batch in measured], 0.5)
               for name in names}
    rpcs: Dict[str, float] = {}
    for batch in measured:
        for label, count in batch["rpcs"].items():
            rpcs[label] = rpcs.get(label, 0) + count / len(measured)
    return {"engine": engine, "events_per_batch": events_per_batch, "batches": len(measured),
            "median_ms": medians, "rpcs_per_batch": {label: round(count, 2)
                                                     for label, count in sorted(rpcs.items())},
            "plan_bytes": percentile([batch["plan_bytes"] for batch in measured], 0.5),
            "result_bytes": percentile([batch["result_bytes"] for batch in measured], 0.5),
            "pickled_functions": percentile([batch["pickled_functions"] for batch in measured],
                                            0.5),
            "pickled_bytes": percentile([batch["pickled_bytes"] for batch in measured], 0.5),
            "spark_jobs": percentile([batch["spark_jobs"] for batch in measured], 0.5),
            "per_batch": measured}


def print_table(records: Sequence[Dict[str, Any]]) -> None:
    columns = [f"{record['engine']} {record['events_per_batch']:,}" for record in records]
    warmed = records[0].get("warmup_runs")
    print(f"\nmedian ms per batch, by phase ({records[0]['batches']} batches measured each"
          f"{f', after {warmed} unmeasured run(s)' if warmed else ''})")
    print(f"  {'':42s}" + "".join(f"{column:>16s}" for column in columns))
    for name, label in PHASES + (("total", "total (the batch)"),):
        print(f"  {label:42s}" + "".join(f"{record['median_ms'][name]:16.1f}"
                                          for record in records))
    print(f"  {'sum of the medians':42s}" + "".join(
        f"{sum(record['median_ms'][name] for name, _ in PHASES):16.1f}" for record in records))
    labels = sorted({label for record in records for label in record["rpcs_per_batch"]})
    for label in labels:
        print(f"  {'RPCs a batch: ' + label:42s}" + "".join(
            f"{record['rpcs_per_batch'].get(label, 0):16.2f}" for record in records))
    for key, label in (("spark_jobs", "Spark jobs a batch"),
                       ("pickled_functions", "functions pickled a batch"),
                       ("pickled_bytes", "pickled function bytes a batch"),
                       ("plan_bytes", "query plan bytes sent a batch"),
                       ("result_bytes", "result bytes (Arrow) a batch")):
        print(f"  {label:42s}" + "".join(f"{record[key] or 0:16,.0f}" for record in records))


def run(arguments: argparse.Namespace) -> List[Dict[str, Any]]:
    from bench.session import bench_connect_server, bench_session

    records: List[Dict[str, Any]] = []
    logs = tempfile.mkdtemp(prefix="bench-phases-")
    event_log = {"spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
                 "spark.eventLog.rolling.enabled": "false"}
    if "classic" in arguments.engines:
        classic_logs = os.path.join(logs, "classic")
        os.makedirs(classic_logs)
        session = bench_session(arguments.master, arguments.parallelism,
                                {**event_log, "spark.eventLog.dir": classic_logs})
        warm_up("classic", session, arguments)
        for size in arguments.sizes:
            records.append(measure("classic", session, classic_logs, size, arguments.batches,
                                   arguments))
        session.stop()
    if "connect" in arguments.engines:
        connect_logs = os.path.join(logs, "connect")
        os.makedirs(connect_logs)
        server = bench_connect_server(arguments.master, arguments.parallelism,
                                      {**event_log, "spark.eventLog.dir": connect_logs,
                                       **arguments.conf})
        connect = server.session()
        try:
            warm_up("connect", connect, arguments)
            for size in arguments.sizes:
                records.append(measure("connect", connect, connect_logs, size,
                                       arguments.batches, arguments))
        finally:
            connect.stop()
            server.stop()
    return records


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming.phases",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="classic,connect",
                        help="comma-separated: classic,connect (both)")
    parser.add_argument("--sizes", default="0,10000",
                        help="events a batch, comma-separated (0: an empty batch)")
    parser.add_argument("--batches", type=int, default=10,
                        help="micro-batches timed per engine and size (10)")
    parser.add_argument("--shards", type=int, default=4, help="event generator shards (4)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark partitions (2)")
    parser.add_argument("--seed", type=int, default=2024, help="event generator seed (2024)")
    parser.add_argument("--warmup-runs", type=int, default=0,
                        help="unmeasured runs of the workload per engine first (0)")
    parser.add_argument("--timeline", action="store_true",
                        help="print the last batch's wrapped calls too")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the Connect server; repeatable")
    arguments = parser.parse_args(argv)
    arguments.engines = [name.strip() for name in arguments.engines.split(",")]
    arguments.sizes = [int(size) for size in arguments.sizes.split(",")]
    arguments.conf = dict(entry.split("=", 1) for entry in arguments.conf)
    return arguments


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    records = run(arguments)
    for record in records:
        record["load_average_1min"] = round(os.getloadavg()[0], 2)
        record["warmup_runs"] = arguments.warmup_runs
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    write_jsonl(RESULTS_DIR / f"streaming-phases-{stamp}.jsonl", records)
    print_table(records)
    if arguments.timeline:
        for record in records:
            print(f"\n{record['engine']} {record['events_per_batch']:,}: the last batch's calls "
                  "(kind, start ms, end ms, own ms)")
            for entry in record["per_batch"][-1]["timeline"]:
                print("  ", *entry)
    print(f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    return 0


if __name__ == "__main__":
    sys.exit(main())
