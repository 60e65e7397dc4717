"""WriteToKafka: a keyed Kafka sink on kafka-python, at-least-once or exactly-once.

Each element becomes one Kafka record: ``key_fn(element)`` is its key (records with one key
go to one partition, so their order is kept), ``value_fn(element)`` its value, both turned
into bytes by the serializers; the record's timestamp is the element's event time, so a
reader gets the same event times back.

Delivery: the producer waits for all in-sync replicas (``acks="all"``) and is idempotent
(kafka-python 3's ``enable_idempotence=True``, so its own retries never duplicate a record).
Every bundle ends with a flush and a check of every send: a record that could not be written
fails the bundle with the broker's error, the runner retries the bundle, and nothing is lost
(a retried bundle may write some records twice: at-least-once). With ``exactly_once=True``
each bundle is one Kafka transaction, never committed twice (:mod:`transforms.kafka.
transactions`).

:class:`WriteDeadLettersToKafka` writes the source's dead letters to a dead-letter topic with
their original key and bytes, and the reason and origin as headers, ready to be replayed.

>>> import apache_beam as beam
>>> from transforms.kafka import WriteToKafka, json_bytes
>>> with beam.Pipeline() as p:  # doctest: +SKIP
...     _ = (p | beam.Create([("alice", 3), ("bob", 5)])
...            | WriteToKafka("127.0.0.1:9092", "scores", key_fn=lambda kv: kv[0],
...                           value_fn=lambda kv: kv[1], value_serializer=json_bytes))
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP

from transforms.kafka.config import check_client_config, servers_list
from transforms.kafka.connectivity import (BROKER_WAIT_SECONDS, any_server_accepts,
                                           quiet_connection_retries, wait_for_a_server)
from transforms.kafka.offsets import KafkaUnavailableError, unavailable_message
from transforms.kafka.records import KafkaDeadLetter
from transforms.kafka.security import (KafkaSecurity, as_security, as_security_error,
                                       check_tls_path)
from transforms.kafka.transactions import BundleTransaction

__all__ = ["WriteToKafka", "WriteDeadLettersToKafka", "to_bytes", "json_bytes"]

METRICS_NAMESPACE = "transforms.kafka"
#: Producer settings the sink controls (its delivery guarantee depends on them).
_RESERVED_PRODUCER_KEYS = ("bootstrap_servers", "key_serializer", "value_serializer", "acks",
                           "enable_idempotence", "transactional_id")
#: Seconds a bundle's flush may take, while a broker accepts connections, before the bundle
#: fails (and is retried).
FLUSH_TIMEOUT_SECONDS = 120.0
#: A flush that has not finished after this many seconds checks that a broker still accepts
#: connections: one that went away in the middle of a bundle is then waited for, and said so.
FLUSH_CHECK_SECONDS = 2.0


_LOGGER = logging.getLogger(__name__)


class _Send(NamedTuple):
    """One record of the bundle handed to the producer, and what became of it."""
    future: Any
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Optional[list]
    timestamp_ms: Optional[int]


def to_bytes(data: Any) -> Optional[bytes]:
    """bytes as they are, str as UTF-8, None as null (a tombstone); TypeError otherwise."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    raise TypeError(
        f"WriteToKafka cannot turn a {type(data).__name__} ({data!r:.60}) into bytes: pass "
        "value_serializer / key_serializer (e.g. transforms.kafka.json_bytes)"
    )


def json_bytes(data: Any) -> bytes:
    """Compact UTF-8 JSON; NamedTuples as objects."""
    if hasattr(data, "_asdict"):
        data = data._asdict()
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")


def delivery_timeout_ms(broker_wait_seconds: float) -> int:
    """The producer's ``delivery_timeout_ms`` for a sink that waits ``broker_wait_seconds``
    for a broker that went away: a record sent before it went must not expire while the
    bundle waits (kafka-python's default, 120 s, would fail the bundle during a longer wait).

    >>> delivery_timeout_ms(300.0)
    420000
    """
    return int((broker_wait_seconds + FLUSH_TIMEOUT_SECONDS) * 1000)


def _identity(element: Any) -> Any:
    return element


def _check_callable(function: Any, name: str) -> None:
    if function is not None and not callable(function):
        raise TypeError(f"{name} must be a function, got {function!r}")


class _WriteFn(beam.DoFn):
    """Writes each bundle with a producer of its own, flushed and closed at the bundle's end
    (no client outlives its bundle: none is left reconnecting to a broker that went away);
    with ``transactional_id``, in one transaction (:mod:`transforms.kafka.transactions`)."""

    def __init__(self, servers, topic, key_fn, value_fn, key_serializer, value_serializer,
                 headers_fn, use_event_time, producer_config,
                 transactional_id: Optional[str] = None,
                 broker_wait_seconds: float = BROKER_WAIT_SECONDS,
                 security: Optional[KafkaSecurity] = None) -> None:
        self._servers = servers
        self._topic = topic
        self._key_fn = key_fn
        self._value_fn = value_fn
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._headers_fn = headers_fn
        self._use_event_time = use_event_time
        self._producer_config = producer_config
        self._transactional_id = transactional_id
        self._broker_wait_seconds = broker_wait_seconds
        # The settings with secrets by reference: read where the producer is made.
        self._security = security
        self._producer = None
        self._transaction = None
        self._skip = False
        self._pending: List = []
        self._written = Metrics.counter(METRICS_NAMESPACE, "records_written")

    def start_bundle(self) -> None:
        self._pending = []
        self._producer = self._transaction = None
        self._skip = False

    def _open(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaConfigurationError, KafkaError

        wait = self._broker_wait_seconds
        if not wait_for_a_server(self._servers, wait, f"the write to {self._topic}"):
            raise KafkaUnavailableError(unavailable_message(
                self._servers, ConnectionRefusedError(
                    f"no TCP connection opened in {wait:g} s (broker_wait_seconds)")))
        check_tls_path(self._servers, self._security)
        if self._transactional_id is not None:
            self._transaction = BundleTransaction(self._servers, self._topic,
                                                  self._transactional_id, self._producer_config,
                                                  self._security)
            if self._transaction.begin():
                self._producer = self._transaction.producer
            else:
                self._skip = True  # a replayed bundle its first run committed
            return
        quiet_connection_retries()
        config = dict(self._producer_config)
        if self._security is not None:
            config.update(self._security.client_kwargs())
        config["acks"] = "all"
        if "enable_idempotence" in KafkaProducer.DEFAULT_CONFIG:
            config["enable_idempotence"] = True
        config.setdefault("delivery_timeout_ms", delivery_timeout_ms(self._broker_wait_seconds))
        try:
            self._producer = KafkaProducer(bootstrap_servers=list(self._servers), **config)
        except KafkaConfigurationError:
            raise
        except (KafkaError, OSError) as error:
            refused = as_security_error(error, self._servers, self._security)
            if refused is not None:
                raise refused from None
            raise KafkaUnavailableError(unavailable_message(self._servers, error)) from error

    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        if self._producer is None and not self._skip:
            self._open()
        if self._skip:
            return
        key = self._key_serializer(self._key_fn(element)) if self._key_fn else None
        value = self._value_serializer(self._value_fn(element))
        headers = list(self._headers_fn(element)) if self._headers_fn else None
        timestamp_ms = None
        if self._use_event_time and MIN_TIMESTAMP < timestamp < MAX_TIMESTAMP and timestamp.micros >= 0:
            timestamp_ms = timestamp.micros // 1000
        self._send(key, value, headers, timestamp_ms)
        if len(self._pending) >= 10000:
            self._settle()

    def _send(self, key, value, headers, timestamp_ms) -> None:
        future = self._producer.send(
            self._topic, key=key, value=value, headers=headers, timestamp_ms=timestamp_ms)
        self._pending.append(_Send(future, key, value, headers, timestamp_ms))

    def _settle(self) -> None:
        """Flush and check every send of this bundle; raise the first failure."""
        from kafka.errors import KafkaError

        pending, self._pending = self._pending, []
        try:
            self._flush()
            rejected = self._rejected_sequences(pending)
            if rejected:
                self._send_again(rejected)
        except KafkaError as error:
            raise RuntimeError(
                f"WriteToKafka could not write to topic {self._topic!r} at "
                f"{','.join(self._servers)}: {type(error).__name__}: {error}. The bundle fails "
                "and is retried; no record is dropped."
            ) from error
        self._written.inc(len(pending))

    def _rejected_sequences(self, pending: List[_Send]) -> List[_Send]:
        """Wait for every send; return those a broker rejected for their idempotent sequence
        number (a broker restarted without the producer's state refuses the sequence after
        the last it kept: those records were not written). Raise any other failure."""
        from kafka.errors import OutOfOrderSequenceNumberError, UnknownProducerIdError

        rejected = []
        for send in pending:
            try:
                send.future.get(timeout=FLUSH_TIMEOUT_SECONDS)
            except (OutOfOrderSequenceNumberError, UnknownProducerIdError):
                if self._transaction is not None:
                    raise  # the transaction aborts; the bundle is retried whole
                rejected.append(send)
        return rejected

    def _send_again(self, rejected: List[_Send]) -> None:
        """Send the rejected records once more with a new producer (a new producer id, whose
        sequence starts again); a second failure fails the bundle."""
        _LOGGER.warning(
            "WriteToKafka: a broker of %s rejected %d record(s) of the bundle for their "
            "producer sequence number (it restarted without the producer's state); they were "
            "not written and are sent again with a new producer", self._topic, len(rejected))
        self._close()
        self._open()
        for send in rejected:
            self._send(send.key, send.value, send.headers, send.timestamp_ms)
        again, self._pending = self._pending, []
        self._flush()
        for send in again:
            send.future.get(timeout=FLUSH_TIMEOUT_SECONDS)

    def _flush(self) -> None:
        """Flush the producer; while records are in flight and no broker accepts a connection,
        wait for one (up to ``broker_wait_seconds``, one line each way) instead of retrying
        silently until the records expire: the producer sends them once a broker is back."""
        from kafka.errors import KafkaTimeoutError

        deadline = time.monotonic() + FLUSH_TIMEOUT_SECONDS
        while True:
            try:
                self._producer.flush(timeout=FLUSH_CHECK_SECONDS)
                return
            except KafkaTimeoutError:
                if any_server_accepts(self._servers):
                    if time.monotonic() >= deadline:
                        raise
                    continue
            wait = self._broker_wait_seconds
            if not wait_for_a_server(self._servers, wait, f"the write to {self._topic}"):
                raise KafkaUnavailableError(unavailable_message(
                    self._servers, ConnectionRefusedError(
                        f"the broker went away during the bundle's flush and no TCP "
                        f"connection opened in {wait:g} s (broker_wait_seconds)")))
            deadline = time.monotonic() + FLUSH_TIMEOUT_SECONDS

    def finish_bundle(self) -> None:
        if self._producer is None:
            return
        try:
            self._settle()
            if self._transaction is not None:
                self._transaction.commit()
        except BaseException:
            if self._transaction is not None:
                self._transaction.abort()
            raise
        finally:
            self._close()

    def teardown(self) -> None:
        if self._transaction is not None:
            self._transaction.abort()
        self._close()

    def _close(self) -> None:
        producer, self._producer = self._producer, None
        self._transaction = None
        if producer is not None:
            try:
                producer.close(timeout=10)
            except Exception:  # closed already (a transaction closes its producer)
                pass


class WriteToKafka(beam.PTransform):
    """Write each element as one Kafka record to ``topic``; see the module docstring.

    Args:
      bootstrap_servers: "host:port[,host:port]" or a list.
      topic: the topic to write to (it must exist, or the broker must auto-create topics).
      key_fn: ``element -> key`` (None: records without a key, spread over partitions).
      value_fn: ``element -> value`` (default: the element itself).
      key_serializer, value_serializer: ``value -> bytes`` (default :func:`to_bytes`: bytes
        and str only, so a forgotten serializer is an error, not a repr in the topic).
      headers_fn: ``element -> [(name, bytes), ...]``.
      use_event_time: stamp records with the element's event time (else the producer's clock).
      producer_config: extra kafka-python ``KafkaProducer`` settings (``linger_ms``...);
        ``acks`` and idempotence are fixed by the sink; no secret's value is accepted here.
      security: TLS / SASL settings, a :class:`~transforms.kafka.security.KafkaSecurity` or a
        dict of ``KafkaSecurity.of``'s arguments; secrets by reference only (an environment
        variable or a file, read by the worker that makes the producer).
      exactly_once: write each bundle in one Kafka transaction, with a marker that keeps a
        bundle the runner runs again (a retried task, a micro-batch replayed after a crash)
        from being written twice: read the topic with ``isolation_level="read_committed"``.
        Needs a broker with transactions (Apache Kafka; the embedded noida broker, not
        tansu) and, to be exactly once, a runner that names its bundles and replays them
        with the same input (the SparkRunner; see :mod:`transforms.kafka.transactions`).
        Default: at-least-once.
      transactional_id: the prefix of the transactions' ids (default ``beam-<topic>``); two
        sinks writing at once need different ones.
      broker_wait_seconds: how long a bundle waits for a broker that accepts no connection
        (a restart, an outage) before its task fails; it says so in one log line each way.
        Default 300 s; a batch job that should fail fast on a wrong address passes less.
    """

    def __init__(
        self,
        bootstrap_servers: Union[str, Sequence[str]],
        topic: str,
        key_fn: Optional[Callable[[Any], Any]] = None,
        value_fn: Optional[Callable[[Any], Any]] = None,
        key_serializer: Optional[Callable[[Any], Optional[bytes]]] = None,
        value_serializer: Optional[Callable[[Any], Optional[bytes]]] = None,
        headers_fn: Optional[Callable[[Any], Sequence[Tuple[str, bytes]]]] = None,
        use_event_time: bool = True,
        producer_config: Optional[Dict[str, Any]] = None,
        exactly_once: bool = False,
        transactional_id: Optional[str] = None,
        label: Optional[str] = None,
        broker_wait_seconds: float = BROKER_WAIT_SECONDS,
        security: Optional[Union[KafkaSecurity, Dict[str, Any]]] = None,
    ) -> None:
        super().__init__(label)
        servers = servers_list(bootstrap_servers)
        security = as_security(security)
        if (isinstance(broker_wait_seconds, bool) or not isinstance(broker_wait_seconds, (int, float))
                or not broker_wait_seconds >= 0):
            raise ValueError(f"broker_wait_seconds={broker_wait_seconds!r}: give the seconds a "
                             "write may wait for a broker, 0 or more")
        if transactional_id is not None and not exactly_once:
            raise ValueError("transactional_id is for exactly_once=True: pass both, or neither")
        if transactional_id is not None and (not isinstance(transactional_id, str)
                                             or not transactional_id):
            raise ValueError(f"transactional_id={transactional_id!r}: give a non-empty string")
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic={topic!r}: give the name of the topic to write to")
        for function, name in ((key_fn, "key_fn"), (value_fn, "value_fn"),
                               (key_serializer, "key_serializer"),
                               (value_serializer, "value_serializer"), (headers_fn, "headers_fn")):
            _check_callable(function, name)
        config = check_client_config(producer_config, _RESERVED_PRODUCER_KEYS, "producer_config",
                                     security)
        self._fn = _WriteFn(servers, topic, key_fn, value_fn or _identity,
                            key_serializer or to_bytes, value_serializer or to_bytes,
                            headers_fn, bool(use_event_time), config,
                            (transactional_id or f"beam-{topic}") if exactly_once else None,
                            float(broker_wait_seconds), security)

    def expand(self, pcoll):
        return pcoll | "Write" >> beam.ParDo(self._fn)


def _dead_letter_headers(dead: KafkaDeadLetter) -> List[Tuple[str, bytes]]:
    return list(dead.headers) + [
        ("dead_letter.reason", dead.reason.encode("utf-8")),
        ("dead_letter.topic", dead.topic.encode("utf-8")),
        ("dead_letter.partition", str(dead.partition).encode("ascii")),
        ("dead_letter.offset", str(dead.offset).encode("ascii")),
    ]


def _dead_letter_key(dead: KafkaDeadLetter) -> Optional[bytes]:
    return dead.key


def _dead_letter_value(dead: KafkaDeadLetter) -> Optional[bytes]:
    return dead.value


class WriteDeadLettersToKafka(WriteToKafka):
    """Write :class:`KafkaDeadLetter` records to a dead-letter topic, bytes untouched.

    The record keeps its original key and value; headers ``dead_letter.reason``,
    ``dead_letter.topic``, ``dead_letter.partition`` and ``dead_letter.offset`` say why and
    where from (the original headers come first).
    """

    def __init__(self, bootstrap_servers: Union[str, Sequence[str]], topic: str,
                 producer_config: Optional[Dict[str, Any]] = None,
                 label: Optional[str] = None,
                 broker_wait_seconds: float = BROKER_WAIT_SECONDS,
                 security: Optional[Union[KafkaSecurity, Dict[str, Any]]] = None) -> None:
        super().__init__(bootstrap_servers, topic, key_fn=_dead_letter_key,
                         value_fn=_dead_letter_value, headers_fn=_dead_letter_headers,
                         producer_config=producer_config,
                         broker_wait_seconds=broker_wait_seconds, label=label,
                         security=security)
