"""The workloads as Beam pipelines, the same graph for every runner.

Shards are created (``Create`` reshuffles them so they spread over workers), each shard
generates its events, events are stamped with their event time, and then:

- ``keyed_windowed_sum``: ``WindowInto(FixedWindows(60))`` and ``CombinePerKey(sum)``;
- ``global_sum``: ``CombineGlobally(sum)`` in the global window;
- ``pass_through``, ``projection``, ``filter``: nothing, a ``Map``, a ``Filter``; then each
  record's line (:func:`~bench.workloads.output_line`);
- ``hot_key_group``: ``GroupByKey`` on :func:`~bench.workloads.group_key`, then each key's
  count and sum of its values.

``parse_filter_project`` generates nothing: it reads the bid files written before the run
(``inputs``, a glob pattern; see ``bench.bids``) with ``ReadFromText``, then runs one named
step per function, plain functions as Nexmark's queries are written: ``Map(parse_bid)``,
``Filter(keep_bid)``, ``Map(project_bid)``, ``Map(output_line)``.

Answers leave the pipeline through ``WriteToText`` into a scratch directory and are read
back, so the check compares what the runner really wrote, on any runner. ``timing``, when
given, receives ``seconds``: the run, without that read-back.

>>> run_beam("global_sum", EventSet(100), "DirectRunner") == reference_answer(  # doctest: +SKIP
...     "global_sum", EventSet(100))
True
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window

from bench.bids import bid_files, keep_bid, parse_bid, project_bid
from bench.nexmark.pipelines import run_nexmark
from bench.nexmark.queries import WORKLOADS as NEXMARK_WORKLOADS
from bench.workloads import (
    DIGESTED,
    ELEMENT_WISE,
    FILTER,
    GLOBAL_SUM,
    HOT_KEY_GROUP,
    PARSE_FILTER_PROJECT,
    PROJECTION,
    WINDOW_SECONDS,
    EventSet,
    check_workload,
    digest_files,
    generate_shard,
    group_key,
    keep,
    output_line,
    project,
)


class _FormatWindowedSum(beam.DoFn):
    """``(team, sum)`` in a window -> a JSON line ``[team, window_start, sum]``."""

    def process(self, team_and_sum, window_of_sum=beam.DoFn.WindowParam):
        team, total = team_and_sum
        yield json.dumps([team, int(window_of_sum.start), total])


def _stamp_event_time(event):
    team, score, event_time = event
    return window.TimestampedValue((team, score), event_time)


def _count_and_sum(key_and_scores):
    key, scores = key_and_scores
    count = total = 0
    for score in scores:
        count += 1
        total += score
    return json.dumps([key, count, total])


def build_workload(pipeline: beam.Pipeline, workload: str, event_set: EventSet, output: str,
                   inputs: Optional[str] = None):
    """Add ``workload`` over ``event_set`` to ``pipeline``, writing its answer under ``output``
    (``inputs``: the pattern of ``parse_filter_project``'s bid files)."""
    check_workload(workload)
    if workload == PARSE_FILTER_PROJECT:
        if inputs is None:
            raise ValueError(f"{workload} reads files: give inputs (see bench.bids.bid_files)")
        lines = (
            pipeline
            | "Read" >> beam.io.ReadFromText(inputs)
            | "Parse" >> beam.Map(parse_bid)
            | "Filter" >> beam.Filter(keep_bid)
            | "Project" >> beam.Map(project_bid)
            | "Format" >> beam.Map(output_line)
        )
        return lines | "Write" >> beam.io.WriteToText(output, file_name_suffix=".jsonl")
    events = (
        pipeline
        | "Shards" >> beam.Create(event_set.shards())
        | "Generate" >> beam.FlatMap(lambda shard: generate_shard(*shard))
    )
    if workload in ELEMENT_WISE:
        if workload == PROJECTION:
            events = events | "Project" >> beam.Map(project)
        elif workload == FILTER:
            events = events | "Filter" >> beam.Filter(keep)
        lines = events | "Format" >> beam.Map(output_line)
    elif workload == GLOBAL_SUM:
        lines = (
            events
            | "Scores" >> beam.Map(lambda event: event[1])
            | "Sum" >> beam.CombineGlobally(sum)
            | "Format" >> beam.Map(json.dumps)
        )
    elif workload == HOT_KEY_GROUP:
        lines = (
            events
            | "Key" >> beam.Map(lambda event: (group_key(event), event[1]))
            | "Group" >> beam.GroupByKey()
            | "CountAndSum" >> beam.Map(_count_and_sum)
        )
    else:
        lines = (
            events
            | "EventTime" >> beam.Map(_stamp_event_time)
            | "Window" >> beam.WindowInto(window.FixedWindows(WINDOW_SECONDS))
            | "SumPerTeam" >> beam.CombinePerKey(sum)
            | "Format" >> beam.ParDo(_FormatWindowedSum())
        )
    return lines | "Write" >> beam.io.WriteToText(output, file_name_suffix=".jsonl")


def read_answer(workload: str, output: str) -> Any:
    """Read back what :func:`build_workload` wrote, in the form ``workloads`` defines."""
    if workload in DIGESTED:
        return digest_files(f"{output}*.jsonl")
    records: List[Any] = []
    for path in sorted(glob.glob(f"{output}*.jsonl")):
        with open(path) as lines:
            records.extend(json.loads(line) for line in lines if line.strip())
    if workload == GLOBAL_SUM:
        if len(records) != 1:
            raise AssertionError(f"global_sum wrote {len(records)} values, expected exactly one")
        return records[0]
    if workload == HOT_KEY_GROUP:
        counted = {key: (count, total) for key, count, total in records}
        if len(counted) != len(records):
            raise AssertionError(f"hot_key_group wrote {len(records)} lines for "
                                 f"{len(counted)} keys, expected one line per key")
        return counted
    answer = {}
    for team, start, total in records:
        if (team, start) in answer:
            raise AssertionError(f"two sums for team {team!r}, window starting {start}")
        answer[(team, start)] = total
    return answer


def run_beam(
    workload: str,
    event_set: EventSet,
    runner: Any,
    options: Optional[List[str]] = None,
    scratch_dir: Optional[str] = None,
    timing: Optional[Dict[str, float]] = None,
    inputs: Optional[str] = None,
) -> Any:
    """Run ``workload`` on ``runner`` (a name or instance) with ``options``; return the answer.

    ``inputs``: the pattern of the bid files of ``event_set`` for ``parse_filter_project``
    (None: written here, into ``scratch_dir``, before the clock starts). Beam's Nexmark
    workloads are built by :mod:`bench.nexmark.pipelines`, their ``inputs`` its event files."""
    if workload in NEXMARK_WORKLOADS:
        return run_nexmark(workload, event_set, runner, options, scratch_dir, timing, inputs)
    with tempfile.TemporaryDirectory(dir=scratch_dir, prefix="bench-beam-") as directory, \
            _inputs(workload, event_set, inputs, directory) as inputs:
        output = os.path.join(directory, "answer")
        began = time.perf_counter()
        pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(options or []))
        build_workload(pipeline, workload, event_set, output, inputs)
        pipeline.run().wait_until_finish()
        if timing is not None:
            timing["seconds"] = time.perf_counter() - began
        return read_answer(workload, output)


def _inputs(workload: str, event_set: EventSet, inputs: Optional[str], scratch_dir: str) -> Any:
    """A context giving the pattern of ``workload``'s input files (None: it reads none)."""
    if workload != PARSE_FILTER_PROJECT:
        return contextlib.nullcontext(None)
    return bid_files(event_set, inputs, scratch_dir)
