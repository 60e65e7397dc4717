"""WriteToKafka and WriteDeadLettersToKafka on a real embedded broker; clear errors."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from kafka_fixtures import (  # noqa: F401  (fixtures)
    KafkaTestHelper, bootstrap_servers, kafka, kafka_broker)
from services.broker import EmbeddedBroker, free_loopback_port
from transforms.kafka.connectivity import any_server_accepts
from transforms.kafka.polling import poll_records
from transforms.kafka import (
    ReadFromKafka,
    WriteDeadLettersToKafka,
    WriteToKafka,
    json_bytes,
    json_value,
)


def test_write_keyed_records_with_event_time_and_read_them_back(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=3)
    scores = [("alice", 3, 10.0), ("bob", 5, 20.0), ("alice", 4, 30.0), ("carol", 1, 40.0)]
    base = kafka.base
    with make_pipeline() as p:
        _ = (p
             | beam.Create(scores)
             | beam.Map(lambda s: beam.window.TimestampedValue((s[0], s[1]), base + s[2]))
             | WriteToKafka(kafka.bootstrap_servers, topic, key_fn=lambda kv: kv[0],
                            value_fn=lambda kv: {"score": kv[1]}, value_serializer=json_bytes))
    records = kafka.consume_all(topic, expected=4)
    assert sorted((r.key, r.value, r.timestamp) for r in records) == sorted(
        (name.encode(), json_bytes({"score": n}), (base + t) * 1000) for name, n, t in scores)
    partitions_of = {}
    for record in records:
        partitions_of.setdefault(record.key, set()).add(record.partition)
    assert all(len(partitions) == 1 for partitions in partitions_of.values()), partitions_of


def test_exactly_once_writes_committed_records_or_refuses_a_broker_without_isolation(
        make_pipeline, kafka, kafka_broker_kind):
    topic = kafka.create_topic(partitions=1)
    values = [f"v{number}".encode() for number in range(5)]

    def write():
        with make_pipeline() as p:
            _ = p | beam.Create(values) | WriteToKafka(kafka.bootstrap_servers, topic,
                                                       exactly_once=True)

    if kafka_broker_kind == "tansu":  # it shows aborted records to read-committed readers
        with pytest.raises(Exception) as failure:
            write()
        message = _error_text(failure.value)
        assert "needs Kafka transactions" in message and "does not give them" in message, message
        assert "at-least-once" in message, message
        return
    write()
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers,
                             enable_auto_commit=False, isolation_level="read_committed")
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        seen, deadline = [], time.monotonic() + 20
        while len(seen) < len(values) and time.monotonic() < deadline:
            for records in poll_records(consumer, 0.5).values():
                seen.extend(record.value for record in records)
    finally:
        consumer.close()
    assert sorted(seen) == sorted(values)


def test_a_value_without_a_serializer_fails_the_job_naming_the_fix(make_pipeline, kafka):
    topic = kafka.create_topic(partitions=1)
    with pytest.raises(Exception, match="value_serializer"):
        with make_pipeline() as p:
            _ = p | beam.Create([{"not": "bytes"}]) | WriteToKafka(kafka.bootstrap_servers, topic)


def test_dead_letters_are_written_to_a_dead_letter_topic_with_their_bytes_and_reason(
        make_pipeline, kafka):
    topic = kafka.create_topic(partitions=1)
    dead_letter_topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, [(b"k1", b'{"ok": 1}', None, None, [("trace", b"t-1")]),
                          (b"k2", b"\x00garbage")])
    with make_pipeline() as p:
        read = p | ReadFromKafka(kafka.bootstrap_servers, topic, bounded=True,
                                 value_decoder=json_value)
        _ = read.dead_letter | WriteDeadLettersToKafka(kafka.bootstrap_servers, dead_letter_topic)
        assert_that(read.records | beam.Map(lambda kv: kv[0]), equal_to([b"k1"]))
    (dead,) = kafka.consume_all(dead_letter_topic, expected=1)
    headers = dict(dead.headers)
    assert (dead.key, dead.value) == (b"k2", b"\x00garbage")
    assert headers["dead_letter.topic"] == topic.encode()
    assert headers["dead_letter.partition"] == b"0"
    assert headers["dead_letter.offset"] == b"1"
    assert headers["dead_letter.reason"].startswith(b"value_decoder json_value failed")


def _error_text(error: BaseException) -> str:
    """The messages of an exception and of its causes (a runner may wrap the worker's error)."""
    texts = []
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        texts.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(texts)


def test_a_broker_that_is_down_gives_a_clear_error_for_the_source(make_pipeline):
    servers = f"127.0.0.1:{free_loopback_port()}"  # nothing listens there
    with pytest.raises(Exception) as failure:
        with make_pipeline() as p:
            _ = p | ReadFromKafka(servers, "events", bounded=True,
                                  consumer_config={"bootstrap_timeout_ms": 3000})
    message = _error_text(failure.value)
    assert servers in message and "make kafka" in message, message


def test_a_broker_that_is_down_gives_a_clear_error_for_the_sink(make_pipeline):
    servers = f"127.0.0.1:{free_loopback_port()}"
    with pytest.raises(Exception) as failure:
        with make_pipeline() as p:
            # A broker that went away is waited for (300 s by default); this one never was.
            _ = p | beam.Create([b"x"]) | WriteToKafka(servers, "events", broker_wait_seconds=2)
    message = _error_text(failure.value)
    assert servers in message and "make kafka" in message, message
    assert "no TCP connection opened in 2 s (broker_wait_seconds)" in message, message


class _WaitSaid(logging.Handler):
    """Sets an event when a log line says a write waits for Kafka."""

    def __init__(self) -> None:
        super().__init__()
        self.said = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "waits for Kafka" in record.getMessage():
            self.said.set()


def test_a_broker_gone_in_the_middle_of_a_bundle_is_waited_for_and_the_bundle_written():
    """The broker stops between two records of one bundle: the bundle's flush says once that
    it waits, and writes both records once the broker is back (before, it flushed silently
    for two minutes and then failed the bundle).

    Its own noida broker (tansu forgets its log on a restart) and Beam's DirectRunner only:
    the fault is injected from inside the bundle, which needs the broker's handle in this
    process; the waiting is the sink's own code on every runner (tests/kafka/
    test_kafka_faults.py restarts a broker under a SparkRunner job)."""
    said = _WaitSaid()
    logger = logging.getLogger("transforms.kafka.connectivity")
    logger.addHandler(said)
    with EmbeddedBroker(kind="noida") as broker:
        kafka = KafkaTestHelper(broker.bootstrap_servers, "write-broker-gone")
        topic = kafka.create_topic()

        pid, servers = broker.pid, [broker.bootstrap_servers]

        def kill_the_broker_at_the_second(value: bytes) -> bytes:
            # The runner pickles this function: it holds the broker's PID, nothing shared.
            if value == b"second":
                os.kill(pid, signal.SIGTERM)  # noida forgets a new topic on SIGKILL
                deadline = time.monotonic() + 10
                while any_server_accepts(servers) and time.monotonic() < deadline:
                    time.sleep(0.05)
            return value

        def restart_once_the_wait_is_said() -> None:
            if said.said.wait(60):
                broker.stop(remove_data=False)  # reaps the killed process
                broker.start()

        restarter = threading.Thread(target=restart_once_the_wait_is_said, daemon=True)
        restarter.start()
        try:
            with beam.Pipeline(runner="DirectRunner") as p:
                _ = (p
                     | beam.Create([b"first", b"second"])
                     | beam.Map(kill_the_broker_at_the_second)
                     | WriteToKafka(broker.bootstrap_servers, topic, broker_wait_seconds=60))
        finally:
            logger.removeHandler(said)
        assert said.said.is_set(), "the write did not say it waits for the broker"
        values = sorted(record.value for record in kafka.consume_all(topic, expected=2))
    assert values == [b"first", b"second"]


@pytest.mark.parametrize("arguments, error, fragment", [
    (dict(topics="t", start="newest"), ValueError, "start='newest'"),
    (dict(topics="t", start="committed"), ValueError, "pass group_id"),
    (dict(topics=[]), ValueError, "topics"),
    (dict(topics="t", max_records=0), ValueError, "max_records=0"),
    (dict(topics="t", idle_timeout_seconds=-1), ValueError, "idle_timeout_seconds"),
    (dict(topics="t", consumer_config={"group_id": "g"}), ValueError, "group_id"),
    (dict(topics="t", value_decoder="utf8"), TypeError, "value_decoder"),
    (dict(topics="t", bootstrap_servers="localhost"), ValueError, "host:port"),
])
def test_invalid_source_arguments_are_rejected_when_the_transform_is_built(arguments, error, fragment):
    arguments = {"bootstrap_servers": "127.0.0.1:9092", **arguments}
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        ReadFromKafka(**arguments)


@pytest.mark.parametrize("arguments, error, fragment", [
    (dict(topic=""), ValueError, "topic"),
    (dict(topic="t", key_fn="name"), TypeError, "key_fn"),
    (dict(topic="t", producer_config={"acks": 0}), ValueError, "acks"),
    (dict(topic="t", broker_wait_seconds=-1), ValueError, "broker_wait_seconds=-1"),
])
def test_invalid_sink_arguments_are_rejected_when_the_transform_is_built(arguments, error, fragment):
    with pytest.raises(error, match=fragment):
        WriteToKafka("127.0.0.1:9092", **arguments)
