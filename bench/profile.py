"""``python -m bench.profile``: where an element's microseconds go in Spark's Python workers.

Runs one benchmark workload (``bench.workloads``) on the SparkRunner, or written by hand with
RDDs (``--engine pyspark``), on a session started with ``spark.python.profile=true``:
PySpark's own profiler, cProfile in every Python worker, one profile per RDD, sent back to
the driver. The profiles are merged, and each function's own time (cProfile's ``tottime``)
is put in its file's category (:data:`CATEGORIES`): event generation, the workload's own
functions, the trigger driver and windows, coders, the data channel, the runner itself,
Beam's SDK operations, PySpark's worker and serializers. cProfile sees Python functions
only: the time of Beam's compiled (Cython) coders and operations counts in the Python
function that called them, and cProfile's own overhead inflates function-heavy code, so the
shares are a map of where to look, not a measurement of speed (``python -m bench`` is).
Printed per category: seconds and microseconds per event (CPU of the workers, summed over
them), then the functions that take the most.

Examples::

    python -m bench.profile --workload pass_through --events 200000
    python -m bench.profile --workload keyed_windowed_sum --engine pyspark
    python -m bench.profile --workload parse_filter_project --events 200000
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import pstats
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from bench.answers import reference_answer
from bench.bids import BidFiles
from bench.session import REPOSITORY_ROOT
from bench.workloads import (
    READS_FILES,
    WORKLOADS,
    EventSet,
    describe_difference,
)

#: (category, the files of its functions, the fragments of a compiled function's name).
#: PySpark's profiles name files by their base name only, so a file is known by its base
#: name among the packages' own (the first category listing it wins).
CATEGORIES: Tuple[Tuple[str, Tuple[str, ...], Tuple[str, ...]], ...] = (
    ("event generation", ("bench/workloads.py",), ("_random.Random",)),
    ("the workload's functions", ("bench/beam_jobs.py", "bench/baselines.py", "bench/bids.py"),
     ()),
    ("trigger driver, windows, timestamps",
     ("apache_beam/transforms/trigger.py", "apache_beam/transforms/window.py",
      "apache_beam/utils/windowed_value.py", "apache_beam/utils/timestamp.py",
      "runners/spark/chains/window_assignment.py", "runners/spark/fast_paths.py"),
     ("apache_beam.utils.windowed_value",)),
    ("coders", ("apache_beam/coders/", "runners/spark/planning/coders.py"),
     ("apache_beam.coders",)),
    ("data channel", ("apache_beam/runners/worker/data_plane.py",), ()),
    # pyspark/shuffle.py (groupByKey's merger) shares its name with the runner's shuffle.py
    ("the runner", ("runners/spark/",), ("runners.spark",)),
    ("Beam SDK operations", ("apache_beam/",), ("apache_beam.",)),
    ("PySpark worker, serializers", ("pyspark/",), ("pyspark.",)),
)
OTHER = "pickle, builtins, other"
RUNNER = "the runner"
#: The file name of the functions the runner writes for chains of steps.
CHAIN_FILENAME = "<chained steps>"
#: bench/workloads.py holds the generator and the element-wise workloads' own functions
#: (``project``, ``keep``, ``output_line``): only these of its functions are generation.
GENERATION_FUNCTIONS = ("generate_shard",)


@functools.lru_cache(maxsize=1)
def _categories_by_file() -> Dict[str, str]:
    """Base name of every file of the packages above -> its category."""
    import apache_beam
    import pyspark

    roots = {"apache_beam/": os.path.dirname(os.path.dirname(apache_beam.__file__)),
             "pyspark/": os.path.dirname(os.path.dirname(pyspark.__file__)),
             "runners/": REPOSITORY_ROOT, "bench/": REPOSITORY_ROOT}
    by_file: Dict[str, str] = {}
    for category, files, _ in CATEGORIES:
        for pattern in files:
            root = next(root for prefix, root in roots.items() if pattern.startswith(prefix))
            path = os.path.join(root, pattern)
            found = (glob.glob(os.path.join(path, "**", "*.py"), recursive=True)
                     if pattern.endswith("/") else [path])
            for name in found:
                if os.sep + "dependencies" + os.sep in name:  # the driver's, not workers'
                    continue
                by_file.setdefault(os.path.basename(name), category)
    return by_file


def categorize(filename: str, name: str) -> str:
    """The category of a function (see :data:`CATEGORIES`).

    >>> categorize("trigger.py", "process_timer")
    'trigger driver, windows, timestamps'
    >>> categorize("~", "<method 'process' of 'apache_beam.runners.worker.operations.DoOperation' objects>")
    'Beam SDK operations'
    >>> categorize("workloads.py", "generate_shard"), categorize("workloads.py", "output_line")
    ('event generation', "the workload's functions")
    >>> categorize("<chained steps>", "chain")
    'the runner'
    """
    if filename == CHAIN_FILENAME:  # compiled by runners/spark/chains/code.py
        return RUNNER
    if filename != "~":
        category = _categories_by_file().get(os.path.basename(filename), OTHER)
        if category == CATEGORIES[0][0] and name not in GENERATION_FUNCTIONS:
            return CATEGORIES[1][0]
        return category
    for category, _, fragments in CATEGORIES:
        if any(fragment in name for fragment in fragments):
            return category
    return OTHER


def merged_stats(spark_context: Any) -> Optional[pstats.Stats]:
    """Every RDD profile the workers sent, merged (None: none was collected)."""
    merged: Optional[pstats.Stats] = None
    collector = spark_context.profiler_collector
    for _, profiler, _ in getattr(collector, "profilers", []):
        stats = profiler.stats()
        if stats is None:
            continue
        if merged is None:
            merged = stats
        else:
            merged.add(stats)
    return merged


def summarize(stats: pstats.Stats, events: int, top: int = 15
              ) -> Tuple[List[Tuple[str, float]], List[Tuple[str, float, int]]]:
    """(seconds per category, largest first), (the ``top`` functions: label, own seconds,
    calls)."""
    by_category: Dict[str, float] = {}
    functions = []
    for (filename, line, name), (_, calls, own, _, _) in stats.stats.items():  # type: ignore
        category = categorize(filename, name)
        by_category[category] = by_category.get(category, 0.0) + own
        functions.append((f"{filename.split('site-packages/')[-1]}:{line}({name})", own, calls))
    functions.sort(key=lambda function: -function[1])
    return sorted(by_category.items(), key=lambda item: -item[1]), functions[:top]


def _session(master: str, parallelism: int) -> Any:
    from bench.session import bench_session

    return bench_session(master, parallelism, settings={"spark.python.profile": "true"})


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="pass_through",
                        help="the workload profiled (pass_through)")
    parser.add_argument("--engine", choices=("spark", "pyspark"), default="spark",
                        help="our SparkRunner, or the hand-written RDD program (spark)")
    parser.add_argument("--events", type=int, default=200_000, help="events (200,000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark partitions (2)")
    parser.add_argument("--top", type=int, default=15, help="functions listed (15)")
    arguments = parser.parse_args(argv)
    session = _session(arguments.master, arguments.parallelism)
    if session.sparkContext.getConf().get("spark.python.profile") != "true":
        print("a SparkContext without spark.python.profile=true is already running",
              file=sys.stderr)
        return 2
    event_set = EventSet(arguments.events)
    with BidFiles() as bid_files:
        # parse_filter_project's input files, written before the clock starts.
        inputs = (bid_files.pattern(event_set) if arguments.workload in READS_FILES else None)
        began = time.perf_counter()
        if arguments.engine == "pyspark":
            from bench.baselines import run_pyspark

            answer = run_pyspark(arguments.workload, event_set, session.sparkContext,
                                 arguments.parallelism, inputs=inputs)
        else:
            from bench.beam_jobs import run_beam
            from runners.spark import SparkRunner

            answer = run_beam(arguments.workload, event_set, SparkRunner(session),
                              [f"--spark_parallelism={arguments.parallelism}"], inputs=inputs)
        seconds = time.perf_counter() - began
    difference = describe_difference(reference_answer(arguments.workload, event_set), answer)
    stats = merged_stats(session.sparkContext)
    if stats is None:
        print("no profile came back from the Python workers", file=sys.stderr)
        return 1
    # PySpark prints every profile at exit otherwise (thousands of lines).
    session.sparkContext.profiler_collector.profilers = []
    categories, functions = summarize(stats, arguments.events, arguments.top)
    total = sum(own for _, own in categories)
    print(f"{arguments.workload} on {arguments.engine}, {arguments.events:,} events: "
          f"{seconds:.2f} s wall, {total:.2f} s of Python worker CPU "
          f"({total / arguments.events * 1e6:.1f} us per event); answer "
          + ("checked equal" if not difference else f"WRONG: {difference}"))
    print(f"\n{'category':<32} {'seconds':>8} {'us/event':>9} {'share':>6}")
    for category, own in categories:
        print(f"{category:<32} {own:8.2f} {own / arguments.events * 1e6:9.2f} "
              f"{own / total:6.1%}")
    print(f"\n{'own seconds':>11} {'calls':>10}  function")
    for label, own, calls in functions:
        print(f"{own:11.2f} {calls:10,}  {label}")
    return 0 if not difference else 1


if __name__ == "__main__":
    sys.exit(main())
