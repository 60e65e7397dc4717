"""Side inputs in streaming: a main element waits until its side input is ready, on every
runner.

A main-input element whose side input is not yet ready for the side window its window maps
to is held (and holds the watermark downstream) until the side input's watermark passes the
end of that window, as Beam's DirectRunner blocks such a bundle; then it sees every pane the
side input produced for the window. These are Beam's ``SideInputsTest.
test_multi_triggered_gbk_side_input`` (``apache_beam/transforms/sideinputs_test.py``) written
as our own test, and its variants.
"""

from __future__ import annotations

import json
import os
import uuid

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp

DISCARDING = trigger.AccumulationMode.DISCARDING
ACCUMULATING = trigger.AccumulationMode.ACCUMULATING


class Record(beam.DoFn):
    """A main element with its timestamp and the side input it sees."""

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                side=beam.DoFn.SideInputParam):
        if isinstance(side, dict):
            side = sorted(side.items())
        elif isinstance(side, list):
            side = list(side)
        yield element, timestamp, side


def mixed_stream(side_elements) -> test_stream.TestStream:
    """Main ``a1`` at 3 (watermark 3) and ``a2`` at 8 (watermark 8); then the side input's
    elements, after the main ones; then both watermarks to the end."""
    stream = (test_stream.TestStream()
              .advance_watermark_to(3, tag="main").add_elements(["a1"], tag="main")
              .advance_watermark_to(8, tag="main").add_elements(["a2"], tag="main"))
    for batch in side_elements:
        stream = stream.add_elements(batch, tag="side")
    return (stream.advance_watermark_to_infinity(tag="main")
            .advance_watermark_to_infinity(tag="side"))


def side_sums(side, mode):
    return (side
            | "Side windows" >> beam.WindowInto(
                window.FixedWindows(5), trigger=trigger.AfterWatermark(
                    early=trigger.AfterCount(1)), accumulation_mode=mode)
            | beam.CombinePerKey(sum))


def main_windows(main):
    return main | "Main windows" >> beam.WindowInto(window.FixedWindows(5))


def test_a_main_element_waits_for_every_pane_of_its_side_window(make_pipeline):
    """Beam's case: the side input fires an early pane (100, then 400) and an empty on-time
    pane (0) per window; each main element sees both panes of its window."""
    with make_pipeline(streaming=True) as pipeline:
        stream = pipeline | mixed_stream([[window.TimestampedValue(("k", 100), 2)],
                                          [window.TimestampedValue(("k", 400), 7)]])
        values = side_sums(stream["side"], DISCARDING) | "Values" >> beam.Values()
        records = main_windows(stream["main"]) | beam.ParDo(Record(),
                                                            beam.pvalue.AsList(values))
        assert_that(records, equal_to([("a1", Timestamp(3), [100, 0]),
                                       ("a2", Timestamp(8), [400, 0])]))


def test_a_main_element_whose_side_window_gets_no_data_sees_an_empty_side_input(
        make_pipeline):
    """No side data for either window: once the side watermark passes them, the main
    elements see empty lists (they do not wait forever)."""
    with make_pipeline(streaming=True) as pipeline:
        stream = pipeline | mixed_stream([[window.TimestampedValue(("k", 5), 12)]])
        values = side_sums(stream["side"], DISCARDING) | "Values" >> beam.Values()
        records = main_windows(stream["main"]) | beam.ParDo(Record(),
                                                            beam.pvalue.AsList(values))
        assert_that(records, equal_to([("a1", Timestamp(3), []), ("a2", Timestamp(8), [])]))


@pytest.mark.parametrize("mode", [DISCARDING, ACCUMULATING], ids=["discarding", "accumulating"])
def test_several_panes_of_a_side_input_as_a_list_and_as_a_dict(make_pipeline, mode):
    """Two early panes and the on-time pane per window, keyed; read whole (AsList) and by
    key (AsDict, one key per pane: the pane's index)."""
    batches = [[window.TimestampedValue(("k", 100), 2)], [window.TimestampedValue(("k", 1), 3)],
               [window.TimestampedValue(("k", 400), 7)]]
    with make_pipeline(streaming=True) as pipeline:
        stream = pipeline | mixed_stream(batches)
        sums = side_sums(stream["side"], mode)
        values = sums | "Values" >> beam.Values()
        by_pane = sums | "ByPane" >> beam.ParDo(PaneKeyed())
        main = main_windows(stream["main"])
        as_list = main | "AsList" >> beam.ParDo(Record(), beam.pvalue.AsList(values))
        as_dict = main | "AsDict" >> beam.ParDo(Record(), beam.pvalue.AsDict(by_pane))
        if mode == DISCARDING:
            first, second = [100, 1, 0], [400, 0]
        else:
            first, second = [100, 101, 101], [400, 400]
        assert_that(as_list, equal_to([("a1", Timestamp(3), first),
                                       ("a2", Timestamp(8), second)]), label="CheckList")
        assert_that(as_dict, equal_to([
            ("a1", Timestamp(3), list(enumerate(first))),
            ("a2", Timestamp(8), list(enumerate(second)))]), label="CheckDict")


class PaneKeyed(beam.DoFn):
    def process(self, element, pane=beam.DoFn.PaneInfoParam):
        yield pane.index, element[1]


def test_a_singleton_side_input_of_one_pane_per_window(make_pipeline):
    with make_pipeline(streaming=True) as pipeline:
        stream = pipeline | mixed_stream([[window.TimestampedValue(("k", 100), 2),
                                           window.TimestampedValue(("k", 20), 4)],
                                          [window.TimestampedValue(("k", 400), 7)]])
        totals = (stream["side"]
                  | "Side windows" >> beam.WindowInto(window.FixedWindows(5))
                  | beam.CombinePerKey(sum) | "Values" >> beam.Values())
        records = main_windows(stream["main"]) | beam.ParDo(Record(),
                                                            beam.pvalue.AsSingleton(totals))
        assert_that(records, equal_to([("a1", Timestamp(3), 120), ("a2", Timestamp(8), 400)]))


def global_side_panes(stream, trigger_fn):
    """The side input: sums per key in the global window, a pane each time ``trigger_fn``
    fires."""
    return (stream
            | "Side windows" >> beam.WindowInto(window.GlobalWindows(), trigger=trigger_fn,
                                                accumulation_mode=DISCARDING)
            | beam.CombinePerKey(sum))


def seen_by_a_main_element(pipeline, side):
    """One main element in the global window (as Beam's ``CombineGlobally`` injects its
    default) and every side-input value it sees."""
    return (pipeline
            | "Main" >> beam.Create(["main"])
            | beam.Map(lambda element, values: (element, sorted(values)),
                       beam.pvalue.AsList(side)))


def test_a_main_element_waiting_for_the_global_window_sees_panes_of_one_batch_and_later(
        make_pipeline):
    """Three panes fire in one micro-batch (one a key), two in the next, while a main
    element in the global window waits for the side input to be done (its watermark at the
    end of time); then it sees all five, as on the DirectRunner, where its bundle waits
    for the same watermark."""
    stream = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(pair, 1)
                             for pair in [("a", 1), ("b", 2), ("c", 3)]])
              .add_elements([window.TimestampedValue(pair, 2) for pair in [("a", 10), ("b", 20)]])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as pipeline:
        sums = global_side_panes(pipeline | stream, trigger.Repeatedly(trigger.AfterCount(1)))
        assert_that(seen_by_a_main_element(pipeline, sums), equal_to([
            ("main", [("a", 1), ("a", 10), ("b", 2), ("b", 20), ("c", 3)])]))


def test_a_global_combines_default_sees_one_pane_per_batch_of_its_input(make_pipeline):
    """Beam's ``CombineGlobally`` with its default on an unbounded input (``combiners_test``'s
    ``test_combine_globally_for_unbounded_source_with_default``): the default is a main
    element reading the combine's panes as a side input, and Beam asserts it sees at most
    one. With ``Repeatedly(AfterCount(2))`` and the input in two micro-batches, three
    elements then two, the side input fires two panes, and the main element, released when
    the side input is done, sees both, on the DirectRunner as on Spark: how many panes it
    sees is how the input was split into batches, not when it is released (Beam's test
    passes where all its ticks arrive in one batch, one pane)."""
    stream = (test_stream.TestStream()
              .add_elements([window.TimestampedValue(("c", 1), 1)] * 3)
              .add_elements([window.TimestampedValue(("c", 1), 2)] * 2)
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as pipeline:
        counts = (global_side_panes(pipeline | stream, trigger.Repeatedly(trigger.AfterCount(2)))
                  | "Counts" >> beam.Values())
        assert_that(seen_by_a_main_element(pipeline, counts), equal_to([("main", [2, 3])]))


class WriteRecord(beam.DoFn):
    """Each record as a JSON file of its own."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def process(self, record):
        element, timestamp, side = record
        with open(os.path.join(self.directory, uuid.uuid4().hex + ".json"), "w") as file:
            json.dump([element, float(timestamp), side], file)


def read_records(directory):
    found = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as file:
            element, timestamp, side = json.load(file)
        found.append((element, timestamp, side))
    return sorted(found)


def _beams_case(pipeline, directory):
    stream = pipeline | mixed_stream([[window.TimestampedValue(("k", 100), 2)],
                                      [window.TimestampedValue(("k", 400), 7)]])
    values = side_sums(stream["side"], DISCARDING) | "Values" >> beam.Values()
    _ = (main_windows(stream["main"])
         | beam.ParDo(Record(), beam.pvalue.AsList(values))
         | beam.ParDo(WriteRecord(directory)))


@pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)
def test_held_main_elements_survive_a_checkpoint_and_restart(runner, tmp_path):
    """SparkRunner only (checkpoints are its own). Run 1 stops after its fifth batch, both
    main elements held (their side windows are not complete); run 2 resumes from the
    checkpoint and releases them with every pane of their side windows."""
    import json
    import os

    from runners.spark.state.checkpoint import latest_checkpoint, read_manifest

    def run(directory, **options):
        os.makedirs(directory)
        pipeline = beam.Pipeline(runner=runner, options=PipelineOptions(
            [], streaming=True, checkpoint_dir=str(tmp_path / "checkpoints"), **options))
        _beams_case(pipeline, str(directory))
        pipeline.run().wait_until_finish()
        return sorted(tuple(json.load(open(directory / name))[:2]) + (
            json.load(open(directory / name))[2],) for name in os.listdir(directory))

    first = run(tmp_path / "first", max_batches=5)
    manifest = read_manifest(latest_checkpoint(str(tmp_path / "checkpoints")))
    assert manifest["batch"] == 5
    assert first == []  # held: nothing written yet
    second = run(tmp_path / "second")
    assert second == [("a1", 3.0, [100, 0]), ("a2", 8.0, [400, 0])]
