"""How the SparkRunner executes: partitions, bundles, cancelling, results.

These tests are about the runner itself, so they run on the SparkRunner only and observe
Spark directly (``TaskContext`` tells a DoFn which partition it runs in).
"""

from __future__ import annotations

import time

import apache_beam as beam
import pytest
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pvalue import AsDict, AsSingleton
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindows,
    IntervalWindow,
    NonMergingWindowFn,
    SlidingWindows,
    TimestampedValue,
    WindowFn,
)
from apache_beam.utils.timestamp import Duration, Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming

from spark_fixtures import spark_session  # noqa: F401 (fixture)

pytestmark = pytest.mark.parametrize("runner_name", ["SparkRunner", "SparkConnect"], indirect=True)


def _partition(element):
    from pyspark import TaskContext

    return TaskContext.get().partitionId()


class Ranges(beam.DoFn, beam.RestrictionProvider):
    """A bounded splittable DoFn: ``n`` becomes 0..n-1, in restrictions of 2 offsets."""

    def initial_restriction(self, n):
        return OffsetRange(0, n)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, n, restriction):
        return restriction.split(2)

    def restriction_size(self, n, restriction):
        return restriction.size()

    def process(self, n, tracker=beam.DoFn.RestrictionParam()):
        position = tracker.current_restriction().start
        while tracker.try_claim(position):
            yield position, _partition(position)
            position += 1


def test_splittable_dofn_restrictions_spread_over_partitions(runner):
    with beam.Pipeline(runner=runner) as p:
        read = p | beam.Create([8]) | beam.ParDo(Ranges())
        numbers = read | beam.Keys()
        partitions = (
            read | beam.Values() | beam.Distinct() | beam.combiners.Count.Globally())
        assert_that(numbers, equal_to(list(range(8))), label="numbers")
        # Four restrictions, redistributed over the session's two default partitions.
        assert_that(partitions, equal_to([2]), label="partitions")


class UnevenRanges(Ranges):
    """``n`` in restrictions of 9 offsets and 1, in turn: 0-9, 9-10, 10-19, 19-20, ..."""

    def split(self, n, restriction):
        start = restriction.start
        while start < restriction.stop:
            size = 9 if (start % 10) == 0 else 1
            yield OffsetRange(start, min(start + size, restriction.stop))
            start += size


def test_splittable_dofn_restrictions_are_dealt_by_size(runner):
    """Dealt in turn, the restrictions of 9 would all go to one partition and those of 1 to
    the other (18 offsets against 2): the partitions get equal sizes instead."""
    with beam.Pipeline(runner=runner) as p:
        read = p | beam.Create([20]) | beam.ParDo(UnevenRanges())
        by_partition = (read | "Partitions" >> beam.Values() | beam.combiners.Count.PerElement()
                        | "Counts" >> beam.Values())
        assert_that(read | beam.Keys(), equal_to(list(range(20))), label="numbers")
        assert_that(by_partition, equal_to([10, 10]), label="per partition")


def _collection_threshold(_):
    import gc

    return gc.get_threshold()[0]


def test_a_stage_runs_with_young_objects_collected_less_often(runner, runner_name, request):
    """A stage's DoFns see the raised threshold; on classic Spark, a plain RDD function run
    by the same session's Python workers afterwards sees Python's own."""
    from runners.spark.worker.collection import STAGE_COLLECTION_THRESHOLD

    with beam.Pipeline(runner=runner) as p:
        seen = p | beam.Create(range(4)) | beam.Map(_collection_threshold)
        assert_that(seen, equal_to([STAGE_COLLECTION_THRESHOLD] * 4))
    if runner_name == "SparkRunner":
        context = request.getfixturevalue("spark_session").sparkContext
        after = context.parallelize(range(4), 2).map(_collection_threshold).collect()
        assert after == [_collection_threshold(None)] * 4  # the workers fork as this did


def test_spark_parallelism_sets_shuffle_partitions(runner):
    options = PipelineOptions(["--spark_parallelism", "3"])
    with beam.Pipeline(runner=runner, options=options) as p:
        used = (
            p
            | beam.Create([(f"key{i}", i) for i in range(30)])
            | beam.GroupByKey()
            | beam.Map(_partition)
            | beam.Distinct()
        )
        assert_that(used, equal_to([0, 1, 2]))


class BundleSizes(beam.DoFn):
    def start_bundle(self):
        self.count = 0

    def process(self, element):
        self.count += 1
        yield element

    def finish_bundle(self):
        Metrics.distribution("bundles", "size").update(self.count)


def test_bundle_size_limits_elements_per_bundle(runner):
    p = beam.Pipeline(runner=runner, options=PipelineOptions(["--bundle_size", "3"]))
    _ = p | beam.Create(list(range(20))) | beam.Reshuffle() | beam.ParDo(BundleSizes())
    result = p.run()
    assert result.wait_until_finish() == PipelineState.DONE
    (sizes,) = result.metrics().query(MetricsFilter().with_name("size"))["distributions"]
    assert sizes.committed.sum == 20
    assert sizes.committed.max <= 3
    assert sizes.committed.count >= 7  # at least ceil(20 / 3) bundles


class RemindLater(beam.DoFn):
    """A processing-time timer a fraction of a second ahead, once per key."""

    REMIND = userstate.TimerSpec("remind", TimeDomain.REAL_TIME)

    def process(self, element, remind=beam.DoFn.TimerParam(REMIND)):
        remind.set(Timestamp.now() + Duration(seconds=0.2))

    @userstate.on_timer(REMIND)
    def on_remind(self, key=beam.DoFn.KeyParam):
        yield key


def test_processing_time_timer_fires_in_batch(runner):
    # SparkRunner only: Beam's DirectRunner runs such a pipeline on its legacy bundle-based
    # runner, which never fires processing-time timers of a bounded pipeline (the output
    # would silently be empty). The SparkRunner waits for the timer and fires it.
    with beam.Pipeline(runner=runner) as p:
        reminded = p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.ParDo(RemindLater())
        assert_that(reminded, equal_to(["a", "b"]))


def _slow(element):
    time.sleep(2)
    return element


def test_cancel_stops_a_running_pipeline(runner):
    p = beam.Pipeline(runner=runner)
    _ = p | beam.Create(list(range(20))) | beam.Reshuffle() | beam.Map(_slow)
    result = p.run()
    assert result.wait_until_finish(duration=500) == PipelineState.RUNNING
    assert result.cancel() == PipelineState.CANCELLED
    assert result.wait_until_finish() == PipelineState.CANCELLED


class RecordWorker(beam.DoFn):
    """Writes the Python worker's process id to ``path`` on its first element."""

    def __init__(self, path: str) -> None:
        self.path = path

    def process(self, element):
        import os

        with open(self.path, "w") as file:
            file.write(str(os.getpid()))
        yield element


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_stops_an_endless_source_running_in_batch(runner, tmp_path):
    """Without --streaming a PeriodicImpulse that never ends runs in batch, as on the
    DirectRunner: its task sleeps until the next fire time, again and again. Cancelling the
    run ends it, and the Python worker running the task is gone."""
    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    pid_file = tmp_path / "worker.pid"
    p = beam.Pipeline(runner=runner)
    _ = (p
         | PeriodicImpulse(start_timestamp=time.time(), fire_interval=3600)
         | beam.ParDo(RecordWorker(str(pid_file))))
    result = p.run()
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the first tick never reached the step after it"
        assert result.wait_until_finish(duration=200) == PipelineState.RUNNING
    worker = int(pid_file.read_text())
    assert result.cancel() == PipelineState.CANCELLED
    assert result.wait_until_finish() == PipelineState.CANCELLED
    while _alive(worker):  # Spark kills an interrupted task's worker after a short grace
        assert time.monotonic() < deadline, f"Python worker {worker} still runs the task"
        time.sleep(0.2)


def test_monitoring_metrics_count_elements(runner):
    p = beam.Pipeline(runner=runner)
    _ = p | beam.Create(list(range(12))) | "Double" >> beam.Map(lambda x: 2 * x)
    result = p.run()
    result.wait_until_finish()
    assert result.state == PipelineState.DONE
    assert result.metrics().query()["counters"] == []  # no user metrics in this pipeline
    assert result.monitoring_metrics().monitoring_infos()


def _at_micros(micros):
    return TimestampedValue(micros, Timestamp(micros=micros))


def _with_window(element, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam):
    return element, window, timestamp.micros


#: Timestamps around window boundaries (the sliding windows start at 1 s + 4 s * n), before
#: and after the epoch, in microseconds.
BOUNDARY_MICROS = sorted({
    seconds * 1_000_000 + delta
    for seconds in (-21, -7, -3, 0, 1, 3, 5, 7, 10, 11, 14, 1_699_999_980)
    for delta in (-1, 0, 1)
})


@pytest.mark.parametrize("window_fn", [
    FixedWindows(7, offset=3), SlidingWindows(10, 4, offset=1), GlobalWindows()],
    ids=["fixed", "sliding", "global"])
def test_standard_windows_are_assigned_as_beam_assigns_them(runner, window_fn):
    # The runner assigns these WindowFns natively (runners/spark/chains/window_assignment.py):
    # every element must land in exactly the windows Beam's own assign() gives.
    expected = [
        (micros, window, micros)
        for micros in BOUNDARY_MICROS
        for window in window_fn.assign(WindowFn.AssignContext(Timestamp(micros=micros)))
    ]
    with beam.Pipeline(runner=runner) as p:
        windowed = (
            p
            | beam.Create(BOUNDARY_MICROS)
            | beam.Map(_at_micros)
            | beam.WindowInto(window_fn)
            | beam.Map(_with_window)
        )
        assert_that(windowed, equal_to(expected))


def _key_and_pane(pair, pane=beam.DoFn.PaneInfoParam):
    return pair[0], str(pane.timing), pane.index


def test_rewindowing_into_the_global_window_resets_panes_and_passes_the_rest_on(runner):
    # Into the global window, the runner hands on an element already there with no pane as
    # it is; one that carries a pane (a GroupByKey's output) must lose it, as Beam's own
    # assignment gives every element the unknown pane.
    with beam.Pipeline(runner=runner) as p:
        pairs = p | beam.Create([("a", 1), ("a", 2), ("b", 3)])
        grouped = (pairs
                   | beam.GroupByKey()
                   | "GroupedAgain" >> beam.WindowInto(GlobalWindows())
                   | "GroupedPanes" >> beam.Map(_key_and_pane))
        fresh = (pairs
                 | "FreshAgain" >> beam.WindowInto(GlobalWindows())
                 | "FreshPanes" >> beam.Map(_key_and_pane))
        unknown = str(PaneInfoTiming.UNKNOWN)
        assert_that(grouped, equal_to([("a", unknown, 0), ("b", unknown, 0)]), label="grouped")
        assert_that(fresh, equal_to([("a", unknown, 0), ("a", unknown, 0), ("b", unknown, 0)]),
                    label="fresh")


def test_rewindowing_keeps_one_element_per_old_window(runner):
    # Beam assigns new windows once per window an element was in: an element in two sliding
    # windows is counted twice after re-windowing into fixed windows (as on the DirectRunner).
    with beam.Pipeline(runner=runner) as p:
        counts = (
            p
            | beam.Create([("a", 5), ("a", 12), ("b", 25), ("a", -7)])
            | beam.Map(lambda pair: TimestampedValue(pair, pair[1]))
            | "Sliding" >> beam.WindowInto(SlidingWindows(20, 10, offset=3))
            | "Fixed" >> beam.WindowInto(FixedWindows(60))
            | beam.combiners.Count.PerKey()
            | beam.Map(lambda count, window=beam.DoFn.WindowParam: (count, window))
        )
        assert_that(counts, equal_to([
            (("a", 2), IntervalWindow(-60, 0)),
            (("a", 4), IntervalWindow(0, 60)),
            (("b", 2), IntervalWindow(0, 60)),
        ]))


class OddStartPairs(NonMergingWindowFn):
    """A user's own WindowFn: two-second windows starting at odd seconds."""

    def assign(self, context):
        start = context.timestamp - (context.timestamp - 1) % 2
        return [IntervalWindow(start, start + 2)]

    def get_window_coder(self):
        return IntervalWindowCoder()


def test_a_users_window_fn_keeps_its_own_assignment(runner):
    with beam.Pipeline(runner=runner) as p:
        windowed = (
            p
            | beam.Create([0, 1, 2, 4])
            | beam.Map(lambda seconds: TimestampedValue(seconds, seconds))
            | beam.WindowInto(OddStartPairs())
            | beam.Map(_with_window)
        )
        assert_that(windowed, equal_to([
            (0, IntervalWindow(-1, 1), 0),
            (1, IntervalWindow(1, 3), 1_000_000),
            (2, IntervalWindow(1, 3), 2_000_000),
            (4, IntervalWindow(3, 5), 4_000_000),
        ]))


def test_side_inputs_shared_between_stages_and_several_in_one_stage(runner):
    # The runner collects each side input once per run, and a stage's side inputs together.
    with beam.Pipeline(runner=runner) as p:
        numbers = p | "Numbers" >> beam.Create([1, 2, 3])
        factor = p | "Factor" >> beam.Create([10])
        names = p | "Names" >> beam.Create([(1, "one"), (2, "two"), (3, "three")])
        scaled = numbers | "Scale" >> beam.Map(
            lambda number, by, name: (name[number], number * by),
            by=AsSingleton(factor), name=AsDict(names))
        totals = (
            scaled
            | beam.GroupByKey()
            | "AddFactor" >> beam.Map(
                lambda pair, by: (pair[0], sum(pair[1]) + by), by=AsSingleton(factor))
        )
        assert_that(totals, equal_to([("one", 20), ("two", 30), ("three", 40)]))
