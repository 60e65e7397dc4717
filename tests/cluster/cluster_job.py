"""A keyed streaming job for the cluster tests, run as a driver process of its own.

    python cluster_job.py PANES_DIR [--batches N] [beam options ...]

A TestStream of ``--batches`` batches brings one element for every key of :data:`KEYS` in
every batch (so every key partition's state is touched by every batch) and moves the
watermark one second a batch, so its 10 s windows close during the run. Two kinds of keyed
state: a windowed sum's GroupByKey (early panes every 3 elements, the on-time pane,
accumulating) and a stateful DoFn's running count per key. Every pane and count is written
as a JSON file into ``PANES_DIR`` (by the executors: on a cluster a directory every worker
sees), named by its content, so a pane written again after a failure (at-least-once)
replaces itself.

Run as ``__main__`` its DoFns are pickled by value: executors need nothing of this file.
:func:`build` is imported by the tests to run the same pipeline on ``local[2]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from typing import Any, Dict, List

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as streams
from apache_beam.transforms import userstate
from apache_beam.transforms.trigger import AccumulationMode, AfterCount, AfterWatermark
from apache_beam.transforms.window import FixedWindows, TimestampedValue

KEYS = [f"key-{number}" for number in range(12)]
WINDOW_SECONDS = 10


def events(batches: int) -> streams.TestStream:
    stream = streams.TestStream().advance_watermark_to(0)
    for batch in range(batches):
        stream = stream.add_elements([TimestampedValue((key, batch + index), batch)
                                      for index, key in enumerate(KEYS)])
        stream = stream.advance_watermark_to(batch + 1)
    return stream.advance_watermark_to_infinity()


class WriteRecord(beam.DoFn):
    """One JSON file per record, named by its content (written whole, then renamed)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def process(self, record):
        text = json.dumps(record, sort_keys=True)
        name = os.path.join(self.directory, hashlib.sha256(text.encode()).hexdigest()[:32])
        with open(name + ".tmp", "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(name + ".tmp", name + ".json")


class DescribePane(beam.DoFn):
    def process(self, element, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        key, total = element
        yield {"key": key, "total": total, "window": [window.start.micros, window.end.micros],
               "timing": pane.timing, "index": pane.index, "last": pane.is_last}


class RunningCount(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        so_far = (count.read() or 0) + 1
        count.write(so_far)
        yield {"key": element[0], "count": so_far, "value": element[1]}


def build(pipeline: beam.Pipeline, panes_dir: str, batches: int) -> None:
    keyed = pipeline | "Events" >> events(batches)
    _ = (keyed
         | "Windows" >> beam.WindowInto(
             FixedWindows(WINDOW_SECONDS), trigger=AfterWatermark(early=AfterCount(3)),
             accumulation_mode=AccumulationMode.ACCUMULATING)
         | "Sum" >> beam.CombinePerKey(sum)
         | "Describe" >> beam.ParDo(DescribePane())
         | "WritePanes" >> beam.ParDo(WriteRecord(panes_dir)))
    _ = (keyed
         | "Count" >> beam.ParDo(RunningCount())
         | "WriteCounts" >> beam.ParDo(WriteRecord(panes_dir)))


def read_records(directory: str) -> List[str]:
    """Every record written to ``directory``, as canonical JSON, sorted."""
    found = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name), encoding="utf-8") as file:
                found.append(file.read())
    return sorted(found)


_LOCAL_RECORDS: Dict[int, List[str]] = {}


def local_records(spark_session: Any, directory: Any, batches: int) -> List[str]:
    """What the pipeline writes on ``local[2]`` (``spark_session``, classic) into the new
    ``directory`` (once per number of batches in a test process)."""
    from runners.spark import SparkRunner

    if batches not in _LOCAL_RECORDS:
        os.makedirs(directory)
        pipeline = beam.Pipeline(runner=SparkRunner(spark_session),
                                 options=PipelineOptions([], streaming=True, spark_parallelism=4))
        build(pipeline, str(directory), batches)
        pipeline.run().wait_until_finish()
        _LOCAL_RECORDS[batches] = read_records(str(directory))
    return _LOCAL_RECORDS[batches]


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("panes_dir")
    parser.add_argument("--batches", type=int, default=30)
    known, beam_args = parser.parse_known_args(argv)
    from runners.spark import SparkRunner

    os.makedirs(known.panes_dir, exist_ok=True)
    pipeline = beam.Pipeline(runner=SparkRunner(), options=PipelineOptions(
        ["--streaming", *beam_args]))
    build(pipeline, known.panes_dir, known.batches)
    pipeline.run().wait_until_finish()
    print("JOB DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
