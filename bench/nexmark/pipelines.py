"""The Nexmark workloads as Beam pipelines, built the way Beam's ``nexmark_launcher`` builds
them, the same graph for every runner.

As ``NexmarkLauncher.read_from_file`` and ``run_query`` do: the models' coders registered
(``nexmark_util.setup_coder``), ``ReadFromText`` of the event files ->
``ParDo(ParseJsonEventFn())`` -> the launcher's timestamping ``Map`` (each event at its
``date_time``) -> ``ParDo`` of the event ``Monitor``'s DoFn -> the query (Beam's own
``query0``, ``query1``, ``query2`` ``load``, with the launcher's arguments; the windowed
sum is Beam's ``JustBids``, then ``(bid.auction, bid.price)``, ``WindowInto(FixedWindows(
10))`` and ``CombinePerKey(sum)``) -> ``ParDo`` of the result ``Monitor``'s DoFn.

The launcher ends there (its result is the monitors' metrics). Here the results then go to
a sink, so that the answer can be checked on every engine: ``WriteToText``, which writes
``str`` of each element (Beam's ``model_to_json`` for a model), as the benchmark's other
workloads write theirs and as the hand-written RDD programs write theirs
(``saveAsTextFile``). The windowed sum's results first get their window: a ``ParDo`` writes
``[auction, window start millis, sum]`` (a result without its window could not be checked).
What is left out of the launcher: ``save_main_session`` (nothing here lives in
``__main__``) and its metrics polling.

The run also checks the monitors: the event monitor must have counted every event and the
result monitor every line written (``MetricsFilter`` on the result, as the launcher's
``get_counter_metric``).

>>> from bench.workloads import EventSet
>>> run_nexmark("nexmark_q2", EventSet(1000), "DirectRunner") == (  # doctest: +SKIP
...     reference_answer("nexmark_q2", EventSet(1000)))
True
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Dict, List, Optional

import apache_beam as beam
from apache_beam.metrics import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.benchmarks.nexmark import nexmark_util
from apache_beam.testing.benchmarks.nexmark.monitor import Monitor, MonitorSuffix
from apache_beam.testing.benchmarks.nexmark.queries import query0, query1, query2
from apache_beam.testing.benchmarks.nexmark.queries.nexmark_query_util import JustBids
from apache_beam.transforms import window

from bench.nexmark.events import event_files
from bench.nexmark.queries import (
    Q0,
    Q1,
    Q2,
    QUERY_ARGS,
    WINDOWED_SUM,
    check_workload,
    written_answer,
)
from bench.workloads import Digest, EventSet

#: The launcher's monitors: (namespace, name prefix).
EVENT_MONITOR = (".events", "event")
RESULT_MONITOR = (".results", "result")
_QUERIES = {Q0: query0, Q1: query1, Q2: query2}


class WindowedSum(beam.PTransform):
    """The keyed windowed sum over Nexmark's bids: per auction, the sum of its bids' prices
    in each fixed window of ``window_size_sec``."""

    def __init__(self, window_size_sec: int) -> None:
        super().__init__()
        self.window_size_sec = window_size_sec

    def expand(self, events):
        return (events
                | JustBids()
                | "AuctionAndPrice" >> beam.Map(lambda bid: (bid.auction, bid.price))
                | "Window" >> beam.WindowInto(window.FixedWindows(self.window_size_sec))
                | "SumPerAuction" >> beam.CombinePerKey(sum))


class _WithWindowStart(beam.DoFn):
    """``(auction, sum)`` in a window -> the JSON line ``[auction, window start millis, sum]``."""

    def process(self, auction_and_sum, window_of_sum=beam.DoFn.WindowParam):
        auction, total = auction_and_sum
        yield json.dumps([auction, window_of_sum.start.micros // 1000, total])


def build_query(pipeline: beam.Pipeline, workload: str, inputs: str, output: str):
    """Add ``workload`` over the event files ``inputs`` (a glob pattern) to ``pipeline``,
    writing its results as text under ``output``."""
    check_workload(workload)
    nexmark_util.setup_coder()
    event_monitor, result_monitor = Monitor(*EVENT_MONITOR), Monitor(*RESULT_MONITOR)
    events = (
        pipeline
        | "reading_from_file" >> beam.io.ReadFromText(inputs)
        | "deserialization" >> beam.ParDo(nexmark_util.ParseJsonEventFn())
        | "timestamping" >> beam.Map(lambda e: window.TimestampedValue(e, e.date_time))
        | "event_monitor" >> beam.ParDo(event_monitor.doFn))
    if workload == WINDOWED_SUM:
        results = events | "windowed_sum" >> WindowedSum(QUERY_ARGS["window_size_sec"])
    else:
        results = _QUERIES[workload].load(events, QUERY_ARGS, pipeline.options)
    results = results | "result_monitor" >> beam.ParDo(result_monitor.doFn)
    if workload == WINDOWED_SUM:
        results = results | "with_window_start" >> beam.ParDo(_WithWindowStart())
    return results | "write" >> beam.io.WriteToText(output, file_name_suffix=".txt")


def monitored_counts(result: Any) -> Dict[str, int]:
    """The elements each monitor counted (``-1``: none reported), as the launcher reads them."""
    return {name: nexmark_util.get_counter_metric(result, namespace,
                                                  prefix + MonitorSuffix.ELEMENT_COUNTER)
            for name, (namespace, prefix) in (("events", EVENT_MONITOR),
                                              ("results", RESULT_MONITOR))}


def check_monitors(counts: Dict[str, int], event_set: EventSet, answer: Digest) -> None:
    """Raise if the monitors did not count every event and every result written (a counter
    never incremented is not reported: -1 stands for 0)."""
    events, results = (max(counts[name], 0) for name in ("events", "results"))
    if events != event_set.events or results != answer.lines:
        raise AssertionError(
            f"the monitors counted {counts['events']} events and {counts['results']} results; "
            f"expected {event_set.events} events and {answer.lines} results (lines written)")


def run_nexmark(
    workload: str,
    event_set: EventSet,
    runner: Any,
    options: Optional[List[str]] = None,
    scratch_dir: Optional[str] = None,
    timing: Optional[Dict[str, float]] = None,
    inputs: Optional[str] = None,
) -> Digest:
    """Run ``workload`` on ``runner`` (a name or instance) with ``options``; return its
    answer, after checking the monitors' counts. ``inputs``: the pattern of
    ``event_set``'s files (None: written here, into ``scratch_dir``, before the clock
    starts); ``timing`` receives ``seconds``, the run without reading back its output."""
    with tempfile.TemporaryDirectory(dir=scratch_dir, prefix="bench-nexmark-") as directory, \
            event_files(event_set, inputs, directory) as inputs:
        output = os.path.join(directory, "answer")
        began = time.perf_counter()
        pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(options or []))
        build_query(pipeline, workload, inputs, output)
        result = pipeline.run()
        result.wait_until_finish()
        if timing is not None:
            timing["seconds"] = time.perf_counter() - began
        answer = written_answer(workload, f"{output}*.txt")
        check_monitors(monitored_counts(result), event_set, answer)
        return answer

