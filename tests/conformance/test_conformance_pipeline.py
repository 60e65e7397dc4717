"""Ordinary Beam pipelines, written as Beam's own tests write them, give on the SparkRunner
what they give on the DirectRunner.

* Reshuffle keeps each element's timestamp, windows and pane exactly (as the Beam version a
  pipeline is pinned to does: before 2.65, it dropped panes), whatever coder Beam infers.
* Metrics of every kind, updated in several bundles, tasks and stages, are merged as Beam
  merges them.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.testing.util import TestWindowedValue, assert_that, equal_to
from apache_beam.transforms import trigger, window
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming, WindowedValue


class EveryFiveSeconds(window.NonMergingWindowFn):
    """A WindowFn of the user's own: [t - t % 5, +5) intervals (Beam knows nothing of it)."""

    def assign(self, context):
        start = context.timestamp - context.timestamp % 5
        return [window.IntervalWindow(start, start + 5)]

    def get_window_coder(self):
        return IntervalWindowCoder()


class DescribeElement(beam.DoFn):
    """An element with its metadata, as plain values a test can compare."""

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        yield (element, float(timestamp), (float(window.start), float(window.end))
               if isinstance(window, beam.window.IntervalWindow) else "global",
               (pane.is_first, pane.is_last, pane.timing, pane.index, pane.nonspeculative_index))


UNKNOWN_PANE = (True, True, PaneInfoTiming.UNKNOWN, 0, 0)
#: What a GroupByKey with the default trigger emits in batch, on Beam's DirectRunner too.
ON_TIME_BATCH_PANE = (True, False, PaneInfoTiming.ON_TIME, 0, 0)


def test_reshuffle_keeps_timestamps_windows_and_unknown_panes(make_pipeline):
    with make_pipeline() as pipeline:
        described = (pipeline
                     | beam.Create([("a", 1), ("b", 7), ("c", 12)])
                     | beam.MapTuple(lambda value, at: window.TimestampedValue(value, at))
                     | beam.WindowInto(EveryFiveSeconds())
                     | beam.Reshuffle()
                     | beam.ParDo(DescribeElement()))
        assert_that(described, equal_to([("a", 1.0, (0.0, 5.0), UNKNOWN_PANE),
                                         ("b", 7.0, (5.0, 10.0), UNKNOWN_PANE),
                                         ("c", 12.0, (10.0, 15.0), UNKNOWN_PANE)]))


def test_reshuffle_keeps_the_panes_of_a_grouping(make_pipeline):
    with make_pipeline() as pipeline:
        described = (pipeline
                     | beam.Create([("a", 1), ("a", 2), ("b", 12)])
                     | beam.MapTuple(lambda key, at: window.TimestampedValue((key, at), at))
                     | beam.WindowInto(window.FixedWindows(10))
                     | beam.GroupByKey()
                     | beam.MapTuple(lambda key, values: (key, sorted(values)))
                     | beam.Reshuffle()
                     | beam.ParDo(DescribeElement()))
        assert_that(described, equal_to([
            (("a", [1, 2]), 9.999, (0.0, 10.0), ON_TIME_BATCH_PANE),
            (("b", [12]), 19.999, (10.0, 20.0), ON_TIME_BATCH_PANE)]))


def test_reshuffle_keeps_early_on_time_and_late_panes_in_streaming(make_pipeline):
    events = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("a", 1), 1),
                             window.TimestampedValue(("a", 2), 2)])
              .advance_watermark_to(10)
              .add_elements([window.TimestampedValue(("a", 3), 3)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as pipeline:
        described = (pipeline
                     | events
                     | beam.WindowInto(window.FixedWindows(10),
                                       trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                                       accumulation_mode=trigger.AccumulationMode.DISCARDING,
                                       allowed_lateness=100)
                     | beam.GroupByKey()
                     | beam.MapTuple(lambda key, values: (key, sorted(values)))
                     | beam.Reshuffle()
                     | beam.ParDo(DescribeElement()))
        assert_that(described, equal_to([
            (("a", [1, 2]), 9.999999, (0.0, 10.0), (True, False, PaneInfoTiming.ON_TIME, 0, 0)),
            (("a", [3]), 9.999999, (0.0, 10.0), (False, False, PaneInfoTiming.LATE, 1, 1)),
            ]))


def test_reshuffle_keeps_unknown_panes_and_a_custom_window_in_streaming(make_pipeline):
    events = (test_stream.TestStream()
              .add_elements([window.TimestampedValue("a", 1)])
              .advance_watermark_to(3)
              .add_elements([window.TimestampedValue("b", 7)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as pipeline:
        described = (pipeline
                     | events
                     | beam.WindowInto(EveryFiveSeconds())
                     | beam.Reshuffle()
                     | beam.ParDo(DescribeElement()))
        assert_that(described, equal_to([("a", 1.0, (0.0, 5.0), UNKNOWN_PANE),
                                         ("b", 7.0, (5.0, 10.0), UNKNOWN_PANE)]))


class Tagged(window.BoundedWindow):
    """A window type of the user's own: a tag and an end, encoded by pickling."""

    def __init__(self, tag: str, end) -> None:
        super().__init__(end)
        self.tag = tag

    def __eq__(self, other):
        return type(other) is Tagged and (self.tag, self.end) == (other.tag, other.end)

    def __hash__(self):
        return hash((self.tag, self.end))


class TaggedCoder(coders.Coder):
    """``tag|end micros`` as UTF-8: deterministic, as a window coder must be."""

    def encode(self, value: Tagged) -> bytes:
        return f"{value.tag}|{value.end.micros}".encode("utf-8")

    def decode(self, encoded: bytes) -> Tagged:
        tag, micros = encoded.decode("utf-8").split("|")
        return Tagged(tag, Timestamp(micros=int(micros)))

    def is_deterministic(self) -> bool:
        return True


class TagByParity(window.NonMergingWindowFn):
    """Puts each element in the Tagged window of its timestamp's parity, ending at 100."""

    def assign(self, context):
        return [Tagged("even" if int(context.timestamp) % 2 == 0 else "odd", 100)]

    def get_window_coder(self):
        return TaggedCoder()


def describe_tagged(element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam,
                    pane=beam.DoFn.PaneInfoParam):
    return element, float(timestamp), window.tag, pane.timing


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_reshuffle_keeps_a_window_type_of_the_users_own(make_pipeline, streaming):
    with make_pipeline(streaming=streaming) as pipeline:
        described = (pipeline
                     | beam.Create([1, 2, 3])
                     | beam.Map(lambda at: window.TimestampedValue(at, at))
                     | beam.WindowInto(TagByParity())
                     | beam.Reshuffle()
                     | beam.Map(describe_tagged))
        assert_that(described, equal_to([(1, 1.0, "odd", PaneInfoTiming.UNKNOWN),
                                         (2, 2.0, "even", PaneInfoTiming.UNKNOWN),
                                         (3, 3.0, "odd", PaneInfoTiming.UNKNOWN)]))


def test_reshuffle_keeps_the_panes_elements_were_created_with(make_pipeline):
    # Beam's own util_test: elements created with a pane of each timing keep it exactly.
    no_firing = PaneInfo(True, True, PaneInfoTiming.UNKNOWN, 0, 0)
    on_time_only = PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)
    late_firing = PaneInfo(False, False, PaneInfoTiming.LATE, 1, 1)
    end = GlobalWindow().max_timestamp()
    end = end - (end % 0.001)  # what a millisecond-precision runner can carry
    elements = [WindowedValue("a", MIN_TIMESTAMP, [GlobalWindow()], no_firing),
                WindowedValue("b", Timestamp(0), [GlobalWindow()], on_time_only),
                WindowedValue("c", Timestamp(33), [GlobalWindow()], late_firing),
                WindowedValue("d", end, [GlobalWindow()], no_firing)]
    with make_pipeline() as pipeline:
        reshuffled = pipeline | beam.Create(elements) | beam.Reshuffle()
        assert_that(reshuffled, equal_to([
            TestWindowedValue("a", MIN_TIMESTAMP, [GlobalWindow()], no_firing),
            TestWindowedValue("b", Timestamp(0), [GlobalWindow()], on_time_only),
            TestWindowedValue("c", Timestamp(33), [GlobalWindow()], late_firing),
            TestWindowedValue("d", end, [GlobalWindow()], no_firing)]), reify_windows=True)


def test_reshuffle_of_a_beam_version_before_2_65_drops_the_panes(make_pipeline):
    # Beam's own util_test: pinned to 2.64 (--update_compatibility_version), Reshuffle is that
    # version's GroupByKey expansion, which sets every pane to UNKNOWN (the SparkRunner kept
    # them, as a native shuffle does since 2.65).
    elements = [WindowedValue("b", Timestamp(0), [GlobalWindow()],
                              PaneInfo(True, True, PaneInfoTiming.ON_TIME, 0, 0)),
                WindowedValue("c", Timestamp(33), [GlobalWindow()],
                              PaneInfo(False, False, PaneInfoTiming.LATE, 1, 1))]
    unknown = PaneInfo(True, True, PaneInfoTiming.UNKNOWN, 0, 0)
    with make_pipeline(update_compatibility_version="2.64.0") as pipeline:
        reshuffled = pipeline | beam.Create(elements) | beam.Reshuffle()
        assert_that(reshuffled, equal_to([
            TestWindowedValue("b", Timestamp(0), [GlobalWindow()], unknown),
            TestWindowedValue("c", Timestamp(33), [GlobalWindow()], unknown)]),
            reify_windows=True)


def test_reshuffle_of_pickled_pairs_into_sessions_keeps_their_windows(make_pipeline):
    # Beam's own util_test: the pairs come in under a pickled coder and Beam infers a KV coder
    # for the Reshuffle's output; the SparkRunner failed its job re-encoding them.
    pairs = [(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (1, 4)]
    with make_pipeline() as pipeline:
        sessions = (pipeline
                    | beam.Create(pairs)
                    | beam.Map(lambda pair: window.TimestampedValue(pair, pair[1]))
                    | beam.WindowInto(window.Sessions(gap_size=2)))
        reshuffled = sessions | beam.Reshuffle()
        assert_that(reshuffled | "Describe" >> beam.ParDo(DescribeElement()), equal_to([
            ((key, at), float(at), (float(at), at + 2.0), UNKNOWN_PANE) for key, at in pairs]))
        grouped = (reshuffled
                   | beam.GroupByKey()
                   | beam.MapTuple(lambda key, values: (key, sorted(values)))
                   | "DescribeGroups" >> beam.ParDo(DescribeElement()))
        assert_that(grouped, equal_to([
            ((1, [1, 2]), 3.999, (1.0, 4.0), ON_TIME_BATCH_PANE),
            ((2, [1, 2]), 3.999, (1.0, 4.0), ON_TIME_BATCH_PANE),
            ((3, [1]), 2.999, (1.0, 3.0), ON_TIME_BATCH_PANE),
            ((1, [4]), 5.999, (4.0, 6.0), ON_TIME_BATCH_PANE)]), label="GroupsAfter")


def test_reshuffle_keeps_early_panes_of_a_processing_time_trigger(make_pipeline):
    # Beam's own util_test: EARLY panes of the global window keep their indices.
    events = test_stream.TestStream().advance_watermark_to(0)
    for batch in range(4):
        events = (events.advance_processing_time(100)
                  .add_elements([window.TimestampedValue(("key", 3 * batch + offset), 0)
                                 for offset in range(3)])
                  .advance_watermark_to(100 * (batch + 1)))
    events = events.advance_processing_time(100).advance_watermark_to_infinity()
    end = GlobalWindow().max_timestamp()
    with make_pipeline(streaming=True) as pipeline:
        reshuffled = (pipeline
                      | events
                      | beam.WindowInto(window.GlobalWindows(),
                                        trigger=trigger.Repeatedly(trigger.AfterProcessingTime(1)),
                                        accumulation_mode=trigger.AccumulationMode.DISCARDING)
                      | beam.GroupByKey()
                      | beam.MapTuple(lambda key, values: (key, sorted(values)))
                      | beam.Reshuffle())
        assert_that(reshuffled, equal_to([
            TestWindowedValue(("key", [3 * batch, 3 * batch + 1, 3 * batch + 2]), end,
                              [GlobalWindow()],
                              PaneInfo(batch == 0, False, PaneInfoTiming.EARLY, batch, -1))
            for batch in range(4)]), reify_windows=True)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_reshuffle_keeps_every_window_of_an_element(make_pipeline, streaming):
    with make_pipeline(streaming=streaming) as pipeline:
        described = (pipeline
                     | beam.Create([("a", 1), ("b", 7)])
                     | beam.MapTuple(lambda value, at: window.TimestampedValue(value, at))
                     | beam.WindowInto(window.SlidingWindows(10, 5))
                     | beam.Reshuffle()
                     | beam.ParDo(DescribeElement()))
        assert_that(described, equal_to([("a", 1.0, (-5.0, 5.0), UNKNOWN_PANE),
                                         ("a", 1.0, (0.0, 10.0), UNKNOWN_PANE),
                                         ("b", 7.0, (0.0, 10.0), UNKNOWN_PANE),
                                         ("b", 7.0, (5.0, 15.0), UNKNOWN_PANE)]))


class UpdateEveryMetric(beam.DoFn):
    """Updates a metric of each kind from every element, under the step ``step``."""

    def __init__(self, step: str) -> None:
        self.step = step

    def process(self, element):
        Metrics.counter("conformance", f"{self.step}-count").inc()
        Metrics.distribution("conformance", f"{self.step}-sizes").update(element)
        Metrics.gauge("conformance", f"{self.step}-latest").set(element)
        Metrics.string_set("conformance", f"{self.step}-names").add(f"n{element}")
        Metrics.bounded_trie("conformance", f"{self.step}-paths").add(
            ("root", f"branch{element % 3}", f"leaf{element}"))
        yield element % 4, element


def metric_values(result, step: str) -> dict:
    """Committed values of the metrics ``UpdateEveryMetric(step)`` updates, by kind."""
    found = result.metrics().query(MetricsFilter().with_namespace("conformance"))
    def only(kind, name):
        values = [item.committed for item in found[kind] if item.key.metric.name == name]
        assert len(values) == 1, (kind, name, found[kind])
        return values[0]
    distribution = only("distributions", f"{step}-sizes")
    return {
        "count": only("counters", f"{step}-count"),
        "sizes": (distribution.count, distribution.sum, distribution.min, distribution.max),
        "latest": only("gauges", f"{step}-latest").value,
        "names": set(only("string_sets", f"{step}-names")),
        "paths": only("bounded_tries", f"{step}-paths").get_result(),
    }


ELEMENTS = list(range(1, 41))


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_metrics_of_every_kind_merge_across_bundles_tasks_and_stages(runner, streaming):
    pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(
        streaming=streaming, **({"bundle_size": 3} if runner.__class__.__name__ == "SparkRunner"
                                else {})))
    _ = (pipeline
         | beam.Create(ELEMENTS)
         | beam.Reshuffle()
         | "Before" >> beam.ParDo(UpdateEveryMetric("before"))
         | beam.GroupByKey()
         | beam.FlatMapTuple(lambda key, values: values)
         | "After" >> beam.ParDo(UpdateEveryMetric("after")))
    result = pipeline.run()
    result.wait_until_finish()
    for step in ("before", "after"):
        values = metric_values(result, step)
        assert values["count"] == len(ELEMENTS)
        assert values["sizes"] == (len(ELEMENTS), sum(ELEMENTS), 1, 40)
        assert values["latest"] in ELEMENTS  # the value of the latest update, whichever it was
        assert values["names"] == {f"n{element}" for element in ELEMENTS}
        # A bounded trie's result: each path, flagged False when it was not truncated.
        assert values["paths"] == {("root", f"branch{element % 3}", f"leaf{element}", False)
                                   for element in ELEMENTS}
