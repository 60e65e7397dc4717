"""Unbounded splittable DoFns in streaming: residuals carried across micro-batches.

A small unbounded source of our own, ``CountTo``, emits the numbers of a finite range a few
at a time, self-checkpointing after each few (``defer_remainder``) and advancing a manual
watermark estimator behind them. Fixed windows with an AfterWatermark trigger must give the
same panes on every runner; on the SparkRunner the read must span several micro-batches,
with the source's watermark closing windows on the way (not only at the end).
"""

from __future__ import annotations

import glob
import json

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.timestamp import Timestamp

from pane_times import to_millis
from triggers.panes import DescribePanes, pane_record

#: Numbers a CountTo call emits before it self-checkpoints.
PER_CALL = 4


class _CountRange(RestrictionProvider):
    """The restriction of ("key", n) is the offsets [0, n)."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class CountTo(beam.DoFn):
    """("key", n) -> ("key", i) at event time i for i in [0, n), PER_CALL per call; the
    watermark follows the last number emitted."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element, tracker=beam.DoFn.RestrictionParam(_CountRange()),
                watermark=beam.DoFn.WatermarkEstimatorParam(
                    ManualWatermarkEstimator.default_provider())):
        key, _ = element
        start = tracker.current_restriction().start
        for number in range(start, start + PER_CALL):
            if not tracker.try_claim(number):
                return
            yield beam.window.TimestampedValue((key, number), number)
            watermark.set_watermark(Timestamp(number))
        tracker.defer_remainder()


def loop_metric(result, name):
    query = MetricsFilter().with_namespace("spark_streaming").with_name(name)
    results = result.metrics().query(query)
    return results["counters"] + results["gauges"] + results["distributions"]


def test_unbounded_sdf_panes_across_batches(make_pipeline, runner_name, tmp_path):
    report = tmp_path / "report.jsonl"
    pipeline = make_pipeline(streaming=True, batch_interval_seconds=0.01,
                             streaming_report=str(report))
    panes = (pipeline
             | beam.Create([("a", 25), ("b", 12)])
             | beam.ParDo(CountTo())
             | beam.WindowInto(window.FixedWindows(10), trigger=trigger.AfterWatermark(),
                               accumulation_mode=trigger.AccumulationMode.DISCARDING)
             | "Sum" >> beam.CombinePerKey(sum)
             | DescribePanes()
             | beam.Map(to_millis))

    def on_time(key, value, start):
        return pane_record(key, value, window=(start, start + 10), timestamp=(start * 1000 + 9999) / 1000,
                           timing="ON_TIME", index=0, is_first=True, is_last=True)

    assert_that(panes, equal_to([
        on_time("a", sum(range(0, 10)), 0), on_time("a", sum(range(10, 20)), 10),
        on_time("a", sum(range(20, 25)), 20),
        on_time("b", sum(range(0, 10)), 0), on_time("b", 10 + 11, 10),
    ]))
    result = pipeline.run()
    result.wait_until_finish()
    if runner_name != "SparkRunner":
        return
    # 25 numbers, 4 per call: the read spans 7 batches (+1 to see that nothing is left).
    batches, = [metric.committed for metric in loop_metric(result, "batches")]
    assert batches >= 7
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert [line["batch"] for line in lines] == list(range(batches))
    assert {"time", "source_elements", "input_elements", "rate", "millis", "input_watermarks",
            "output_watermarks", "watermark_lag_seconds", "state_keys",
            "state_bytes"} <= set(lines[0])
    assert sum(line["source_elements"] for line in lines) == 25 + 12
    # On the wall clock a batch is one Spark job (source, GroupByKey and sink together),
    # or none when it has nothing to do.
    assert all(line["spark_jobs"] <= 1 for line in lines)
    assert sum(line["spark_jobs"] for line in lines) >= 7
    assert all(line["source_elements"] <= 2 * PER_CALL for line in lines)  # read gradually
    # The source's watermark advances batch by batch (3, 7, 11, ...), so the GroupByKey's
    # output watermark passes windows' ends before the read is over, then reaches the end.
    source = [line["output_watermarks"]["ParDo(CountTo)"] for line in lines]
    grouped = [line["output_watermarks"]["Sum/GroupByKey"] for line in lines]
    assert [w for w in source if w not in (None, "end")] == sorted(
        w for w in source if w not in (None, "end"))
    assert any(isinstance(w, float) and 10 <= w < 24 for w in grouped)
    assert grouped[-1] == "end" and source[-1] == "end"


def test_test_stream_into_write_to_text(make_pipeline, tmp_path):
    """A TestStream pipeline ending in WriteToText (side inputs across batches, then a
    finalize step) writes every element once (it used to fail on the SparkRunner with
    CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND: side-input history re-read from freed RDDs)."""
    stream = (streams.TestStream()
              .advance_watermark_to(0)
              .add_elements([beam.window.TimestampedValue("alpha", 1)])
              .advance_watermark_to(11)
              .add_elements([beam.window.TimestampedValue("beta", 12)])
              .advance_watermark_to(22)
              .add_elements([beam.window.TimestampedValue("gamma", 23)])
              .advance_watermark_to(33)
              .advance_watermark_to_infinity())
    prefix = str(tmp_path / "out")
    with make_pipeline(streaming=True) as pipeline:
        _ = (pipeline | stream | beam.WindowInto(window.FixedWindows(10))
             | beam.io.WriteToText(prefix))
    written = sorted(line for path in glob.glob(prefix + "*")
                     for line in open(path, encoding="utf-8").read().splitlines())
    assert written == ["alpha", "beta", "gamma"]
