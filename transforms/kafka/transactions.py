"""Exactly-once bundles for WriteToKafka: one Kafka transaction a bundle, written once.

With ``WriteToKafka(exactly_once=True)`` every bundle's records go to Kafka in one
transaction: a consumer that reads committed records only (``isolation_level=
"read_committed"``) sees all of a bundle or nothing of it. That alone does not stop a bundle
from being written twice when a runner runs it again (a retried task, a micro-batch replayed
after a crash). So each transaction also commits a *marker*: an offset, in a consumer group of
the sink's own, saying which bundle it was; a bundle whose marker is already there is not
written again.

This needs bundles with names a replay reproduces: the project's SparkRunner gives each bundle
one (its run, micro-batch, stage, partition and number: ``runners/spark/worker/replay_names.py``),
in the worker's environment variable ``BEAM_SPARK_BUNDLE``, and replays a batch with the same
input. On a runner that names no bundle, each bundle is still one transaction, committed once,
but a bundle the runner runs twice is written twice.

Transactions need a broker that supports them (Apache Kafka, the embedded noida broker). Some
accept the requests but do not isolate aborted records (tansu shows them to read-committed
readers): the first transactional bundle of a worker process checks, with an aborted record
on a probe topic of its own, and fails with a message that says so.

>>> bundle_marker({"batch": 3, "bundle": 2})
3145730
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from transforms.kafka.connectivity import quiet_connection_retries
from transforms.kafka.offsets import KafkaUnavailableError, unavailable_message
from transforms.kafka.security import KafkaSecurity, as_security_error

_LOG = logging.getLogger(__name__)

#: Where the SparkRunner names the running bundle (see the module docstring).
BUNDLE_NAME_VARIABLE = "BEAM_SPARK_BUNDLE"
#: Bundles a task may run in one micro-batch (a marker is batch * this + bundle).
_BUNDLES_PER_BATCH = 1 << 20
#: The topic the isolation check writes its aborted record to.
PROBE_TOPIC = "__beam_transactions_probe"
#: Bootstrap servers -> None (transactions isolate) or why not, per worker process.
_CHECKED: Dict[Tuple[str, ...], Optional[str]] = {}


def current_bundle_name() -> Optional[Dict[str, Any]]:
    """The name the runner gave the running bundle, or None."""
    text = os.environ.get(BUNDLE_NAME_VARIABLE)
    return json.loads(text) if text else None


def bundle_marker(name: Dict[str, Any]) -> int:
    """A bundle's place in its task's order: later bundles have larger markers."""
    return name["batch"] * _BUNDLES_PER_BATCH + name["bundle"]


class TransactionsUnsupportedError(RuntimeError):
    """The broker does not support Kafka transactions."""


class BundleTransaction:
    """One bundle's transaction (see the module docstring).

    Args:
      servers: the bootstrap servers.
      topic: the topic written (the marker lives in the sink's group, on its partition 0).
      prefix: the transactional id's prefix (the sink's; two sinks must not share it).
      producer_config: extra kafka-python producer settings.
      security: TLS / SASL settings of every client the transaction makes (secrets by
        reference: read here, on the worker, when the clients are made).
    """

    def __init__(self, servers: Sequence[str], topic: str, prefix: str,
                 producer_config: Dict[str, Any],
                 security: Optional[KafkaSecurity] = None) -> None:
        self._servers = list(servers)
        self._topic = topic
        self._security = security
        self._config = dict(producer_config)
        self._config.setdefault("retry_backoff_ms", 10)  # measured: 2 x ~200 ms otherwise
        self._name = current_bundle_name()
        if self._name is None:
            self._id = f"{prefix}.{uuid.uuid4().hex}"
        else:
            stage = hashlib.sha1(self._name["stage"].encode("utf-8")).hexdigest()[:12]
            self._id = f"{prefix}.{self._name['run']}.{stage}.{self._name['partition']}"
        self.producer = None

    def begin(self) -> bool:
        """Open the bundle's transaction; False when the bundle was committed before (a
        replay: write nothing)."""
        from kafka import KafkaProducer
        from kafka.errors import KafkaConfigurationError, KafkaError

        quiet_connection_retries()
        try:
            producer = KafkaProducer(bootstrap_servers=self._servers, acks="all",
                                     enable_idempotence=True, transactional_id=self._id,
                                     **self._config, **self._security_kwargs())
        except KafkaConfigurationError:
            raise
        except (KafkaError, OSError) as error:
            refused = as_security_error(error, self._servers, self._security)
            if refused is not None:
                raise refused from None
            raise KafkaUnavailableError(unavailable_message(self._servers, error)) from error
        try:
            # Fences any earlier producer of this id (a task attempt that lost its way) and
            # aborts its open transaction.
            producer.init_transactions()
            why_not = _isolation_problem(self._servers, self._config, self._security)
        except KafkaError as error:
            why_not = f"it refused them ({type(error).__name__}: {error})"
        if why_not is not None:
            producer.close(timeout=5)
            raise TransactionsUnsupportedError(
                f"WriteToKafka(exactly_once=True) needs Kafka transactions, and the broker at "
                f"{','.join(self._servers)} does not give them: {why_not}. Use a broker that "
                "does (Apache Kafka; the embedded noida broker), or leave exactly_once off: "
                "at-least-once delivery.")
        if self._name is not None and self._committed_before():
            producer.close(timeout=5)
            return False
        producer.begin_transaction()
        self.producer = producer
        return True

    def commit(self) -> None:
        """Commit the bundle's records (flushed before) and its marker, at once."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        producer, self.producer = self.producer, None
        try:
            if self._name is not None:
                marker = OffsetAndMetadata(bundle_marker(self._name) + 1, "", -1)
                producer.send_offsets_to_transaction(
                    {TopicPartition(self._topic, 0): marker}, self._group())
            producer.commit_transaction()
        finally:
            producer.close(timeout=5)

    def abort(self) -> None:
        producer, self.producer = self.producer, None
        if producer is None:
            return
        try:
            producer.abort_transaction()
        except Exception:  # the bundle fails anyway; a new producer of this id aborts it
            pass
        finally:
            producer.close(timeout=5)

    def _security_kwargs(self) -> Dict[str, Any]:
        return {} if self._security is None else self._security.client_kwargs()

    def _group(self) -> str:
        return f"{self._id}.committed"

    def _committed_before(self) -> bool:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self._servers, group_id=self._group(),
                                 enable_auto_commit=False, **self._security_kwargs())
        try:
            committed = consumer.committed(TopicPartition(self._topic, 0))
        finally:
            consumer.close(autocommit=False)
        return committed is not None and committed > bundle_marker(self._name)


def _isolation_problem(servers: Sequence[str], config: Dict[str, Any],
                       security: Optional[KafkaSecurity] = None) -> Optional[str]:
    """None if the brokers hide an aborted record from a read-committed reader (checked once
    per worker process); else what went wrong."""
    key = tuple(servers)
    if key not in _CHECKED:
        _CHECKED[key] = _probe_isolation(list(servers), config, security)
    return _CHECKED[key]


def _probe_isolation(servers: List[str], config: Dict[str, Any],
                     security: Optional[KafkaSecurity] = None) -> Optional[str]:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    secured = {} if security is None else security.client_kwargs()
    try:
        admin = KafkaAdminClient(bootstrap_servers=servers, **secured)
        try:
            admin.create_topics([NewTopic(PROBE_TOPIC, 1, 1)])
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
    except KafkaError as error:  # not allowed to create it here: nothing to check with
        _LOG.info("cannot check transaction isolation on %s (%s): trusting the broker",
                  ",".join(servers), error)
        return None
    marker = f"aborted-{uuid.uuid4().hex}".encode("ascii")
    producer = KafkaProducer(bootstrap_servers=servers, acks="all", enable_idempotence=True,
                             transactional_id=f"beam-probe-{uuid.uuid4().hex}",
                             **{**config, "retry_backoff_ms": config.get("retry_backoff_ms", 10)},
                             **secured)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(PROBE_TOPIC, marker).get(timeout=30)
        producer.abort_transaction()
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(bootstrap_servers=servers, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=2000, **secured)
    try:
        partition = TopicPartition(PROBE_TOPIC, 0)
        consumer.assign([partition])
        end = consumer.end_offsets([partition])[partition]
        consumer.seek(partition, max(0, end - 10))
        seen = any(record.value == marker for record in consumer)
    finally:
        consumer.close(autocommit=False)
    return "it shows aborted records to read-committed readers" if seen else None
