"""A figure of the benchmark results ``make bench`` wrote (``bench/results/*.jsonl``).

Each results file is one run of :mod:`bench`: per workload, one record per engine (our
SparkRunner on classic Spark and on Spark Connect, hand-written PySpark with RDDs and with a
DataFrame, Beam's DirectRunner, and the plain Python loop that computes the reference
answer) with its throughput (``events_per_second``), the event count, whether its answer
agreed with the reference, and the machine's load average. The figure draws, per workload,
one bar per engine at the median throughput over the runs of the chosen size, and every run
as a dot, so that the spread between runs (the machine is shared) is visible. Only records with status ``ok``
and an agreeing answer are drawn; the figure's title says how many runs it summarizes.

Command line::

    python -m pictures.bench_figure bench/results/*.jsonl --output out/benchmarks.png

Example (the data behind the figure):

>>> records = [{"workload": "global_sum", "engine": "spark", "status": "ok", "agrees": True,
...             "events": 10, "events_per_second": rate, "run_id": run}
...            for rate, run in ((5.0, "a"), (7.0, "b"), (6.0, "c"))]
>>> throughputs(records, events=10)
{'global_sum': {'spark': [5.0, 7.0, 6.0]}}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

#: Engines in drawing order, with their labels (as bench/report.py names them).
ENGINES = {
    "spark": "Beam on our SparkRunner",
    "connect": "Beam on our SparkRunner, Spark Connect",
    "direct": "Beam on DirectRunner",
    "pyspark": "hand-written PySpark (RDDs)",
    "dataframe": "hand-written PySpark (DataFrame)",
    "python": "plain Python loop (the reference answer)",
}
_COLOURS = {"spark": "#0072b2", "connect": "#56b4e9", "direct": "#e69f00", "pyspark": "#009e73",
            "dataframe": "#cc79a7", "python": "#999999"}


def read_results(paths: Iterable[str]) -> List[dict]:
    """Every record of the results files (JSON lines), in file order."""
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            records.extend(json.loads(line) for line in handle if line.strip())
    return records


def throughputs(records: Iterable[dict], events: int) -> Dict[str, Dict[str, List[float]]]:
    """workload -> engine -> events/s of every good run with ``events`` events."""
    found: Dict[str, Dict[str, List[float]]] = {}
    for record in records:
        if (record.get("kind") is None and record.get("status") == "ok" and record.get("agrees")
                and record.get("events") == events and record.get("events_per_second")):
            found.setdefault(record["workload"], {}).setdefault(record["engine"], []).append(
                float(record["events_per_second"]))
    return found


def draw_benchmarks(records: Sequence[dict], path: str, events: Optional[int] = None) -> str:
    """Draw the throughput figure to ``path``; ``events`` picks the run size (default: the
    largest size in ``records``). Returns ``path``."""
    from pictures.plots import pyplot_for_files

    sizes = [record["events"] for record in records if record.get("events")]
    if not sizes:
        raise ValueError("no benchmark record with an event count: run `make bench` first")
    events = events or max(sizes)
    data = throughputs(records, events)
    if not data:
        raise ValueError(f"no good benchmark run of {events} events in the results")
    runs = len({record.get("run_id") for record in records if record.get("events") == events})
    pyplot = pyplot_for_files()
    figure, axes = pyplot.subplots(figsize=(10, 5), dpi=100)
    workloads = sorted(data)
    width = 0.8 / len(ENGINES)
    for number, (engine, label) in enumerate(ENGINES.items()):
        xs, medians = [], []
        for position, workload in enumerate(workloads):
            values = data[workload].get(engine)
            if not values:
                continue
            x = position + (number - (len(ENGINES) - 1) / 2) * width
            xs.append(x)
            medians.append(statistics.median(values))
            axes.scatter([x] * len(values), values, color="black", s=10, zorder=3)
        axes.bar(xs, medians, width=width * 0.9, color=_COLOURS[engine], label=label)
    axes.set_yscale("log")
    axes.set_xticks(range(len(workloads)))
    axes.set_xticklabels([workload.replace("_", " ") for workload in workloads])
    axes.set_ylabel("events per second (log scale)")
    axes.set_title(f"make bench: {events:,} events, median of {runs} run(s) (dots: each run); "
                   "2 cores, shared")
    axes.legend(fontsize=8)
    axes.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m pictures.bench_figure",
                                     description="Draw bench/results/*.jsonl as a figure.")
    parser.add_argument("results", nargs="+", help="results files (JSON lines)")
    parser.add_argument("--output", required=True, help="the figure (.png, .svg or .pdf)")
    parser.add_argument("--events", type=int, help="run size to draw (default: the largest)")
    args = parser.parse_args(argv)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    try:
        print(draw_benchmarks(read_results(args.results), args.output, args.events))
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
