"""ReadFromKafka on a real embedded broker: start positions, bounds, metadata, event time."""

from __future__ import annotations

import time

import apache_beam as beam
import pytest
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.util import assert_that, equal_to

from kafka_fixtures import bootstrap_servers, equal_to_any_order, kafka, kafka_broker  # noqa: F401
from transforms.kafka import KafkaRecord, ReadFromKafka, utf8


def _values(n, prefix="v"):
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_bounded_read_from_earliest_returns_every_record(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, value, None, i % 2) for i, value in enumerate(_values(10))])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True, value_decoder=utf8)
        assert_that(read.records, equal_to([(None, f"v{i}") for i in range(10)]))
        assert_that(read.dead_letter, equal_to([]), label="no dead letters")


def _offsets(read):
    return read.records | beam.Map(lambda record: (record.partition, record.offset))


def test_metadata_carries_topic_partition_offset_key_headers_and_timestamp(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=2)
    base = kafka.base_ms
    kafka.produce(topic, [
        (b"k0", b"a", base + 1_000, 0, [("source", b"sensor-1")]),
        (b"k1", b"b", base + 2_000, 1, []),
        (None, b"c", base + 3_000, 1, [("h", b"\x00\x01")]),
    ])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, [topic], bounded=True, with_metadata=True,
                                 key_decoder=utf8, value_decoder=utf8)
        assert_that(read.records, equal_to_any_order([
            KafkaRecord(topic, 0, 0, "k0", "a", kafka.base + 1.0, (("source", b"sensor-1"),)),
            KafkaRecord(topic, 1, 0, "k1", "b", kafka.base + 2.0, ()),
            KafkaRecord(topic, 1, 1, None, "c", kafka.base + 3.0, (("h", b"\x00\x01"),)),
        ]))


def test_max_records_stops_each_partition_after_that_many_offsets(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, value, None, i % 2) for i, value in enumerate(_values(12))])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, max_records=4, with_metadata=True)
        assert_that(_offsets(read), equal_to([(0, o) for o in range(4)] + [(1, o) for o in range(4)]))


def test_start_at_timestamp_reads_from_the_first_record_at_or_after_it(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=2)
    # Partition 0: timestamps 1..8 s; partition 1: 1.5..8.5 s.
    base = kafka.base_ms
    kafka.produce(topic, [(None, f"p0-{s}".encode(), base + s * 1000, 0) for s in range(1, 9)]
                  + [(None, f"p1-{s}".encode(), base + s * 1000 + 500, 1) for s in range(1, 9)])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, start=kafka.base + 5.0, bounded=True,
                                 value_decoder=utf8)
        assert_that(read.records | beam.Map(lambda kv: kv[1]),
                    equal_to([f"p0-{s}" for s in range(5, 9)] + [f"p1-{s}" for s in range(5, 9)]))


def test_start_at_a_timestamp_after_every_record_reads_nothing(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, b"x", kafka.base_ms + s * 1000) for s in range(1, 4)])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, start=kafka.base + 100.0,
                                 bounded=True)
        assert_that(read.records, equal_to([]))


def test_start_at_committed_offsets_of_the_group(make_pipeline, kafka):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, value, None, i % 2) for i, value in enumerate(_values(10))])
    group = kafka.group()
    committer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, group_id=group,
                              enable_auto_commit=False)
    # Partition 0 committed at offset 3; partition 1 has no committed offset: earliest.
    committer.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)})
    committer.close()
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, start="committed", group_id=group,
                                 bounded=True, with_metadata=True)
        assert_that(_offsets(read), equal_to([(0, o) for o in range(3, 5)] + [(1, o) for o in range(5)]))


def test_bounded_read_with_start_latest_is_empty(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, value, None, i % 2) for i, value in enumerate(_values(6))])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, start="latest", bounded=True)
        assert_that(read.records, equal_to([]))


def _keep_producing(kafka, topic, stop, first_sequence):
    """Produce "new-<n>" records every 50 ms until ``stop`` is set."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers)
    sequence = first_sequence
    try:
        while not stop.is_set():
            producer.send(topic, value=f"new-{sequence}".encode(), partition=0).get(timeout=30)
            sequence += 1
            stop.wait(0.05)
    finally:
        producer.close()


def test_start_latest_skips_records_written_before_the_job(make_pipeline, kafka):
    import threading

    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"old-{i}".encode()) for i in range(5)])
    stop = threading.Event()
    producer = threading.Thread(target=_keep_producing, args=(kafka, topic, stop, 0), daemon=True)
    producer.start()
    try:
        with make_pipeline() as p:
            read = p | ReadFromKafka(kafka.bootstrap_servers, topic, start="latest", max_records=3,
                                     value_decoder=utf8)
            # Three consecutive new records: none of the old ones, whichever new ones were
            # the newest when the job resolved "latest".
            assert_that(read.records | beam.Map(lambda kv: kv[1]), _three_consecutive_new)
    finally:
        stop.set()
        producer.join(timeout=30)


def _three_consecutive_new(values):
    assert len(values) == 3, values
    assert all(value.startswith("new-") for value in values), values
    sequence = sorted(int(value.split("-")[1]) for value in values)
    assert sequence == list(range(sequence[0], sequence[0] + 3)), values


def test_bounded_read_stops_at_the_end_offsets_seen_at_start(make_pipeline, kafka):
    import threading

    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"new-{i}".encode()) for i in range(20)])
    stop = threading.Event()
    producer = threading.Thread(target=_keep_producing, args=(kafka, topic, stop, 20), daemon=True)
    producer.start()
    try:
        with make_pipeline() as p:
            read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True, value_decoder=utf8)
            # Records keep arriving, yet the read ends: with a prefix of the log that holds at
            # least the 20 records written before the job started.
            assert_that(read.records | beam.Map(lambda kv: kv[1]), _a_prefix_of_at_least(20))
    finally:
        stop.set()
        producer.join(timeout=30)


def _a_prefix_of_at_least(count):
    def check(values):
        sequence = sorted(int(value.split("-")[1]) for value in values)
        assert len(sequence) >= count, sequence
        assert sequence == list(range(len(sequence))), sequence
    return check


def test_without_a_bound_the_records_are_an_unbounded_pcollection(make_pipeline):
    p = make_pipeline(streaming=True)
    unbounded = p | "Unbounded" >> ReadFromKafka("127.0.0.1:9092", "t")
    bounded = p | "Bounded" >> ReadFromKafka("127.0.0.1:9092", "t", bounded=True)
    assert unbounded.records.is_bounded is False
    assert bounded.records.is_bounded is True


def _wait_for_commits(kafka, group, topic, expected, result, deadline):
    while kafka.committed(group, topic, partitions=len(expected)) != expected:
        assert time.monotonic() < deadline, kafka.committed(group, topic, len(expected))
        assert result.wait_until_finish(duration=300) == PipelineState.RUNNING


# Not on the DirectRunner: its FnApiRunner runs such a pipeline in batch too, but its run()
# returns only when the read ends, which an unbounded read never does.
@pytest.mark.parametrize("runner_name", ["SparkRunner", "SparkConnect"], indirect=True)
def test_an_unbounded_read_without_the_streaming_flag_reads_on_in_batch(runner, kafka):
    """Without --streaming an unbounded read runs in batch, as on the DirectRunner: not
    planned by the driver (no micro-batches), the splittable DoFn reads on by itself, records
    written after the job started too, its offsets committed after each bundle, until the
    run is cancelled."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, value, None, i % 2) for i, value in enumerate(_values(10))])
    group = kafka.group()
    p = beam.Pipeline(runner=runner)
    _ = p | ReadFromKafka(kafka.bootstrap_servers, topic, group_id=group)
    result = p.run()
    deadline = time.monotonic() + 120
    _wait_for_commits(kafka, group, topic, {0: 5, 1: 5}, result, deadline)
    kafka.produce(topic, [(None, value, None, i % 2) for i, value in enumerate(_values(4))])
    _wait_for_commits(kafka, group, topic, {0: 7, 1: 7}, result, deadline)
    assert result.cancel() == PipelineState.CANCELLED
    assert result.wait_until_finish() == PipelineState.CANCELLED


class _CheckpointingTracker:
    """The restriction-tracker view a runner hands to the DoFn, reduced to what it uses:
    ``defer_remainder`` checkpoints with ``try_split(0)``, as Beam's own view does."""

    def __init__(self, restriction):
        from apache_beam.io.restriction_trackers import OffsetRestrictionTracker

        self._tracker = OffsetRestrictionTracker(restriction)
        self.residual = None

    def current_restriction(self):
        return self._tracker.current_restriction()

    def try_claim(self, position):
        return self._tracker.try_claim(position)

    def defer_remainder(self, deferred_time=None):
        split = self._tracker.try_split(0)
        if split:
            _, self.residual = split


def test_an_unbounded_partition_read_checkpoints_at_the_end_of_the_log(kafka):
    """Reading an unbounded restriction emits what is there, then defers the remainder."""
    from apache_beam.io.restriction_trackers import OffsetRange

    from transforms.kafka.read import UNBOUNDED_END, PartitionRange, _ReadPartitionFn
    from transforms.kafka.watermark import PartitionWatermarkEstimator

    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(None, f"v{i}".encode(), kafka.base_ms + i * 1000) for i in range(3)])
    reader = _ReadPartitionFn(ReadFromKafka(kafka.bootstrap_servers, topic, value_decoder=utf8).config)
    reader.setup()
    tracker = _CheckpointingTracker(OffsetRange(0, UNBOUNDED_END))
    estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=None)
    try:
        outputs = list(reader.process(PartitionRange(topic, 0, 0, None), None, tracker=tracker,
                                      watermark_estimator=estimator))
    finally:
        reader.teardown()
    assert [output.value for output in outputs] == [(None, "v0"), (None, "v1"), (None, "v2")]
    assert [output.timestamp.micros // 1000 for output in outputs] == [
        kafka.base_ms + i * 1000 for i in range(3)]
    assert tracker.residual == OffsetRange(3, UNBOUNDED_END)
    assert estimator.get_estimator_state()[1] is not None  # caught up: the idle clock runs
