"""Failures: a job that dies and is rerun loses nothing; a broker restart loses nothing.

At-least-once is the contract: after a failure, records may be read twice (duplicates are
counted and allowed) but never lost, because offsets are committed to the group only after
the bundle that read them has been durably processed.
"""

from __future__ import annotations

import collections
import threading
import time

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from kafka_fixtures import KafkaTestHelper, bootstrap_servers, kafka, kafka_broker  # noqa: F401
from services.broker import EmbeddedBroker
from transforms.kafka import ReadFromKafka, WriteToKafka, utf8


class _FailAt(beam.DoFn):
    """Fails the job at one record, standing in for a worker crash mid-stream."""

    def __init__(self, partition: int, offset: int) -> None:
        self._at = (partition, offset)

    def process(self, record):
        if (record.partition, record.offset) == self._at:
            raise RuntimeError(f"simulated crash at partition {record.partition} offset {record.offset}")
        yield record


def _copy_job(p, kafka, source, sink, group, fail_at=None):
    read = p | ReadFromKafka(kafka.bootstrap_servers, source, start="committed", group_id=group,
                             bounded=True, with_metadata=True, records_per_bundle=5)
    records = read.records
    if fail_at is not None:
        records = records | beam.ParDo(_FailAt(*fail_at))
    _ = (records
         | beam.Map(lambda record: record.value)
         | WriteToKafka(kafka.bootstrap_servers, sink))


def test_a_job_that_fails_and_is_rerun_with_the_same_group_loses_nothing(make_pipeline, kafka):
    source = kafka.create_topic(partitions=2)
    sink = kafka.create_topic(partitions=1)
    values = [f"r{i}".encode() for i in range(40)]
    kafka.produce(source, [(None, value, None, i % 2) for i, value in enumerate(values)])
    group = kafka.group()

    with pytest.raises(Exception):
        with make_pipeline() as p:
            _copy_job(p, kafka, source, sink, group, fail_at=(0, 12))
    committed = kafka.committed(group, source, partitions=2)
    # Never committed past the record that was not durably processed.
    assert committed[0] is None or committed[0] <= 12, committed

    with make_pipeline() as p:
        _copy_job(p, kafka, source, sink, group)

    written = collections.Counter(record.value for record in kafka.consume_all(sink))
    assert set(written) == set(values), sorted(set(values) - set(written))
    duplicates = sum(written.values()) - len(values)
    print(f"at-least-once rerun: {len(values)} records, {duplicates} duplicates, "
          f"committed after the failure: {committed}")
    assert duplicates >= 0
    after = kafka.committed(group, source, partitions=2)
    for partition in (0, 1):
        assert after[partition] is None or after[partition] <= 20, after


def test_records_written_across_a_broker_restart_are_all_read(make_pipeline, tmp_path):
    """noida keeps its log in --data-dir, so a restart mid-stream must lose nothing.

    This test starts its own noida broker whatever KAFKA_BROKER says: tansu's memory storage
    loses every record on restart, so there is nothing to recover there.
    """
    marker = tmp_path / "first-half-read"
    with EmbeddedBroker(kind="noida") as broker:
        kafka = KafkaTestHelper(broker.bootstrap_servers, "broker-restart")
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, [(None, f"r{i}".encode()) for i in range(10)])
        errors = []

        def restart_then_produce():
            try:
                deadline = time.monotonic() + 120
                while not marker.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                broker.restart()
                kafka.produce(topic, [(None, f"r{i}".encode()) for i in range(10, 20)])
            except Exception as error:  # reported by the assertion below
                errors.append(error)

        helper = threading.Thread(target=restart_then_produce, daemon=True)
        helper.start()
        marker_path = str(marker)

        def note_progress(value):
            if value == "r9":
                with open(marker_path, "w") as handle:
                    handle.write("read r9")
            return value

        with make_pipeline() as p:
            read = p | ReadFromKafka(broker.bootstrap_servers, topic, max_records=20,
                                     value_decoder=utf8, records_per_bundle=2)
            values = read.records | beam.Map(lambda kv: kv[1]) | beam.Map(note_progress)
            assert_that(values, equal_to([f"r{i}" for i in range(20)]))
        helper.join(timeout=60)
        assert not errors, errors
        assert marker.exists()
