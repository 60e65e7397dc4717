"""The SparkRunner gives the DirectRunner's results for batch pipelines.

Every test runs on both runners (fixtures from ``spark_fixtures``) against one explicit
expectation, so a difference between the runners fails on the runner that differs:
grouping, lifted combining, windows and panes, merging windows, flatten, side inputs,
tagged outputs.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window

from triggers.panes import DescribePanes, pane_record

from spark_fixtures import spark_session  # noqa: F401 (fixture)


class Stamped(beam.PTransform):
    """Create elements with event timestamps from (element, seconds) pairs."""

    def __init__(self, records):
        super().__init__()
        self._records = records

    def expand(self, pbegin):
        return (
            pbegin
            | beam.Create(self._records)
            | beam.MapTuple(lambda element, seconds: window.TimestampedValue(element, seconds))
        )


def test_group_by_key(make_pipeline):
    with make_pipeline() as p:
        grouped = (
            p
            | beam.Create([("a", 1), ("b", 2), ("a", 3), ("c", 4), ("a", 5)])
            | beam.Map(lambda kv: (kv[0], kv[1] * 10))
            | beam.GroupByKey()
            | beam.MapTuple(lambda key, values: (key, sorted(values)))
        )
        assert_that(grouped, equal_to([("a", [10, 30, 50]), ("b", [20]), ("c", [40])]))


def _hot_key_elements(shard):
    """75,000 (key, (shard, i)) pairs: two in three under the key "hot"."""
    for i in range(75_000):
        yield ("hot" if i % 3 else f"cold-{i % 7}"), (shard, i)


class _CountSumAndPane(beam.DoFn):
    def process(self, key_and_values, timestamp=beam.DoFn.TimestampParam,
                pane=beam.DoFn.PaneInfoParam):
        key, values = key_and_values
        count = total = 0
        shards = set()
        for shard, i in values:
            count += 1
            total += i
            shards.add(shard)
        yield key, count, total, sorted(shards), timestamp.micros // 1000, (
            pane.is_first, pane.is_last, pane.timing, pane.index)


@pytest.mark.parametrize("windowed", [False, True], ids=["global", "fixed-windows"])
def test_group_by_key_with_a_hot_key(make_pipeline, windowed):
    """One key holds 200,000 values from four inputs: more than a map task holds before it
    sends a key's values on (runners/spark/execution/shuffle.py), so the key's pane is put together
    from several chunks of several tasks. In the global window the pane is the single
    ON_TIME one at its end, first and last; in fixed windows (values with an even i in
    [0, 10), the others in [10, 20): 100,000 of the hot key in each) each window's pane is
    the on-time firing at the window's end, first and not last: as on the DirectRunner."""
    expected = {}
    for shard in range(4):
        for key, (_, i) in _hot_key_elements(shard):
            group = (key, i % 2) if windowed else (key, None)
            count, total = expected.get(group, (0, 0))
            expected[group] = (count + 1, total + i)
    # in milliseconds: Beam's coders carry timestamps in milliseconds
    end_of_global_window = window.GlobalWindow().max_timestamp().micros // 1000
    with make_pipeline() as p:
        elements = (
            p
            | beam.Create(range(4))
            | beam.Reshuffle()
            | beam.FlatMap(_hot_key_elements)
        )
        if windowed:
            elements = (
                elements
                | beam.Map(lambda kv: window.TimestampedValue(kv, 10 * (kv[1][1] % 2) + 5))
                | beam.WindowInto(window.FixedWindows(10))
            )
        grouped = elements | beam.GroupByKey() | beam.ParDo(_CountSumAndPane())
        assert_that(grouped, equal_to([
            (key, count, total, [0, 1, 2, 3],
             (10 * half + 10) * 1000 - 1 if windowed else end_of_global_window,
             (True, not windowed, 1, 0))  # PaneInfoTiming.ON_TIME == 1
            for (key, half), (count, total) in expected.items()]))
    assert max(count for count, _ in expected.values()) == (100_000 if windowed else 200_000)


def test_combiners_lifted_and_global(make_pipeline):
    words = ["red", "blue", "red", "green", "red", "blue"] * 7
    with make_pipeline() as p:
        source = p | beam.Create(words)
        counts = source | "Count" >> beam.combiners.Count.PerElement()
        sums = source | beam.Map(lambda w: (w, len(w))) | beam.CombinePerKey(sum)
        means = source | "Pair" >> beam.Map(lambda w: (w[0], len(w))) | beam.combiners.Mean.PerKey()
        total = source | "Total" >> beam.combiners.Count.Globally()
        assert_that(counts, equal_to([("red", 21), ("blue", 14), ("green", 7)]), label="counts")
        assert_that(sums, equal_to([("red", 63), ("blue", 56), ("green", 35)]), label="sums")
        assert_that(means, equal_to([("r", 3.0), ("b", 4.0), ("g", 5.0)]), label="means")
        assert_that(total, equal_to([42]), label="total")


def test_fixed_windows_panes(make_pipeline):
    events = [(("k", 1), 1), (("k", 2), 9), (("k", 4), 12), (("j", 8), 15), (("k", 16), 31)]
    with make_pipeline() as p:
        panes = (
            p
            | Stamped(events)
            | beam.WindowInto(window.FixedWindows(10))
            | beam.CombinePerKey(sum)
            | DescribePanes()
        )
        # The watermark trigger never finishes, so the pane is not the last; the end-of-window
        # timestamp is in milliseconds, as Beam's windowed value coder carries it.
        on_time = dict(timing="ON_TIME", index=0, is_first=True, is_last=False)
        assert_that(panes, equal_to([
            pane_record("k", 3, window=(0, 10), timestamp=9.999, **on_time),
            pane_record("k", 4, window=(10, 20), timestamp=19.999, **on_time),
            pane_record("j", 8, window=(10, 20), timestamp=19.999, **on_time),
            pane_record("k", 16, window=(30, 40), timestamp=39.999, **on_time),
        ]))


def test_sliding_windows_assign_each_element_to_several_windows(make_pipeline):
    with make_pipeline() as p:
        sums = (
            p
            | Stamped([(("k", 1), 1), (("k", 3), 3), (("k", 7), 7), (("k", 12), 12)])
            | beam.WindowInto(window.SlidingWindows(10, 5))
            | beam.CombinePerKey(sum)
            | DescribePanes()
            | beam.Map(lambda record: (record["window"]["start"], record["value"]))
        )
        assert_that(sums, equal_to([(-5.0, 4), (0.0, 11), (5.0, 19), (10.0, 12)]))


def test_early_firing_trigger_in_batch(make_pipeline):
    # In batch the whole input is there before the watermark passes a window: the early
    # trigger fires once with every element, then the watermark fires a final, empty
    # ON_TIME pane (discarding mode), stamped with the earliest element's timestamp.
    with make_pipeline() as p:
        panes = (
            p
            | Stamped([(("k", 1), 1), (("k", 3), 3), (("k", 7), 7), (("k", 12), 12)])
            | beam.WindowInto(
                window.FixedWindows(10),
                trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST)
            | beam.GroupByKey()
            | beam.MapTuple(lambda key, values: (key, sorted(values)))
            | DescribePanes()
        )
        early = dict(timing="EARLY", index=0, is_first=True, is_last=False)
        final = dict(timing="ON_TIME", index=1, is_first=False, is_last=True)
        assert_that(panes, equal_to([
            pane_record("k", [1, 3, 7], window=(0, 10), timestamp=1.0, **early),
            pane_record("k", [12], window=(10, 20), timestamp=12.0, **early),
            pane_record("k", [], window=(0, 10), timestamp=1.0, **final),
            pane_record("k", [], window=(10, 20), timestamp=12.0, **final),
        ]))


def test_sessions_merge(make_pipeline):
    events = [(("u", "a"), 1), (("u", "b"), 4), (("u", "c"), 20), (("v", "d"), 2), (("u", "e"), 7)]
    with make_pipeline() as p:
        panes = (
            p
            | Stamped(events)
            | beam.WindowInto(window.Sessions(5))
            | beam.GroupByKey()
            | beam.MapTuple(lambda key, values: (key, "".join(sorted(values))))
            | DescribePanes()
        )
        on_time = dict(timing="ON_TIME", index=0, is_first=True, is_last=False)
        assert_that(panes, equal_to([
            pane_record("u", "abe", window=(1, 12), timestamp=11.999, **on_time),
            pane_record("u", "c", window=(20, 25), timestamp=24.999, **on_time),
            pane_record("v", "d", window=(2, 7), timestamp=6.999, **on_time),
        ]))


class TouchingIntervals(window.WindowFn):
    """A user-defined merging WindowFn: [t, t + 3) per element, merged where they touch.

    Not one of Beam's standard window functions, so it travels pickled in the pipeline.
    """

    def assign(self, context):
        return [window.IntervalWindow(context.timestamp, context.timestamp + 3)]

    def merge(self, merge_context):
        windows = sorted(merge_context.windows, key=lambda w: w.start)
        group = [windows[0]]
        for current in windows[1:]:
            if current.start <= max(w.end for w in group):
                group.append(current)
            else:
                self._merge(merge_context, group)
                group = [current]
        self._merge(merge_context, group)

    @staticmethod
    def _merge(merge_context, group):
        if len(group) > 1:
            merged = window.IntervalWindow(
                min(w.start for w in group), max(w.end for w in group))
            merge_context.merge(group, merged)

    def get_window_coder(self):
        return IntervalWindowCoder()


def test_user_defined_merging_window_fn(make_pipeline):
    with make_pipeline() as p:
        merged = (
            p
            | Stamped([(("k", "a"), 0), (("k", "b"), 3), (("k", "c"), 10), (("j", "d"), 1)])
            | beam.WindowInto(TouchingIntervals())
            | beam.GroupByKey()
            | beam.MapTuple(lambda key, values: (key, "".join(sorted(values))))
            | DescribePanes()
            | beam.Map(lambda r: (r["key"], r["value"], r["window"]["start"], r["window"]["end"]))
        )
        assert_that(merged, equal_to([
            ("k", "ab", 0.0, 6.0), ("k", "c", 10.0, 13.0), ("j", "d", 1.0, 4.0)]))


def test_flatten_and_tagged_outputs(make_pipeline):
    class SplitParity(beam.DoFn):
        def process(self, number):
            if number % 2:
                yield beam.pvalue.TaggedOutput("odd", number)
            else:
                yield number

    with make_pipeline() as p:
        numbers = p | beam.Create(range(10))
        parts = numbers | beam.ParDo(SplitParity()).with_outputs("odd", main="even")
        more = p | "More" >> beam.Create([100, 101])
        merged = (parts.even, parts.odd, more) | beam.Flatten()
        twice = (more, more) | "Twice" >> beam.Flatten()
        assert_that(twice, equal_to([100, 100, 101, 101]), label="twice")
        assert_that(parts.odd, equal_to([1, 3, 5, 7, 9]), label="odd")
        assert_that(parts.even, equal_to([0, 2, 4, 6, 8]), label="even")
        assert_that(merged, equal_to(list(range(10)) + [100, 101]), label="merged")


def test_side_inputs(make_pipeline):
    with make_pipeline() as p:
        numbers = p | "Numbers" >> beam.Create([1, 2, 3])
        factor = p | "Factor" >> beam.Create([10])
        names = p | "Names" >> beam.Create([(1, "one"), (2, "two"), (3, "three")])
        extras = p | "Extras" >> beam.Create(["x", "y"])
        tags = p | "Tags" >> beam.Create([(1, "odd"), (1, "first"), (2, "even")])
        described = numbers | beam.Map(
            lambda n, f, table, extra, seen, tagged: (
                n * f, table[n], sorted(extra), sorted(seen), sorted(tagged[n])),
            f=beam.pvalue.AsSingleton(factor),
            table=beam.pvalue.AsDict(names),
            extra=beam.pvalue.AsList(extras),
            seen=beam.pvalue.AsIter(extras),
            tagged=beam.pvalue.AsMultiMap(tags),
        )
        assert_that(described, equal_to([
            (10, "one", ["x", "y"], ["x", "y"], ["first", "odd"]),
            (20, "two", ["x", "y"], ["x", "y"], ["even"]),
            (30, "three", ["x", "y"], ["x", "y"], []),
        ]))


def test_windowed_side_input(make_pipeline):
    with make_pipeline() as p:
        main = (
            p
            | "Main" >> Stamped([("a", 1), ("b", 12), ("c", 25)])
            | "WindowMain" >> beam.WindowInto(window.FixedWindows(10))
        )
        limits = (
            p
            | "Limits" >> Stamped([(100, 5), (200, 15), (201, 16)])
            | "WindowLimits" >> beam.WindowInto(window.FixedWindows(10))
        )
        joined = main | beam.Map(lambda e, side: (e, sorted(side)), side=beam.pvalue.AsList(limits))
        assert_that(joined, equal_to([("a", [100]), ("b", [200, 201]), ("c", [])]))


def test_empty_input(make_pipeline):
    with make_pipeline() as p:
        grouped = p | beam.Create([]) | beam.Map(lambda x: (x, 1)) | beam.GroupByKey()
        total = p | "Empty" >> beam.Create([]) | beam.CombineGlobally(sum)
        assert_that(grouped, equal_to([]), label="grouped")
        assert_that(total, equal_to([0]), label="total")


def test_a_pipeline_may_end_in_a_reshuffle(make_pipeline):
    """Nothing reads the Reshuffle's output: its stage writes nothing (planning used to
    stop with StopIteration looking for the stage's output)."""
    with make_pipeline() as p:
        numbers = p | beam.Create([1, 2, 3])
        numbers | "Unread" >> beam.Reshuffle()
        assert_that(numbers | beam.Map(lambda x: x * 2), equal_to([2, 4, 6]))
