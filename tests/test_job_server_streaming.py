"""A TestStream pipeline in streaming mode, submitted to the Spark job server.

Beam's client sends the TestStream (its events are in the proto) with ``--streaming``; the
server runs it with the SparkRunner's micro-batch loop. The panes (on time, then a late
refinement, accumulating) must be those the DirectRunner gives for the same pipeline.
"""

from __future__ import annotations

import json
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger, window

from test_job_server import job_endpoint, portable_options  # noqa: F401 (fixture)
from triggers.panes import DescribePanes


def run_panes(options: PipelineOptions, output: str) -> list:
    """Run the TestStream pipeline; its panes, one JSON object per line, sorted."""

    def append_line(record):
        # A sink that works in streaming on any runner: one line per pane, appended.
        with open(output, "a") as lines:
            lines.write(json.dumps(record, sort_keys=True) + "\n")

    events = (test_stream.TestStream()
              .advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("red", 1), 1),
                             window.TimestampedValue(("red", 2), 2)])
              .advance_watermark_to(15)
              .add_elements([window.TimestampedValue(("red", 5), 3)])  # late, within lateness
              .advance_watermark_to_infinity())
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline
         | events
         | beam.WindowInto(window.FixedWindows(10), allowed_lateness=60,
                           trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
         | beam.CombinePerKey(sum)
         | DescribePanes(keyed=True)
         | beam.Map(append_line))
    assert pipeline.run().wait_until_finish() == PipelineState.DONE
    if not os.path.exists(output):
        return []
    with open(output) as lines:
        return [json.loads(line) for line in sorted(lines)]


def test_test_stream_panes_match_the_direct_runner(job_endpoint, tmp_path):  # noqa: F811
    on_spark = run_panes(portable_options(job_endpoint, "--streaming"),
                         str(tmp_path / "spark.jsonl"))
    on_direct = run_panes(PipelineOptions(["--runner=DirectRunner", "--streaming"]),
                          str(tmp_path / "direct.jsonl"))
    assert [(pane["pane"]["timing"], pane["value"]) for pane in
            sorted(on_spark, key=lambda pane: pane["pane"]["index"])] == [
        ("ON_TIME", 3), ("LATE", 8)]
    assert on_spark == on_direct
