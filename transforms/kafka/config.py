"""Validated settings of the Kafka source and sink, checked when the transform is built.

Every mistake a user can make in the arguments is reported here, at pipeline construction,
as a ValueError or TypeError naming the bad value and what to do, instead of as a failure
inside a worker later.
"""

from __future__ import annotations

import datetime
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple, Union

from transforms.kafka.records import Decoder, validate_decoder
from transforms.kafka.security import (SECRET_CLIENT_KEYS, SECURITY_CLIENT_KEYS, KafkaSecurity,
                                       as_security)

__all__ = ["ReaderConfig", "START_POSITIONS", "servers_list", "check_client_config"]

START_POSITIONS = ("earliest", "latest", "committed")


def servers_list(bootstrap_servers: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    """``"h1:p1,h2:p2"`` or a list -> a tuple of ``host:port``; ValueError if empty or bad."""
    if isinstance(bootstrap_servers, str):
        servers = [part.strip() for part in bootstrap_servers.split(",")]
    elif isinstance(bootstrap_servers, (list, tuple)):
        servers = [str(part).strip() for part in bootstrap_servers]
    else:
        raise TypeError(
            f"bootstrap_servers must be 'host:port[,host:port]' or a list, got {bootstrap_servers!r}"
        )
    servers = [server for server in servers if server]
    if not servers:
        raise ValueError("bootstrap_servers is empty: pass e.g. '127.0.0.1:9092' (see `make kafka`)")
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {server!r} is not host:port, e.g. 127.0.0.1:9092")
    return tuple(servers)


def check_client_config(config: Optional[Dict[str, Any]], reserved: Sequence[str], name: str,
                        security: Optional[KafkaSecurity] = None) -> Dict[str, Any]:
    """A copy of ``config``; ValueError if it sets a key the transform controls, a secret's
    value (the config is pickled into tasks), or, with ``security``, a setting it makes."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise TypeError(f"{name} must be a dict of kafka-python settings, got {config!r}")
    secrets = sorted(set(config) & set(SECRET_CLIENT_KEYS))
    if secrets:
        raise ValueError(
            f"{name} sets {secrets}: a secret's value there would be pickled into every task. "
            "Pass security=KafkaSecurity.of(..., sasl_password_env=VARIABLE or "
            "ssl_password_env=VARIABLE, or *_file=PATH) instead")
    if security is not None:
        reserved = tuple(reserved) + SECURITY_CLIENT_KEYS
    clashes = sorted(set(config) & set(reserved))
    if clashes:
        raise ValueError(
            f"{name} sets {clashes}, which the transform controls; use the transform's own "
            "arguments instead"
        )
    return dict(config)


def _positive(value: Any, name: str, allow_none: bool = False, integral: bool = False) -> Any:
    if value is None and allow_none:
        return None
    ok_type = int if integral else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type) or not math.isfinite(value) or value <= 0:
        kind = "a positive integer" if integral else "a positive number"
        raise ValueError(f"{name}={value!r}: must be {kind}" + (" or None" if allow_none else ""))
    return value


#: Consumer settings the source sets itself.
_RESERVED_CONSUMER_KEYS = ("bootstrap_servers", "group_id", "enable_auto_commit",
                           "key_deserializer", "value_deserializer")


class ReaderConfig(NamedTuple):
    """Everything a ReadFromKafka worker needs (picklable; no client objects)."""

    bootstrap_servers: Tuple[str, ...]
    topics: Tuple[str, ...]
    start: Union[str, float]
    group_id: Optional[str]
    timestamp_fn: Optional[Callable[[Any], Any]]
    with_metadata: bool
    value_decoder: Decoder
    key_decoder: Decoder
    bounded: bool
    max_records: Optional[int]
    idle_timeout_seconds: Optional[float]
    consumer_config: Dict[str, Any]
    committed_fallback: str
    records_per_bundle: int
    seconds_per_bundle: float
    poll_timeout_seconds: float
    batch_max_records: Optional[int] = None
    batch_max_records_per_partition: Optional[int] = None
    #: set when the pipeline is built: its runner plans micro-batches (see planning.py)
    planned: bool = False
    #: TLS / SASL settings; secrets by reference only (see security.py)
    security: Optional[KafkaSecurity] = None

    @property
    def is_bounded(self) -> bool:
        return self.bounded or self.max_records is not None

    def client_config(self) -> Dict[str, Any]:
        """The consumer's kafka-python settings, secrets read now: pass them to the client
        only, never keep them (this object is pickled into tasks; they must not be)."""
        config = dict(self.consumer_config)
        if self.security is not None:
            config.update(self.security.client_kwargs())
        return config

    @classmethod
    def validated(cls, **arguments: Any) -> "ReaderConfig":
        arguments["bootstrap_servers"] = servers_list(arguments["bootstrap_servers"])
        topics = arguments["topics"]
        topics = [topics] if isinstance(topics, str) else list(topics or [])
        if not topics or not all(isinstance(topic, str) and topic for topic in topics):
            raise ValueError(f"topics={arguments['topics']!r}: give a topic name or a list of names")
        arguments["topics"] = tuple(dict.fromkeys(topics))
        arguments["start"] = _start_position(arguments["start"])
        group_id = arguments["group_id"]
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ValueError(f"group_id={group_id!r}: must be a non-empty string or None")
        if arguments["start"] == "committed" and group_id is None:
            raise ValueError("start='committed' reads the group's committed offsets: pass group_id")
        if arguments["timestamp_fn"] is not None and not callable(arguments["timestamp_fn"]):
            raise TypeError(f"timestamp_fn must be a function KafkaRecord -> seconds, got {arguments['timestamp_fn']!r}")
        arguments["value_decoder"] = validate_decoder(arguments["value_decoder"], "value_decoder")
        arguments["key_decoder"] = validate_decoder(arguments["key_decoder"], "key_decoder")
        arguments["with_metadata"] = bool(arguments["with_metadata"])
        arguments["bounded"] = bool(arguments["bounded"])
        _positive(arguments["max_records"], "max_records", allow_none=True, integral=True)
        _positive(arguments["idle_timeout_seconds"], "idle_timeout_seconds", allow_none=True)
        arguments["security"] = as_security(arguments.get("security"))
        arguments["consumer_config"] = check_client_config(
            arguments["consumer_config"], _RESERVED_CONSUMER_KEYS, "consumer_config",
            arguments["security"])
        if arguments["committed_fallback"] not in ("earliest", "latest"):
            raise ValueError(
                f"committed_fallback={arguments['committed_fallback']!r}: use 'earliest' or 'latest'"
            )
        _positive(arguments["records_per_bundle"], "records_per_bundle", integral=True)
        _positive(arguments["seconds_per_bundle"], "seconds_per_bundle")
        _positive(arguments["poll_timeout_seconds"], "poll_timeout_seconds")
        _positive(arguments.get("batch_max_records"), "batch_max_records", allow_none=True,
                  integral=True)
        _positive(arguments.get("batch_max_records_per_partition"),
                  "batch_max_records_per_partition", allow_none=True, integral=True)
        return cls(**arguments)


def _start_position(start: Any) -> Union[str, float]:
    if isinstance(start, str):
        if start not in START_POSITIONS:
            raise ValueError(
                f"start={start!r}: use one of {START_POSITIONS}, seconds since the epoch, "
                "or an aware datetime"
            )
        return start
    if isinstance(start, datetime.datetime):
        if start.tzinfo is None:
            raise ValueError(f"start={start!r} is a naive datetime: attach a timezone")
        return start.timestamp()
    if isinstance(start, (int, float)) and not isinstance(start, bool):
        if not math.isfinite(start) or start < 0:
            raise ValueError(f"start={start!r}: a timestamp must be seconds since the epoch (>= 0)")
        return float(start)
    raise TypeError(f"start={start!r}: use one of {START_POSITIONS} or a timestamp")
