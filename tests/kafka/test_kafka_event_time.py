"""Event time, watermarks and dead letters of ReadFromKafka on a real embedded broker."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp

from kafka_fixtures import bootstrap_servers, equal_to_any_order, kafka, kafka_broker  # noqa: F401
from transforms.kafka import ReadFromKafka, json_value, utf8
from transforms.kafka.watermark import PartitionWatermarkEstimator, PartitionWatermarkEstimatorProvider
from triggers.panes import ON_TIME, DescribePanes, pane_record


def _with_event_time(base):
    def pair(kv, timestamp=beam.DoFn.TimestampParam):
        return kv[1], timestamp.micros / 1e6 - base
    return pair


def test_event_time_is_the_record_timestamp_by_default(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=2)
    base = kafka.base_ms
    kafka.produce(topic, [(None, b"a", base + 1_500, 0), (None, b"b", base + 62_250, 1),
                          (None, b"c", base + 7_000, 0)])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True, value_decoder=utf8)
        assert_that(read.records | beam.Map(_with_event_time(kafka.base)),
                    equal_to([("a", 1.5), ("b", 62.25), ("c", 7.0)]))


def test_event_time_from_a_user_function_of_the_record(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=1)
    events = [{"user": "u1", "at": 100.0}, {"user": "u2", "at": 40.5}]
    # Kafka timestamps (create time) differ from the event times inside the payload.
    kafka.produce(topic, [(None, json.dumps(e).encode(), kafka.base_ms + 999_000) for e in events])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True,
                                 value_decoder=json_value, timestamp_fn=lambda r: r.value["at"])
        assert_that(read.records | beam.Map(lambda kv, ts=beam.DoFn.TimestampParam:
                                            (kv[1]["user"], ts.micros / 1e6)),
                    equal_to([("u1", 100.0), ("u2", 40.5)]))


def test_undecodable_records_go_to_the_dead_letter_output_and_the_read_goes_on(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=1)
    base = kafka.base_ms
    kafka.produce(topic, [
        (b"k", b'{"n": 1}', base + 1_000),
        (b"k", b"{not json", base + 2_000),
        (b"\xff\xfe", b'{"n": 3}', base + 3_000),
        (b"k", b'{"n": 4}', base + 4_000),
        (b"k", b'{"at": "yesterday"}', base + 5_000),
    ])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True, key_decoder=utf8,
                                 value_decoder=json_value,
                                 timestamp_fn=lambda r: r.value.get("at", r.timestamp))
        assert_that(read.records, equal_to_any_order([("k", {"n": 1}), ("k", {"n": 4})]))
        base_seconds = kafka.base
        dead = read.dead_letter | beam.Map(
            lambda d: (d.offset, d.key, d.value, d.timestamp - base_seconds, d.reason.split(":")[0]))
        assert_that(dead, equal_to([
            (1, b"k", b"{not json", 2.0, "value_decoder json_value failed"),
            (2, b"\xff\xfe", b'{"n": 3}', 3.0, "key_decoder utf8 failed"),
            (4, b"k", b'{"at": "yesterday"}', 5.0, "timestamp_fn failed"),
        ]), label="dead letters keep the original bytes, offsets and reasons")
        assert_that(read.dead_letter | beam.Map(lambda d: (type(d).__name__, d.topic)),
                    equal_to([("KafkaDeadLetter", topic)] * 3), label="dead letter type")


def test_an_idle_partition_does_not_hold_back_the_on_time_pane(make_pipeline, kafka):
    """A windowed count over two partitions, one of them idle: the windows still close.

    Partition 1 never receives a record. The count per 10 s window must come out as the
    ON_TIME pane (fired by the watermark, not at the end of time).
    """
    topic = kafka.create_topic(partitions=2)
    base = kafka.base_ms  # a whole hour: window bounds below are relative to it
    kafka.produce(topic, [(b"clicks", b"x", base + ms, 0)
                          for ms in (1_000, 2_000, 9_000, 12_000, 15_000)])
    with make_pipeline(streaming=True) as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True, key_decoder=utf8,
                                 idle_timeout_seconds=1.0)
        counts = (read.records
                  | beam.WindowInto(beam.window.FixedWindows(10),
                                    trigger=trigger.AfterWatermark(),
                                    accumulation_mode=trigger.AccumulationMode.DISCARDING)
                  | beam.combiners.Count.PerKey()
                  | DescribePanes()
                  # The pane's timestamp depends on the runner's timestamp precision.
                  | beam.Map(lambda pane: {**pane, "timestamp": None}))
        assert_that(counts, equal_to_any_order([
            pane_record("clicks", 3, window=(kafka.base, kafka.base + 10), timestamp=None,
                        timing=ON_TIME, index=0, is_first=True, is_last=True),
            pane_record("clicks", 2, window=(kafka.base + 10, kafka.base + 20), timestamp=None,
                        timing=ON_TIME,
                        index=0, is_first=True, is_last=True),
        ]))


class _FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_partition_watermark_is_the_largest_event_time_seen_and_never_goes_back():
    estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=None, clock=_FakeClock(0))
    assert estimator.current_watermark() == MIN_TIMESTAMP
    for seconds in (5, 3, 8, 7):
        estimator.observe_timestamp(Timestamp(seconds))
    assert estimator.current_watermark() == Timestamp(8)


def test_an_idle_partition_advances_its_watermark_after_the_idle_timeout():
    clock = _FakeClock(1_000.0)
    estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=5.0, clock=clock)
    estimator.observe_timestamp(Timestamp(100))
    estimator.caught_up()
    clock.now = 1_004.0
    assert estimator.current_watermark() == Timestamp(100)  # idle 4 s < 5 s
    clock.now = 1_010.0
    assert estimator.current_watermark() == Timestamp(1_005)  # now - idle timeout
    # A new record resets idleness; the watermark never goes back.
    estimator.observe_timestamp(Timestamp(200))
    clock.now = 1_100.0
    assert estimator.current_watermark() == Timestamp(1_005)


def test_a_partition_with_backlog_is_not_idle_and_holds_its_watermark():
    clock = _FakeClock(0.0)
    estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=1.0, clock=clock)
    estimator.observe_timestamp(Timestamp(10))
    estimator.caught_up()
    estimator.has_backlog()
    clock.now = 100.0
    assert estimator.current_watermark() == Timestamp(10)


def test_without_idle_timeout_an_idle_partition_holds_the_watermark():
    clock = _FakeClock(0.0)
    estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=None, clock=clock)
    estimator.caught_up()
    clock.now = 1e6
    assert estimator.current_watermark() == MIN_TIMESTAMP


def test_the_estimator_state_round_trips_through_a_checkpoint():
    clock = _FakeClock(50.0)
    estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=10.0, clock=clock)
    estimator.observe_timestamp(Timestamp(20))
    state = estimator.get_estimator_state()
    provider = PartitionWatermarkEstimatorProvider(idle_timeout_seconds=10.0)
    resumed = provider.create_watermark_estimator(list(state))
    assert resumed.current_watermark() == Timestamp(20)
    estimator.caught_up()
    assert estimator.get_estimator_state() == (Timestamp(20).micros, 50.0)  # idle since 50 s
    assert provider.initial_estimator_state(None, OffsetRange(0, 1)) == (MIN_TIMESTAMP.micros, None)
