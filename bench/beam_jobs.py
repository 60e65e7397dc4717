"""The workloads as Beam pipelines, the same graph for every runner.

Shards are created (``Create`` reshuffles them so they spread over workers), each shard
generates its events, events are stamped with their event time, and then:

- ``keyed_windowed_sum``: ``WindowInto(FixedWindows(60))`` and ``CombinePerKey(sum)``;
- ``global_sum``: ``CombineGlobally(sum)`` in the global window;
- ``pass_through``, ``projection``, ``filter``: nothing, a ``Map``, a ``Filter``; then each
  record's line (:func:`~bench.workloads.output_line`);
- ``hot_key_group``: ``GroupByKey`` on :func:`~bench.workloads.group_key`, then each key's
  count and sum of its values.

Answers leave the pipeline through ``WriteToText`` into a scratch directory and are read
back, so the check compares what the runner really wrote, on any runner. ``timing``, when
given, receives ``seconds``: the run, without that read-back.

>>> run_beam("global_sum", EventSet(100), "DirectRunner") == reference_answer(  # doctest: +SKIP
...     "global_sum", EventSet(100))
True
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window

from bench.workloads import (
    ELEMENT_WISE,
    FILTER,
    GLOBAL_SUM,
    HOT_KEY_GROUP,
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


def build_workload(pipeline: beam.Pipeline, workload: str, event_set: EventSet, output: str):
    """Add ``workload`` over ``event_set`` to ``pipeline``, writing its answer under ``output``."""
    check_workload(workload)
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
    if workload in ELEMENT_WISE:
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
) -> Any:
    """Run ``workload`` on ``runner`` (a name or instance) with ``options``; return the answer."""
    with tempfile.TemporaryDirectory(dir=scratch_dir, prefix="bench-beam-") as directory:
        output = os.path.join(directory, "answer")
        began = time.perf_counter()
        pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(options or []))
        build_workload(pipeline, workload, event_set, output)
        pipeline.run().wait_until_finish()
        if timing is not None:
            timing["seconds"] = time.perf_counter() - began
        return read_answer(workload, output)
