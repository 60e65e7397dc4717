"""Splitting (1:N, first match wins, nothing dropped) and merging (M:1)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from transforms.routing import Merge, SplitBy

NUMBERS = [-3, 0, 4, 15, 42, 7, 100]


def _named(outputs):
    """``{name: PCollection}`` -> one PCollection of ``(name, element)``: one assertion."""
    return [output | f"Name{name}" >> beam.Map(lambda element, name=name: (name, element))
            for name, output in outputs.items()] | "Named" >> beam.Flatten()


def test_split_by_keywords_routes_to_the_first_match_and_keeps_the_rest(make_pipeline):
    with make_pipeline() as p:
        split = p | beam.Create(NUMBERS) | SplitBy(
            negative=lambda n: n < 0,
            even=lambda n: n % 2 == 0,   # 0, 4, 42, 100 are even
            big=lambda n: n > 10,        # 42 and 100 are big too, but "even" came first
        )
        routed = _named({"negative": split.negative, "even": split.even,
                         "big": split["big"], "other": split.other})
        assert_that(routed, equal_to([("negative", -3), ("even", 0), ("even", 4),
                                      ("even", 42), ("even", 100), ("big", 15),
                                      ("other", 7)]), label="routed")
        # Nothing dropped: the outputs together are the input.
        assert_that(tuple(split) | beam.Flatten(), equal_to(NUMBERS), label="all")


def test_split_by_mapping_with_a_named_default(make_pipeline):
    with make_pipeline() as p:
        words = p | beam.Create(["apple", "avocado", "banana", "cherry", ""])
        split = words | SplitBy({"a_words": lambda w: w.startswith("a"),
                                 "long_words": lambda w: len(w) > 5},
                                default="rest")
        routed = _named({"a_words": split.a_words, "long_words": split.long_words,
                         "rest": split.rest})
        assert_that(routed, equal_to([("a_words", "apple"), ("a_words", "avocado"),
                                      ("long_words", "banana"), ("long_words", "cherry"),
                                      ("rest", "")]))


def test_split_by_outputs_iterate_default_first_then_in_order(make_pipeline):
    with make_pipeline() as p:
        split = p | beam.Create([1, 2, 3]) | SplitBy(one=lambda n: n == 1, two=lambda n: n == 2)
        outputs = list(split)
        assert outputs == [split.other, split.one, split.two]
        assert_that(_named(dict(enumerate(outputs))), equal_to([(0, 3), (1, 1), (2, 2)]))


def _window_start(event, name, w=beam.DoFn.WindowParam):
    return name, event[0], w.start.micros // 1_000_000


def test_split_by_keeps_timestamps_and_windows(make_pipeline):
    events = [window.TimestampedValue(("a", 1), 5), window.TimestampedValue(("b", 1), 15)]
    with make_pipeline() as p:
        split = (p | beam.Create(events) | beam.WindowInto(window.FixedWindows(10))
                 | SplitBy(is_a=lambda event: event[0] == "a"))
        windows = [output | f"Window{name}" >> beam.Map(_window_start, name)
                   for name, output in (("is_a", split.is_a), ("other", split.other))]
        assert_that(windows | beam.Flatten(), equal_to([("is_a", "a", 0), ("other", "b", 10)]))


def test_a_failing_predicate_names_its_output(make_pipeline):
    with pytest.raises(Exception, match="SplitBy predicate 'ratio' raised ZeroDivisionError"):
        with make_pipeline() as p:
            _ = p | beam.Create([1, 0]) | SplitBy(ratio=lambda n: 1 / n > 0.5)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: SplitBy(), ValueError, "SplitBy needs at least one named predicate"),
        (lambda: SplitBy({}), ValueError, "SplitBy needs at least one named predicate"),
        (lambda: SplitBy(big=3), TypeError, "predicate for output 'big' is not callable: 3"),
        (lambda: SplitBy({"a": len}, b=len), TypeError, "either as one mapping or as keywords"),
        (lambda: SplitBy([("a", len)]), TypeError, "predicates must be a mapping"),
        (lambda: SplitBy(other=len), ValueError,
         "output 'other' has the same name as the default output"),
        (lambda: SplitBy({"a": len}, default="a"), ValueError,
         "output 'a' has the same name as the default output"),
        (lambda: SplitBy({"not valid": len}), ValueError,
         "output name 'not valid' must be a Python identifier"),
        (lambda: SplitBy({"class": len}), ValueError, "must be a Python identifier"),
        (lambda: SplitBy(pipeline=len), ValueError, "output name 'pipeline' is reserved"),
        (lambda: SplitBy(_hidden=len), ValueError, "output name '_hidden' is reserved"),
        (lambda: SplitBy({"a": len}, default="producer"), ValueError,
         "default output name 'producer' is reserved"),
    ],
)
def test_split_by_invalid_arguments_are_rejected_at_construction(make, error, message):
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value)


def test_merge_flattens_tuples_lists_and_dicts(make_pipeline):
    with make_pipeline() as p:
        first = p | "First" >> beam.Create([1, 2])
        second = p | "Second" >> beam.Create([3])
        third = p | "Third" >> beam.Create([4, 5])
        merged = _named({
            "tuple": (first, second) | "MergeTuple" >> Merge(),
            "list": [first, second, third] | "MergeList" >> Merge(),
            "dict": {"a": first, "c": third} | "MergeDict" >> Merge(),
            "one": (second,) | "MergeOne" >> Merge(),
        })
        assert_that(merged, equal_to(
            [("tuple", n) for n in (1, 2, 3)] + [("list", n) for n in (1, 2, 3, 4, 5)]
            + [("dict", n) for n in (1, 2, 4, 5)] + [("one", 3)]))


def test_merge_keeps_windows_so_a_windowed_aggregation_spans_inputs(make_pipeline):
    def stamped(label, pairs):
        return label >> (beam.Create(pairs)
                         | beam.MapTuple(lambda value, t: window.TimestampedValue(("k", value), t)))

    with make_pipeline() as p:
        left = (p | stamped("Left", [(1, 1), (10, 12)])
                | "WindowLeft" >> beam.WindowInto(window.FixedWindows(10)))
        right = (p | stamped("Right", [(100, 3)])
                 | "WindowRight" >> beam.WindowInto(window.FixedWindows(10)))
        sums = ((left, right) | Merge() | beam.CombinePerKey(sum)
                | beam.Map(lambda kv, w=beam.DoFn.WindowParam:
                           (kv[1], w.start.micros // 1_000_000)))
        assert_that(sums, equal_to([(101, 0), (10, 10)]))


def test_merge_rejects_no_inputs_mixed_windows_and_non_pcollections(make_pipeline):
    p = make_pipeline()
    fixed = p | "Fixed" >> beam.Create([1]) | "Into10" >> beam.WindowInto(
        window.FixedWindows(10))
    sliding = p | "Sliding" >> beam.Create([2]) | "Into5" >> beam.WindowInto(
        window.SlidingWindows(10, 5))
    with pytest.raises(ValueError, match="Merge inputs have different windows"):
        _ = (fixed, sliding) | "MergeMixed" >> Merge()
    with pytest.raises(ValueError, match="Merge needs at least one PCollection"):
        Merge().expand(())
    with pytest.raises(ValueError, match="requires a pipeline"):
        _ = () | "MergeNothing" >> Merge()
    with pytest.raises(TypeError, match="Merge takes a tuple, list or dict of PCollections"):
        _ = fixed | "MergeSingle" >> Merge()
