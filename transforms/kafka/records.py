"""The records the Kafka source emits: decoded records, their metadata, and dead letters.

A Kafka record is a key, a value (both bytes or null), a timestamp in milliseconds, headers,
and its coordinates (topic, partition, offset). :class:`KafkaRecord` carries all of these
after decoding; :class:`KafkaDeadLetter` carries a record that could not be decoded (or whose
event time could not be computed), with the original bytes, the coordinates and the reason,
so nothing is dropped silently and the bad record can be written to a dead-letter topic and
replayed later.

Decoders are plain functions ``bytes -> value``; :func:`decode_record` applies them and turns
any exception into a dead letter.

>>> from transforms.kafka.records import utf8, decode_record
>>> record, error = decode_record("clicks", 0, 7, b"k", b"\\xff", 1000, (), utf8, utf8)
>>> record is None and "value_decoder utf8 failed" in error.reason
True
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

# datetime and Timestamp are imported here, not in event_time_seconds: per call, the imports
# took a quarter of the time the source spends turning a Kafka record into an element.
from apache_beam.utils.timestamp import Timestamp

__all__ = [
    "KafkaRecord",
    "KafkaDeadLetter",
    "Decoder",
    "raw_bytes",
    "utf8",
    "json_value",
    "decode_record",
    "validate_decoder",
]

#: ``bytes -> value``; raising means "this record is malformed".
Decoder = Callable[[bytes], Any]
#: Kafka headers: a sequence of ``(name, value bytes)`` pairs.
Headers = Tuple[Tuple[str, bytes], ...]


class KafkaRecord(NamedTuple):
    """One decoded Kafka record with its metadata (``with_metadata=True``).

    ``timestamp`` is the record's Kafka timestamp in seconds since the epoch (create time or
    log-append time, as the topic is configured); the element's event time may differ when a
    ``timestamp_fn`` is given.
    """

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: Optional[float]
    headers: Headers = ()


class KafkaDeadLetter(NamedTuple):
    """A record the source could not turn into an element, with everything needed to replay it.

    ``key`` and ``value`` are the original bytes, untouched; ``reason`` says which step failed
    and why.

    >>> KafkaDeadLetter("t", 0, 3, None, b"{", 1.5, (), "value_decoder json_value failed: x").to_json()
    '{"topic": "t", "partition": 0, "offset": 3, "key": null, "value": "{", "timestamp": 1.5, "reason": "value_decoder json_value failed: x"}'
    """

    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: Optional[float]
    headers: Headers
    reason: str

    def to_json(self) -> str:
        """A JSON summary (bytes shown as text with replacement characters; headers omitted)."""
        def text(data: Optional[bytes]) -> Optional[str]:
            return None if data is None else data.decode("utf-8", errors="replace")

        return json.dumps({
            "topic": self.topic, "partition": self.partition, "offset": self.offset,
            "key": text(self.key), "value": text(self.value), "timestamp": self.timestamp,
            "reason": self.reason,
        })


def raw_bytes(data: bytes) -> bytes:
    """The identity decoder: keep the bytes."""
    return data


def utf8(data: bytes) -> str:
    """Decode strict UTF-8 text (invalid bytes make a dead letter, never U+FFFD)."""
    return data.decode("utf-8")


def json_value(data: bytes) -> Any:
    """Decode a UTF-8 JSON document (NaN and Infinity are rejected as not JSON)."""
    def reject_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    return json.loads(data.decode("utf-8"), parse_constant=reject_constant)


def validate_decoder(decoder: Optional[Decoder], name: str) -> Decoder:
    """``decoder`` or :func:`raw_bytes`; a TypeError names a decoder that is not callable."""
    if decoder is None:
        return raw_bytes
    if not callable(decoder):
        raise TypeError(
            f"{name} must be a function bytes -> value (e.g. transforms.kafka.utf8), "
            f"got {decoder!r}"
        )
    return decoder


def _decoder_name(decoder: Decoder) -> str:
    return getattr(decoder, "__name__", type(decoder).__name__)


def decode_record(
    topic: str,
    partition: int,
    offset: int,
    key: Optional[bytes],
    value: Optional[bytes],
    timestamp_ms: Optional[int],
    headers: Sequence[Tuple[str, bytes]],
    key_decoder: Decoder,
    value_decoder: Decoder,
) -> Tuple[Optional[KafkaRecord], Optional[KafkaDeadLetter]]:
    """Decode one raw record: ``(record, None)`` on success, ``(None, dead_letter)`` otherwise.

    A null key or value (a tombstone) stays ``None`` and is not passed to the decoder.
    """
    timestamp = None if timestamp_ms is None or timestamp_ms < 0 else timestamp_ms / 1000.0
    headers = tuple(map(tuple, headers)) if headers else ()
    try:
        decoded_key = None if key is None else key_decoder(key)
    except Exception as error:  # any decoder failure is a property of the record
        return None, KafkaDeadLetter(
            topic, partition, offset, key, value, timestamp, headers,
            f"key_decoder {_decoder_name(key_decoder)} failed: {type(error).__name__}: {error}",
        )
    try:
        decoded_value = None if value is None else value_decoder(value)
    except Exception as error:
        return None, KafkaDeadLetter(
            topic, partition, offset, key, value, timestamp, headers,
            f"value_decoder {_decoder_name(value_decoder)} failed: {type(error).__name__}: {error}",
        )
    return KafkaRecord(topic, partition, offset, decoded_key, decoded_value, timestamp, headers), None


def event_time_seconds(value: Any) -> float:
    """Seconds since the epoch from a ``timestamp_fn`` result (number, Beam Timestamp, datetime).

    Raises ValueError for anything else, or a non-finite number, so the record becomes a
    dead letter instead of getting a nonsense event time.
    """
    if isinstance(value, Timestamp):
        return value.micros / 1e6
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"timestamp_fn returned a naive datetime {value!r}; attach a timezone")
        return value.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"timestamp_fn returned {value!r}, not a finite number of seconds")
        return float(value)
    raise ValueError(
        f"timestamp_fn returned {value!r} ({type(value).__name__}); "
        "return seconds since the epoch, a Beam Timestamp or an aware datetime"
    )
