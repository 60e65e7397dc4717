"""Kafka fixtures: one embedded broker of each kind per test session, unique topics and
groups per test.

Every test that uses a broker runs once per embedded broker (noida and tansu: its id says
which), in the same session; ``KAFKA_BROKER=noida`` (or ``tansu``) keeps one. Every test gets
its own topics and group ids, so tests never see each other's records or offsets.
``KAFKA_SESSION_TIMEOUT_MS`` sets the consumer-group session timeout (default 6000: real
Kafka rejects less).
"""

from __future__ import annotations

import os
import uuid
from typing import Dict, Iterable, List, Optional, Tuple

import pytest

from services.broker import KINDS, EmbeddedBroker
from transforms.kafka.polling import poll_records

SESSION_TIMEOUT_MS = int(os.environ.get("KAFKA_SESSION_TIMEOUT_MS", "6000"))


def recent_base_seconds() -> int:
    """A recent whole hour (seconds since the epoch) to build record timestamps on.

    Brokers apply time retention to record timestamps (Kafka's default: 7 days), so records
    stamped near 1970 are expired at once: the log start moves past them.
    """
    import time

    return (int(time.time()) // 3600 - 1) * 3600


def broker_kinds() -> List[str]:
    """The embedded brokers the Kafka tests run on: ``KAFKA_BROKER`` (one kind, or several
    separated by commas), by default every kind."""
    wanted = [kind.strip() for kind in os.environ.get("KAFKA_BROKER", ",".join(KINDS)).split(",")
              if kind.strip()]
    unknown = [kind for kind in wanted if kind not in KINDS]
    if unknown or not wanted:
        raise pytest.UsageError(f"KAFKA_BROKER={os.environ.get('KAFKA_BROKER')!r}: use one or "
                                f"more of {KINDS}, separated by commas")
    return wanted


def pytest_generate_tests(metafunc) -> None:
    """A test that uses a broker runs once per kind (``kafka_broker_kind``)."""
    if "kafka_broker_kind" in metafunc.fixturenames:
        metafunc.parametrize("kafka_broker_kind", broker_kinds(), scope="session")


def pytest_collection_modifyitems(config, items) -> None:
    """Mark ``kafka`` every test that uses a broker, wherever it is (the tests under
    ``tests/kafka/`` are marked by their folder): ``make test-kafka`` runs them all."""
    for item in items:
        if "kafka_broker_kind" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)


@pytest.fixture(scope="session")
def kafka_broker(kafka_broker_kind):
    """The session's embedded broker of this kind (stopped, by PID, at the session's end)."""
    with EmbeddedBroker(kind=kafka_broker_kind) as broker:
        yield broker


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker) -> str:
    return kafka_broker.bootstrap_servers


class KafkaTestHelper:
    """Unique names plus small admin/produce/consume helpers for one test."""

    def __init__(self, bootstrap_servers: str, test_name: str,
                 client_config: Optional[dict] = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        #: more kafka-python settings of every client (e.g. TLS, for a TLS broker)
        self.client_config = dict(client_config or {})
        #: Record timestamps in tests are offsets from this recent hour (seconds, and ms).
        self.base = recent_base_seconds()
        self.base_ms = self.base * 1000
        safe = "".join(ch if ch.isalnum() else "-" for ch in test_name)[:40]
        self._prefix = f"{safe}-{uuid.uuid4().hex[:8]}"
        self._counter = 0

    def unique(self, what: str) -> str:
        self._counter += 1
        return f"{self._prefix}-{what}{self._counter}"

    def create_topic(self, partitions: int = 1, name: Optional[str] = None) -> str:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        topic = name or self.unique("topic")
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **self.client_config)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        finally:
            admin.close()
        return topic

    def group(self) -> str:
        return self.unique("group")

    def produce(self, topic: str, records: Iterable[Tuple], partition: Optional[int] = None) -> None:
        """Write ``(key, value[, timestamp_ms[, partition[, headers]]])`` tuples and flush."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, **self.client_config)
        try:
            futures = []
            for record in records:
                key, value = record[0], record[1]
                timestamp_ms = record[2] if len(record) > 2 else None
                target = record[3] if len(record) > 3 else partition
                headers = record[4] if len(record) > 4 else None
                futures.append(producer.send(topic, key=key, value=value, partition=target,
                                             timestamp_ms=timestamp_ms, headers=headers))
            producer.flush()
            for future in futures:
                future.get(timeout=30)
        finally:
            producer.close()

    def consume_all(self, topic: str, expected: Optional[int] = None, timeout_s: float = 20.0) -> List:
        """Every record now in ``topic`` (all partitions, from the beginning), read without a group.

        Stops at the log end seen by the fetches (``highwater``), or once ``expected`` records
        have been read.
        """
        import time

        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False,
                                 **self.client_config)
        try:
            partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            records = []
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                batch = poll_records(consumer, 0.3)
                for tp_records in batch.values():
                    records.extend(tp_records)
                if expected is not None and len(records) >= expected:
                    break
                done = all(consumer.highwater(tp) is not None and consumer.position(tp) >= consumer.highwater(tp)
                           for tp in partitions)
                if expected is None and not batch and done:
                    break
            return sorted(records, key=lambda r: (r.partition, r.offset))
        finally:
            consumer.close()

    def committed(self, group_id: str, topic: str, partitions: int = 1) -> Dict[int, Optional[int]]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=group_id,
                                 enable_auto_commit=False, **self.client_config)
        try:
            return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
        finally:
            consumer.close()


@pytest.fixture
def kafka(bootstrap_servers, request) -> KafkaTestHelper:
    """Per-test helper: ``kafka.create_topic(partitions)``, ``kafka.group()``, ``kafka.produce``."""
    return KafkaTestHelper(bootstrap_servers, request.node.name)


def _plain_equality(expected, actual) -> bool:
    return expected == actual


def equal_to_any_order(expected):
    """``equal_to`` by plain equality: Beam's default first sorts, and with values that do not
    sort (dicts, None mixed with str) its fallback then sees an exhausted iterable."""
    from apache_beam.testing.util import equal_to

    return equal_to(expected, equals_fn=_plain_equality)
