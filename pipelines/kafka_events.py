"""A job's events from Kafka and its panes back to Kafka (``--source kafka``).

:class:`ReadKafkaEvents` is the Kafka counterpart of :class:`pipelines.sources.ReadEvents`:
JSON events from a topic (``transforms.kafka.ReadFromKafka``: unbounded, one watermark per
partition), parsed into typed events stamped with their ``timestamp`` field, plus everything
that could not be read as dead letters. The source's watermark follows the same event
times: ``timestamp_fn`` reads the field from the payload, so the watermark of each partition
is the newest event time it has delivered (not the producer's clock).

Dead letters come from two places, and neither is dropped:

* Kafka decoding (bytes that are not UTF-8, a payload without a usable ``timestamp``):
  :class:`~transforms.kafka.KafkaDeadLetter`, with the original bytes and the record's topic,
  partition and offset;
* parsing (valid JSON with a bad field, e.g. a non-numeric score):
  :class:`~transforms.parsing.DeadLetter`.

``.dead_letter`` holds both as ``DeadLetter`` records (a Kafka one's ``source`` names its
coordinates, ``ReadFromKafka[topic/partition@offset]``), for the job's usual dead-letter
output; with ``dead_letter_topic`` both are also written to that topic with their original
bytes and the reason in headers (``dead_letter.reason``, ``dead_letter.source`` and, for
Kafka ones, ``dead_letter.topic`` / ``.partition`` / ``.offset``).

:class:`WritePanesToKafka` writes described panes (:class:`triggers.panes.DescribePanes`
records: key, value, window, timestamp, pane timing / index) as JSON, keyed by the pane's
key, so that every pane of one team lands in one partition, in order.

Example (needs a broker, e.g. ``make kafka``):

>>> import apache_beam as beam
>>> from pipelines.events import GameEvent
>>> with beam.Pipeline() as p:  # doctest: +SKIP
...     events = p | ReadKafkaEvents(GameEvent, "127.0.0.1:9092", "game-events", max_records=10)
...     _ = events.parsed | beam.Map(print)
"""

from __future__ import annotations

import json
from typing import Any, List, NamedTuple, Optional, Tuple, Type

import apache_beam as beam

from transforms.kafka import (
    ReadFromKafka,
    WriteDeadLettersToKafka,
    WriteToKafka,
    utf8,
)
from transforms.kafka.records import KafkaDeadLetter
from transforms.kafka.security import KafkaSecurity
from transforms.parsing import DeadLetter, ParseJson

#: The payload field that carries an event's event time (seconds since the epoch).
TIMESTAMP_FIELD = "timestamp"


def event_time_of(record: Any) -> float:
    """Event time of a Kafka record whose value is a JSON event: its ``timestamp`` field.

    Raises (and the source dead-letters the record) when the value is not a JSON object with
    a numeric ``timestamp``.

    >>> from transforms.kafka import KafkaRecord
    >>> event_time_of(KafkaRecord("t", 0, 0, None, '{"timestamp": 12.5}', 99.0))
    12.5
    """
    fields = json.loads(record.value)
    if not isinstance(fields, dict):
        raise ValueError(f"the value is JSON {type(fields).__name__}, not an object")
    value = fields.get(TIMESTAMP_FIELD)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"field {TIMESTAMP_FIELD!r} is {value!r}, not seconds since the epoch")
    return float(value)


def kafka_dead_letter_as_dead_letter(dead: KafkaDeadLetter) -> DeadLetter:
    """A Kafka dead letter as the jobs' :class:`DeadLetter`; ``source`` names its coordinates."""
    raw = "" if dead.value is None else dead.value.decode("utf-8", errors="replace")
    return DeadLetter(raw, dead.reason,
                      f"ReadFromKafka[{dead.topic}/{dead.partition}@{dead.offset}]")


def _dead_letter_value(dead: DeadLetter) -> bytes:
    return dead.raw.encode("utf-8")


def _dead_letter_headers(dead: DeadLetter) -> List[Tuple[str, bytes]]:
    return [("dead_letter.reason", dead.reason.encode("utf-8")),
            ("dead_letter.source", dead.source.encode("utf-8"))]


def _value(pair: Tuple[Any, Any]) -> Any:
    return pair[1]


class KafkaEvents(NamedTuple):
    """What :class:`ReadKafkaEvents` returns: typed events and dead letters."""

    parsed: beam.PCollection
    dead_letter: beam.PCollection


class ReadKafkaEvents(beam.PTransform):
    """Read JSON events of ``event_type`` from ``topic``; returns :class:`KafkaEvents`.

    ``start``: "earliest" (default), "latest" or "committed" (needs ``group_id``).
    ``max_records`` (per partition) or ``bounded`` (stop at the log end seen at start) end
    the read; without them it is unbounded. ``idle_timeout_seconds``: after this long with
    nothing new, an idle partition stops holding the watermark back (None: never).
    ``dead_letter_topic``: also write every dead letter there (see the module docstring).
    ``security``: TLS / SASL settings of every Kafka client (:mod:`transforms.kafka.security`).
    """

    def __init__(
        self,
        event_type: Type[tuple],
        bootstrap_servers: str,
        topic: str,
        *,
        start: str = "earliest",
        group_id: Optional[str] = None,
        max_records: Optional[int] = None,
        bounded: bool = False,
        idle_timeout_seconds: Optional[float] = 10.0,
        dead_letter_topic: Optional[str] = None,
        batch_max_records: Optional[int] = None,
        batch_max_records_per_partition: Optional[int] = None,
        label: Optional[str] = None,
        security: Optional[KafkaSecurity] = None,
    ) -> None:
        super().__init__(label)
        # Built now, so that a bad server list, topic or position fails at construction.
        self._read = ReadFromKafka(
            bootstrap_servers, topic, start=start, group_id=group_id, value_decoder=utf8,
            key_decoder=None, timestamp_fn=event_time_of, bounded=bounded,
            max_records=max_records, idle_timeout_seconds=idle_timeout_seconds,
            # Short reads where the runner does not plan batches (a micro-batch there waits
            # for its slowest partition read; the defaults, 1 s per bundle and 0.5 s polls,
            # add ~2 s to every batch on 2 cores).
            seconds_per_bundle=0.25, poll_timeout_seconds=0.05,
            batch_max_records=batch_max_records,
            batch_max_records_per_partition=batch_max_records_per_partition,
            security=security)
        self._parse = ParseJson(event_type)
        self._dead_letter_writers = None
        if dead_letter_topic is not None:
            self._dead_letter_writers = (
                WriteDeadLettersToKafka(bootstrap_servers, dead_letter_topic, security=security),
                WriteToKafka(bootstrap_servers, dead_letter_topic, value_fn=_dead_letter_value,
                             headers_fn=_dead_letter_headers, security=security))
        self.description = (
            f"reading {topic} at {bootstrap_servers} from {start}"
            + (f", {max_records} records per partition" if max_records else "")
            + (", up to the end of the log" if bounded else "")
            + ("" if max_records or bounded else " (unbounded: stop with Ctrl-C)"))

    def expand(self, pbegin) -> KafkaEvents:
        read = pbegin | "ReadFromKafka" >> self._read
        # A topic is a stream: --max_records and --bounded only say when this run stops
        # reading it. Declared unbounded, the events keep streaming semantics downstream
        # (processing-time early firings are valid on them), on every runner.
        read.records.is_bounded = False
        read.dead_letter.is_bounded = False
        parsed = read.records | "Values" >> beam.Map(_value) | "Parse" >> self._parse
        kafka_dead = read.dead_letter
        if self._dead_letter_writers is not None:
            kafka_writer, parse_writer = self._dead_letter_writers
            _ = kafka_dead | "KafkaDeadLettersToTopic" >> kafka_writer
            _ = parsed.dead_letter | "ParseDeadLettersToTopic" >> parse_writer
        dead_letters = (
            (kafka_dead | "AsDeadLetters" >> beam.Map(kafka_dead_letter_as_dead_letter),
             parsed.dead_letter)
            | "AllDeadLetters" >> beam.Flatten())
        return KafkaEvents(parsed.parsed, dead_letters)


def pane_key(record: dict) -> Optional[str]:
    """The Kafka key of a described pane: its key as text (None for a keyless pane)."""
    return None if record["key"] is None else str(record["key"])


def pane_json(record: dict) -> bytes:
    """A described pane as compact JSON (keys sorted), as written to the output topic."""
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode("utf-8")


class WritePanesToKafka(beam.PTransform):
    """Write described panes to ``topic`` as JSON, keyed by the pane's key (see module doc);
    ``exactly_once``: in Kafka transactions (:mod:`transforms.kafka.transactions`)."""

    def __init__(self, bootstrap_servers: str, topic: str, exactly_once: bool = False,
                 label: Optional[str] = None, security: Optional[KafkaSecurity] = None) -> None:
        super().__init__(label)
        self._write = WriteToKafka(bootstrap_servers, topic, key_fn=pane_key,
                                   value_serializer=pane_json, exactly_once=exactly_once,
                                   security=security)

    def expand(self, described):
        return described | "Write" >> self._write


__all__ = ["ReadKafkaEvents", "KafkaEvents", "WritePanesToKafka", "event_time_of",
           "kafka_dead_letter_as_dead_letter", "pane_json", "pane_key"]
