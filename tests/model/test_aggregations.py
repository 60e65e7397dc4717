"""The *what*: every aggregation, per key and globally, in the global window and in windows."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window

from transforms.aggregations import (
    CountGlobally,
    CountPerKey,
    MaxFn,
    MaxGlobally,
    MaxPerKey,
    MeanGlobally,
    MeanPerKey,
    MinFn,
    MinGlobally,
    MinPerKey,
    SumFn,
    SumGlobally,
    SumPerKey,
    TopGlobally,
    TopPerKey,
)
from triggers.panes import DescribePanes, pane_record

SCORES = [("red", 3), ("blue", 2), ("red", 4), ("blue", 7), ("red", -1), ("green", 5)]
NUMBERS = [4, 8, 1, 9, 3]


# --- CombineFns as the runner drives them when lifted: partial accumulators, then merge. ---


@pytest.mark.parametrize(
    "combine_fn, expected",
    [(SumFn(), 25), (MinFn(), 1), (MaxFn(), 9)],
    ids=["sum", "min", "max"],
)
def test_combine_fn_partial_accumulators_merge_to_the_whole(combine_fn, expected):
    def accumulate(values):
        accumulator = combine_fn.create_accumulator()
        for value in values:
            accumulator = combine_fn.add_input(accumulator, value)
        return accumulator

    coder = combine_fn.get_accumulator_coder()
    # Partials cross a shuffle encoded; an empty partial (a bundle without this key) too.
    partials = [coder.decode(coder.encode(accumulate(part)))
                for part in ([4, 8], [], [1, 9, 3])]
    merged = combine_fn.merge_accumulators(partials)
    assert combine_fn.extract_output(merged) == expected
    assert combine_fn.apply(NUMBERS) == expected


@pytest.mark.parametrize(
    "combine_fn, expected",
    [(SumFn(), 0), (MinFn(), None), (MaxFn(), None)],
    ids=["sum", "min", "max"],
)
def test_combine_fn_of_no_elements(combine_fn, expected):
    assert combine_fn.apply([]) == expected
    empty = combine_fn.merge_accumulators(
        [combine_fn.create_accumulator(), combine_fn.create_accumulator()]
    )
    assert combine_fn.extract_output(empty) == expected


def test_min_and_max_rank_by_key():
    words = ["pear", "fig", "banana"]
    assert MinFn(key=len).apply(words) == "fig"
    assert MaxFn(key=len).apply(words) == "banana"
    assert MinFn().apply(words) == "banana"  # alphabetical without a key


def test_invalid_arguments_are_rejected_at_construction():
    with pytest.raises(ValueError, match="n must be >= 1.*got 0"):
        TopPerKey(0)
    with pytest.raises(ValueError, match="n must be >= 1.*got -2"):
        TopGlobally(-2)
    with pytest.raises(TypeError, match="n must be an int"):
        TopGlobally("3")
    with pytest.raises(TypeError, match="n must be an int"):
        TopPerKey(True)
    with pytest.raises(TypeError, match="key must be a callable"):
        TopPerKey(2, key="score")
    with pytest.raises(TypeError, match="key must be a callable"):
        MinFn(key=3)


# --- Composites in batch, global window. ---


def _tagged(results):
    """Flatten ``{name: PCollection}`` into ``(name, element)`` pairs: one assertion for all."""
    return [results[name] | f"Tag{name}" >> beam.Map(lambda value, name=name: (name, value))
            for name in results] | "All" >> beam.Flatten()


def test_per_key_aggregations(make_pipeline):
    with make_pipeline() as p:
        scores = p | beam.Create(SCORES)
        results = _tagged({
            "sum": scores | SumPerKey(),
            "count": scores | CountPerKey(),
            "mean": scores | MeanPerKey(),
            "min": scores | MinPerKey(),
            "max": scores | MaxPerKey(),
            "top": scores | TopPerKey(2),
            "bottom": scores | "Bottom" >> TopPerKey(2, reverse=True),
            "top_by_key": scores | "ByDistanceFrom3" >> TopPerKey(1, key=lambda v: abs(v - 3)),
            "max_by_key": scores | "ByNegation" >> MaxPerKey(key=lambda v: -v),
        })
        assert_that(results, equal_to([
            ("sum", ("red", 6)), ("sum", ("blue", 9)), ("sum", ("green", 5)),
            ("count", ("red", 3)), ("count", ("blue", 2)), ("count", ("green", 1)),
            ("mean", ("red", 2.0)), ("mean", ("blue", 4.5)), ("mean", ("green", 5.0)),
            ("min", ("red", -1)), ("min", ("blue", 2)), ("min", ("green", 5)),
            ("max", ("red", 4)), ("max", ("blue", 7)), ("max", ("green", 5)),
            ("top", ("red", [4, 3])), ("top", ("blue", [7, 2])), ("top", ("green", [5])),
            ("bottom", ("red", [-1, 3])), ("bottom", ("blue", [2, 7])),
            ("bottom", ("green", [5])),
            ("top_by_key", ("red", [-1])), ("top_by_key", ("blue", [7])),
            ("top_by_key", ("green", [5])),
            ("max_by_key", ("red", -1)), ("max_by_key", ("blue", 2)),
            ("max_by_key", ("green", 5)),
        ]))


def test_global_aggregations(make_pipeline):
    with make_pipeline() as p:
        numbers = p | beam.Create(NUMBERS)
        words = p | "Words" >> beam.Create(["pear", "fig", "banana"])
        results = _tagged({
            "sum": numbers | SumGlobally(),
            "count": numbers | CountGlobally(),
            "mean": numbers | MeanGlobally(),
            "min": numbers | MinGlobally(),
            "max": numbers | MaxGlobally(),
            "top": numbers | TopGlobally(3),
            "smallest": numbers | "Smallest" >> TopGlobally(2, reverse=True),
            "longest": words | "Longest" >> MaxGlobally(key=len),
            "shortest": words | "Shortest" >> MinGlobally(key=len),
        })
        assert_that(results, equal_to([
            ("sum", 25), ("count", 5), ("mean", 5.0), ("min", 1), ("max", 9),
            ("top", [9, 8, 4]), ("smallest", [1, 3]), ("longest", "banana"),
            ("shortest", "fig"),
        ]))


def test_global_aggregations_of_an_empty_global_window_emit_defaults(make_pipeline):
    with make_pipeline() as p:
        empty = p | beam.Create([])
        results = _tagged({
            "sum": empty | SumGlobally(),
            "count": empty | CountGlobally(),
            # nan != nan: compare its text.
            "mean": empty | MeanGlobally() | beam.Map(repr),
            "min": empty | MinGlobally(),
            "max": empty | MaxGlobally(),
            "top": empty | TopGlobally(2),
        })
        assert_that(results, equal_to([
            ("sum", 0), ("count", 0), ("mean", "nan"), ("min", None), ("max", None),
            ("top", []),
        ]))


# --- In event-time windows: Globally switches to without_defaults. ---


def test_global_aggregations_in_fixed_windows_batch(make_pipeline):
    timestamped = [window.TimestampedValue(n, t) for n, t in [(4, 1), (8, 2), (1, 12), (9, 25)]]
    with make_pipeline() as p:
        numbers = (p | beam.Create(timestamped)
                   | beam.WindowInto(window.FixedWindows(10)))
        assert_that(numbers | SumGlobally(), equal_to([12, 1, 9]), label="sum")
        assert_that(numbers | MinGlobally(), equal_to([4, 1, 9]), label="min")
        assert_that(numbers | TopGlobally(1), equal_to([[8], [1], [9]]), label="top")


def test_global_and_per_key_aggregations_panes_in_fixed_windows(make_pipeline):
    stream = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("red", 3), 1),
                             window.TimestampedValue(("blue", 5), 4)])
              .add_elements([window.TimestampedValue(("red", 4), 12)])
              .advance_watermark_to(20)
              .add_elements([window.TimestampedValue(("red", 2), 25)])
              .advance_watermark_to_infinity())

    def on_time(key, value, start):
        # is_last is False: in streaming the default trigger (Repeatedly(AfterWatermark))
        # never finishes, so Beam cannot know a pane is the last one.
        return pane_record(key, value, window=(start, start + 10),
                           timestamp=round(start + 9.999999, 6),
                           timing="ON_TIME", index=0, is_first=True, is_last=False)

    with make_pipeline(streaming=True) as p:
        scores = p | stream | beam.WindowInto(window.FixedWindows(10))
        assert_that(
            scores | SumPerKey() | "DescribePerKey" >> DescribePanes(),
            equal_to([on_time("red", 3, 0), on_time("blue", 5, 0), on_time("red", 4, 10),
                      on_time("red", 2, 20)]),
            label="per_key")
        assert_that(
            scores | beam.Values() | SumGlobally()
            | "DescribeGlobal" >> DescribePanes(keyed=False),
            equal_to([on_time(None, 8, 0), on_time(None, 4, 10), on_time(None, 2, 20)]),
            label="global")


def test_global_aggregation_in_a_triggered_global_window_emits_every_pane(make_pipeline):
    # Defaults would be injected through a side input that fires once: without_defaults
    # is what lets each trigger firing through.
    stream = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(1, 1), window.TimestampedValue(2, 2)])
              .add_elements([window.TimestampedValue(10, 3), window.TimestampedValue(20, 4)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        sums = (p | stream
                | beam.WindowInto(window.GlobalWindows(),
                                  trigger=trigger.Repeatedly(trigger.AfterCount(2)),
                                  accumulation_mode=trigger.AccumulationMode.DISCARDING)
                | SumGlobally()
                | beam.Map(lambda total, pane=beam.DoFn.PaneInfoParam: (total, pane.index)))
        assert_that(sums, equal_to([(3, 0), (30, 1)]))
