"""Kafka IO in pure Python (kafka-python): a splittable-DoFn source and an at-least-once sink.

* :class:`ReadFromKafka` (``read.py``): per-partition offset-range restrictions, start at
  earliest / latest / a timestamp / the group's committed offsets, bounded or unbounded,
  event time from the record or a function, a per-partition watermark with idle advancement
  (``watermark.py``), offsets committed after output is durable, dead letters for bad records.
* :class:`WriteToKafka` / :class:`WriteDeadLettersToKafka` (``write.py``): keyed records,
  ``acks="all"``, idempotent producer, flushed and checked at every bundle end.
* :class:`KafkaRecord`, :class:`KafkaDeadLetter` and decoders (``records.py``).
* :class:`KafkaSecurity` (``security.py``): TLS and SASL settings of every client, secrets
  by reference (an environment variable or a file), never by value.

For tests and the demo, ``services/broker.py`` starts a Kafka-protocol broker on loopback
(``make kafka``).
"""

from transforms.kafka.offsets import KafkaUnavailableError
from transforms.kafka.read import DEAD_LETTER, RECORDS, PartitionRange, ReadFromKafka
from transforms.kafka.records import (
    KafkaDeadLetter,
    KafkaRecord,
    json_value,
    raw_bytes,
    utf8,
)
from transforms.kafka.security import KafkaSecurity, KafkaSecurityError
from transforms.kafka.watermark import PartitionWatermarkEstimator
from transforms.kafka.write import WriteDeadLettersToKafka, WriteToKafka, json_bytes, to_bytes

__all__ = [
    "ReadFromKafka",
    "WriteToKafka",
    "WriteDeadLettersToKafka",
    "KafkaRecord",
    "KafkaDeadLetter",
    "KafkaUnavailableError",
    "KafkaSecurity",
    "KafkaSecurityError",
    "PartitionRange",
    "PartitionWatermarkEstimator",
    "RECORDS",
    "DEAD_LETTER",
    "raw_bytes",
    "utf8",
    "json_value",
    "json_bytes",
    "to_bytes",
]
