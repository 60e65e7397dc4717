"""More of the Beam model on the SparkRunner, checked against the DirectRunner.

Stateful DoFns with event-time timers, text files in and out, metrics, Reshuffle,
CoGroupByKey and a splittable DoFn, each on both runners with one explicit expectation.
"""

from __future__ import annotations

import glob

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate, window
from apache_beam.transforms.timeutil import TimeDomain

from spark_fixtures import spark_session  # noqa: F401 (fixture)
from triggers.panes import DescribePanes


class BufferUntilTimer(beam.DoFn):
    """Buffers each key's values and emits their sum, with a running count, at event time 100."""

    BUFFER = userstate.BagStateSpec("buffer", VarIntCoder())
    SEEN = userstate.CombiningValueStateSpec("seen", VarIntCoder(), beam.combiners.CountCombineFn())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, element, buffer=beam.DoFn.StateParam(BUFFER),
                seen=beam.DoFn.StateParam(SEEN), flush=beam.DoFn.TimerParam(FLUSH)):
        key, value = element
        buffer.add(value)
        seen.add(1)
        flush.set(100)

    @userstate.on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER),
                 seen=beam.DoFn.StateParam(SEEN)):
        yield key, sum(buffer.read()), seen.read()
        buffer.clear()


class CountDown(beam.DoFn):
    """A timer that re-arms itself: fires at 10, 20, 30 (event time), then stops."""

    FIRINGS = userstate.CombiningValueStateSpec(
        "firings", VarIntCoder(), beam.combiners.CountCombineFn())
    TICK = userstate.TimerSpec("tick", TimeDomain.WATERMARK)

    def process(self, element, tick=beam.DoFn.TimerParam(TICK)):
        tick.set(10)

    @userstate.on_timer(TICK)
    def on_tick(self, key=beam.DoFn.KeyParam, timestamp=beam.DoFn.TimestampParam,
                firings=beam.DoFn.StateParam(FIRINGS), tick=beam.DoFn.TimerParam(TICK)):
        firings.add(1)
        yield key, int(timestamp)
        if firings.read() < 3:
            tick.set(timestamp + 10)


def test_stateful_dofn_with_event_time_timers(make_pipeline):
    pairs = [("a", 1), ("b", 10), ("a", 2), ("c", 5), ("a", 3), ("b", 20)]
    with make_pipeline() as p:
        keyed = p | beam.Create(pairs)
        flushed = keyed | beam.ParDo(BufferUntilTimer())
        ticks = keyed | "Ticks" >> beam.ParDo(CountDown())
        assert_that(flushed, equal_to([("a", 6, 3), ("b", 30, 2), ("c", 5, 1)]), label="flushed")
        # One timer per key (setting it again only moves it): three firings per key.
        assert_that(ticks, equal_to([(k, t) for k in "abc" for t in (10, 20, 30)]), label="ticks")


def test_text_files_in_and_out(make_pipeline, tmp_path):
    source = tmp_path / "input.txt"
    source.write_text("the quick fox\nthe lazy dog\n\nthe end\n")
    with make_pipeline() as p:
        counts = (
            p
            | beam.io.ReadFromText(str(source))
            | beam.FlatMap(str.split)
            | beam.combiners.Count.PerElement()
            | beam.MapTuple(lambda word, count: f"{word}:{count}")
        )
        counts | beam.io.WriteToText(str(tmp_path / "counts"), file_name_suffix=".txt")
    written = sorted(
        line for path in glob.glob(str(tmp_path / "counts*.txt"))
        for line in open(path).read().splitlines())
    assert written == sorted(["the:3", "quick:1", "fox:1", "lazy:1", "dog:1", "end:1"])


class Measured(beam.DoFn):
    def __init__(self):
        self.elements = Metrics.counter("measured", "elements")
        self.sizes = Metrics.distribution("measured", "sizes")
        self.latest = Metrics.gauge("measured", "latest")

    def process(self, element):
        self.elements.inc()
        self.sizes.update(element)
        self.latest.set(element)
        yield element


def test_metrics_are_aggregated_across_tasks(make_pipeline):
    p = make_pipeline()
    (p | beam.Create(list(range(1, 21))) | beam.Reshuffle() | beam.ParDo(Measured()))
    result = p.run()
    result.wait_until_finish()
    query = result.metrics().query(MetricsFilter().with_namespace("measured"))
    (counter,) = query["counters"]
    (distribution,) = query["distributions"]
    (gauge,) = query["gauges"]
    assert counter.key.metric.name == "elements" and counter.committed == 20
    assert (distribution.committed.count, distribution.committed.sum) == (20, 210)
    assert (distribution.committed.min, distribution.committed.max) == (1, 20)
    assert 1 <= gauge.committed.value <= 20
    assert "Measured" in counter.key.step


def test_reshuffle_keeps_windows_and_timestamps(make_pipeline):
    with make_pipeline() as p:
        panes = (
            p
            | beam.Create([("k", 1, 3), ("k", 2, 14), ("j", 3, 15)])
            | beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
            | beam.WindowInto(window.FixedWindows(10))
            | beam.Reshuffle()
            | beam.Map(lambda kv, ts=beam.DoFn.TimestampParam: (kv[0], (kv[1], float(ts))))
            | DescribePanes()
            | beam.Map(lambda record: (record["key"], record["value"], record["window"]))
        )
        assert_that(panes, equal_to([
            ("k", (1, 3.0), {"start": 0.0, "end": 10.0}),
            ("k", (2, 14.0), {"start": 10.0, "end": 20.0}),
            ("j", (3, 15.0), {"start": 10.0, "end": 20.0}),
        ]))


def test_co_group_by_key(make_pipeline):
    with make_pipeline() as p:
        emails = p | "Emails" >> beam.Create([("amy", "a@x"), ("bob", "b@x"), ("amy", "a@y")])
        phones = p | "Phones" >> beam.Create([("amy", "111"), ("carl", "333")])
        joined = (
            {"emails": emails, "phones": phones}
            | beam.CoGroupByKey()
            | beam.MapTuple(lambda name, groups: (
                name, sorted(groups["emails"]), sorted(groups["phones"])))
        )
        assert_that(joined, equal_to([
            ("amy", ["a@x", "a@y"], ["111"]), ("bob", ["b@x"], []), ("carl", [], ["333"]),
        ]))


class CountTo(beam.DoFn, beam.RestrictionProvider):
    """A bounded splittable DoFn: ``n`` becomes 0..n-1, in restrictions of 4 offsets."""

    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, n, restriction):
        return restriction.split(4)

    def restriction_size(self, n, restriction):
        return restriction.size()

    def process(self, n, tracker=beam.DoFn.RestrictionParam()):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield position
            position += 1


def test_splittable_dofn(make_pipeline):
    with make_pipeline() as p:
        numbers = p | beam.Create([10, 3]) | beam.ParDo(CountTo())
        assert_that(numbers, equal_to(list(range(10)) + list(range(3))))


class Span:
    """A plain object (pickled by Beam's coder): what a splittable DoFn's element may be."""

    def __init__(self, name, size):
        self.name = name
        self.size = size


class CountInSpan(beam.DoFn, beam.RestrictionProvider):
    """A splittable DoFn with a side input: each offset of a span, plus the span's base."""

    def initial_restriction(self, span):
        return OffsetRange(0, span.size)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, span, restriction):
        return restriction.size()

    def process(self, span, bases, tracker=beam.DoFn.RestrictionParam()):
        if not isinstance(span, Span):
            raise TypeError(f"a Span was sent, a {type(span).__name__} came: {span!r}")
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield span.name, bases[span.name] + position
            position += 1


def test_splittable_dofn_with_a_side_input(make_pipeline):
    """Beam puts a Reshuffle between a splittable DoFn's split and its process, and gives
    it the DoFn's side inputs as inputs too: the side input's elements must not join the
    reshuffled ones (they came to the DoFn as its elements, of another type)."""
    with make_pipeline() as p:
        bases = p | "Bases" >> beam.Create([("a", 100), ("b", 200)])
        numbers = (p | beam.Create([Span("a", 3), Span("b", 2)])
                   | beam.ParDo(CountInSpan(), beam.pvalue.AsDict(bases)))
        assert_that(numbers, equal_to([("a", 100), ("a", 101), ("a", 102),
                                       ("b", 200), ("b", 201)]))


def test_dofn_holding_a_large_object(make_pipeline):
    # A lookup table of about 360 KB (pickled, compressed) travels with the DoFn: the
    # SparkRunner broadcasts such stage descriptors instead of shipping them with each task.
    names = {number: f"name-{number:07d}" for number in range(150_000)}
    with make_pipeline() as p:
        looked_up = p | beam.Create([7, 149_999]) | beam.Map(lambda number: names[number])
        assert_that(looked_up, equal_to(["name-0000007", "name-0149999"]))
