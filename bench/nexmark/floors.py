"""``python -m bench.nexmark.floors``: what Beam's Nexmark costs per event on one core
outside any runner: the floor a runner's per-event CPU can approach.

Each part is timed alone (CPU time of this process, ``time.process_time``, so other
processes' load does not count), over the same generated events as the benchmark's:

- **the text read**: the lines of the event files through the source ``ReadFromText``
  reads with, as its splittable DoFn reads them (the source split in bundles, each
  bundle's ``source.read(range_tracker)``: ``_TextSource.read_records``, one
  ``try_claim`` per line on the range tracker); beside it a plain ``for line in file``;
- **each step's own code, as Beam calls it**: the DoFn's ``process`` (a ``Map``'s or
  ``Filter``'s is Beam's wrapper around the function), given the element (and the
  timestamp to a ``process`` that asks for it), inside a state sampler whose metrics
  container records the ``Monitor``'s metrics, as in Beam's SDK harness; ``setup`` and
  ``start_bundle`` once. The steps are the query's, in order, from the parser to the
  result monitor; the windowed sum's window assignment (``FixedWindows.assign``) and its
  per-element precombine (a running sum per window and auction) are timed as two parts;
- **the sink's encode**: ``str`` of each result and its UTF-8 bytes (``WriteToText``'s
  default coder).

The parts' sum is what Beam's own code needs per event: the rest of a runner's time is its
machinery. Measured as the SparkRunner's workers run Beam: with the runner's fast paths for
``Timestamp`` and windows installed (its Beam internals, which give the state sampler and
metrics container, install them), and, for a query of its own, in a fresh process.

Example::

    python -m bench.nexmark.floors --events 200000
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from bench.nexmark.events import EventFiles
from bench.nexmark.queries import QUERY_ARGS, WINDOWED_SUM, WORKLOADS
from bench.workloads import EventSet

Parts = List[Tuple[str, float]]  # (part, us per event)


def _cpu(function: Callable[[], Any], events: int) -> float:
    """``function()``'s CPU time per event, in microseconds (the least of three runs).

    Python's cyclic garbage collector is off while it runs: the parts keep every event's
    objects alive to hand them to the next part, and collections that scan them all cost
    more than a runner's, which holds a bundle's few elements at a time."""
    best = float("inf")
    for _ in range(3):
        gc.collect()
        gc.disable()
        try:
            began = time.process_time()
            function()
            best = min(best, time.process_time() - began)
        finally:
            gc.enable()
    return best / events * 1e6


def _read_parts(pattern: str, events: int) -> Tuple[Parts, List[str]]:
    import glob

    import apache_beam as beam

    source = beam.io.ReadFromText(pattern)._source  # the BoundedSource ReadFromText reads
    bundles = list(source.split(desired_bundle_size=64 << 20))
    lines: List[str] = []

    def read() -> None:
        lines.clear()
        for bundle in bundles:
            tracker = bundle.source.get_range_tracker(bundle.start_position,
                                                      bundle.stop_position)
            lines.extend(bundle.source.read(tracker))

    def plain() -> None:
        for path in sorted(glob.glob(pattern)):
            with open(path, encoding="utf-8") as file:
                for _ in file:
                    pass

    parts = [("text read: source.read (read_records, try_claim)", _cpu(read, events)),
             ("  (a plain `for line in file`, for scale)", _cpu(plain, events))]
    if len(lines) != events:
        raise AssertionError(f"read {len(lines)} lines of {events} events")
    return parts, lines


def _steps(workload: str) -> List[Tuple[str, Any]]:
    """The query's per-event steps, in order, as ``(full label, DoFn)``."""
    import apache_beam as beam

    from bench.nexmark.pipelines import build_query

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as placeholder:
        pipeline = beam.Pipeline()
        build_query(pipeline, workload, placeholder.name, os.path.join(
            tempfile.gettempdir(), "unused"))
    found: List[Tuple[str, Any]] = []
    grouped = []  # the steps after a GroupByKey see groups, not events

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if isinstance(node.transform, beam.GroupByKey):
                grouped.append(node.full_label)
            dofn = getattr(node.transform, "fn", None)
            if (isinstance(dofn, beam.DoFn) and not grouped
                    and not isinstance(node.transform, beam.WindowInto)
                    and not node.full_label.startswith(("reading_from_file", "write"))):
                found.append((node.full_label, dofn))

    pipeline.visit(Visitor())
    return found


def _call(dofn: Any) -> Callable[[Any, Any], List[Any]]:
    """``process`` as Beam calls it: with the timestamp when it asks for it."""
    import inspect

    import apache_beam as beam

    process = dofn.process
    wants_timestamp = any(parameter.default == beam.DoFn.TimestampParam
                          for parameter in inspect.signature(process).parameters.values())
    if wants_timestamp:
        return lambda value, timestamp: list(process(value, timestamp=timestamp) or ())
    return lambda value, timestamp: list(process(value) or ())


def _step_parts(workload: str, lines: List[str], events: int) -> Tuple[Parts, List[Any]]:
    """Each step's CPU per event, fed what the step before it produced."""
    from apache_beam.transforms import window
    from apache_beam.utils.counters import CounterFactory

    from runners.spark.beam_internals import MetricsContainer, StateSampler

    sampler = StateSampler("floors", CounterFactory())
    sampler.start()
    parts: Parts = []
    elements: List[Tuple[Any, Any]] = [(line, None) for line in lines]
    try:
        for label, dofn in _steps(workload):
            container = MetricsContainer(label)
            with sampler.scoped_state(label, "start", metrics_container=container):
                dofn.setup()
                dofn.start_bundle()
            call = _call(dofn)
            produced: List[Tuple[Any, Any]] = []

            def run(call=call, elements=elements, produced=produced) -> None:
                produced.clear()
                for value, timestamp in elements:
                    for output in call(value, timestamp):
                        if isinstance(output, window.TimestampedValue):
                            produced.append((output.value, output.timestamp))
                        else:
                            produced.append((output, timestamp))

            with sampler.scoped_state(label, "process", metrics_container=container):
                parts.append((label, _cpu(run, events)))
            elements = list(produced)
        if workload == WINDOWED_SUM:
            parts.extend(_combine_parts(elements, events))
            elements = []
    finally:
        sampler.stop()
    return parts, [value for value, _ in elements]


def _combine_parts(elements: List[Tuple[Any, Any]], events: int) -> Parts:
    from apache_beam.transforms import window

    window_fn = window.FixedWindows(QUERY_ARGS["window_size_sec"])
    assigned: List[Any] = []

    def assign() -> None:
        assigned.clear()
        for value, timestamp in elements:
            assigned.append(window_fn.assign(window.WindowFn.AssignContext(timestamp))[0])

    def precombine() -> None:
        sums: Dict[Any, int] = {}
        for (key, price), window_of_value in zip((value for value, _ in elements), assigned):
            table_key = (window_of_value, key)
            sums[table_key] = sums.get(table_key, 0) + price

    return [("window assignment (FixedWindows.assign)", _cpu(assign, events)),
            ("precombine: a running sum per (window, auction)", _cpu(precombine, events))]


def _sink_part(results: List[Any], events: int) -> Parts:
    def encode() -> None:
        for result in results:
            str(result).encode("utf-8")

    return [("sink: str(result).encode() per result", _cpu(encode, events))] if results else []


def measure(workload: str, pattern: str, events: int) -> Parts:
    """The parts of ``workload`` per event (in a process of its own: what one query left
    in Beam's caches is not the next one's)."""
    from apache_beam.testing.benchmarks.nexmark import nexmark_util

    nexmark_util.setup_coder()
    parts, lines = _read_parts(pattern, events)
    step_parts, results = _step_parts(workload, lines, events)
    return parts + step_parts + _sink_part(results, events)


def format_floors(workload: str, events: int, parts: Parts) -> str:
    """The parts of a query as a table, and their sum (the parts in parentheses are for
    scale, not summed).

    >>> print(format_floors("q", 10, [("read", 1.0), ("  (for scale)", 0.5), ("parse", 2.0)]))
    == q: CPU us per event on one core, 10 events
    read                                                            1.00
      (for scale)                                                   0.50
    parse                                                           2.00
    sum (what Beam's own code needs per event)                      3.00
    """
    lines = [f"== {workload}: CPU us per event on one core, {events:,} events"]
    lines.extend(f"{part:<58}{value:10.2f}" for part, value in parts)
    total = sum(value for part, value in parts if not part.startswith("  ("))
    label = "sum (what Beam's own code needs per event)"
    lines.append(f"{label:<58}{total:10.2f}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.nexmark.floors",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--queries", default=",".join(WORKLOADS),
                        help=f"comma-separated, of {', '.join(WORKLOADS)} (all)")
    parser.add_argument("--events", type=lambda text: int(float(text)), default=200_000,
                        help="events per query (2e5)")
    parser.add_argument("--seed", type=int, default=2024, help="event generator seed (2024)")
    parser.add_argument("--shards", type=int, default=8, help="event file shards (8)")
    arguments = parser.parse_args(argv)
    queries = [query.strip() for query in arguments.queries.split(",") if query.strip()]
    unknown = [query for query in queries if query not in WORKLOADS]
    if unknown:
        parser.error(f"unknown queries {unknown}; choose from {', '.join(WORKLOADS)}")
    event_set = EventSet(arguments.events, arguments.seed, arguments.shards)
    print(f"load average {os.getloadavg()[0]:.2f} (CPU time is measured: load stretches "
          "only the wall time)", flush=True)
    context = multiprocessing.get_context("spawn")
    with EventFiles() as files:
        pattern = files.pattern(event_set)
        for workload in queries:
            with context.Pool(1) as pool:
                parts = pool.apply(measure, (workload, pattern, event_set.events))
            print(format_floors(workload, event_set.events, parts), flush=True)
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
