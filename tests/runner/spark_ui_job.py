"""A driver for tests/runner/test_spark_ui_names.py: one batch and one streaming run of a
windowed sum, on a SparkContext whose event log is written to the directory given.

Usage: python spark_ui_job.py EVENT_LOG_DIR [extra pipeline options...]
"""

from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from runners.spark import SparkRunner


def windowed_sum(pipeline: beam.Pipeline, source: beam.PTransform) -> None:
    (pipeline
     | "Read" >> source
     | "Window" >> beam.WindowInto(FixedWindows(10))
     | "Sum" >> beam.CombinePerKey(sum)
     | "Format" >> beam.MapTuple(lambda key, total: f"{key}={total}"))


def main(event_log_dir: str, extra: list) -> None:
    settings = [f"--spark_conf=spark.eventLog.dir={event_log_dir}",
                "--spark_conf=spark.eventLog.enabled=true",
                "--spark_conf=spark.eventLog.compress=false",
                "--spark_conf=spark.eventLog.rolling.enabled=false",
                "--spark_master_url=local[2]", *extra]
    with beam.Pipeline(runner=SparkRunner(), options=PipelineOptions(settings)) as pipeline:
        windowed_sum(pipeline, beam.Create([("a", 1), ("b", 2), ("a", 3)]))
    for compact in ("true", "false"):
        events = (TestStream()
                  .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2)])
                  .advance_watermark_to(10)
                  .add_elements([TimestampedValue(("a", 3), 12)])
                  .advance_watermark_to_infinity())
        options = PipelineOptions(settings + ["--streaming",
                                              f"--streaming_compact_rounds={compact}"])
        with beam.Pipeline(runner=SparkRunner(), options=options) as pipeline:
            windowed_sum(pipeline, events)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
