"""A broker that went away: one clear line, not kafka-python's retry chatter.

kafka-python 3 runs every client's network loop in a thread of its own, which retries an
unreachable broker in the background and logs each attempt at WARNING or ERROR, some with a
traceback: a three-second broker restart put ~60 such lines in a job's log, from the driver
and from every Python worker holding a cached consumer. The reader and the planner report an
unreachable broker themselves (once when it goes, once when it is back: see
:mod:`transforms.kafka.planning`), so :func:`quiet_connection_retries` drops kafka-python's
per-attempt connection messages. Everything else kafka-python logs still shows; set the
environment variable ``KAFKA_CLIENT_CONNECTION_LOGS=all`` to see the dropped lines too.

>>> import logging
>>> record = logging.LogRecord("kafka.net.manager", logging.ERROR, __file__, 1,
...                            "Connection failed: %s", ("KafkaConnectionError: 111 ECONNREFUSED",),
...                            None)
>>> ConnectionRetryFilter().filter(record)
False
>>> record.msg, record.args = "Unknown topic %s", ("scores",)
>>> ConnectionRetryFilter().filter(record)
True
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from typing import Sequence

#: The kafka-python loggers that report connection attempts (a logger's filter does not
#: apply to its children, so each is named).
CONNECTION_LOGGERS = ("kafka.cluster", "kafka.conn", "kafka.client_async", "kafka.net.manager",
                      "kafka.net.connection", "kafka.net.transport", "kafka.net.selector",
                      "kafka.consumer.fetcher", "kafka.producer.sender")

_CONNECTION_FAILURE = re.compile(
    r"KafkaConnectionError|ECONNREFUSED|ECONNRESET|Connection (lost|failed|refused)|"
    r"No node available|not ready|socket disconnected|Error receiving network data|"
    r"Bootstrap (connection|attempt|failed)|NodeNotReady|Metadata refresh: failed")


class ConnectionRetryFilter(logging.Filter):
    """Drops log records about a failed or lost broker connection; passes every other one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _CONNECTION_FAILURE.search(record.getMessage()):
            return False
        if record.exc_info and record.exc_info[1] is not None:
            return not _CONNECTION_FAILURE.search(type(record.exc_info[1]).__name__)
        return True


_LOG = logging.getLogger(__name__)
_FILTER = ConnectionRetryFilter()


def quiet_connection_retries() -> None:
    """Install :class:`ConnectionRetryFilter` on kafka-python's connection loggers (once per
    process; a no-op with ``KAFKA_CLIENT_CONNECTION_LOGS=all``)."""
    if os.environ.get("KAFKA_CLIENT_CONNECTION_LOGS") == "all":
        return
    for name in CONNECTION_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def any_server_accepts(bootstrap_servers: Sequence[str], timeout_seconds: float = 1.0) -> bool:
    """Whether a TCP connection to any ``host:port`` of ``bootstrap_servers`` opens.

    Cheaper and quieter than a Kafka request when the broker is down: no client, no retries.
    """
    for server in bootstrap_servers:
        host, _, port = server.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout_seconds).close()
            return True
        except OSError:
            continue
    return False


__all__ = ["BROKER_WAIT_SECONDS", "CONNECTION_LOGGERS", "ConnectionRetryFilter",
           "any_server_accepts", "quiet_connection_retries", "wait_for_a_server"]

#: How long, by default, a read or a write waits for a broker that went away (a restart, an
#: outage) before its task fails.
BROKER_WAIT_SECONDS = 300.0


def wait_for_a_server(bootstrap_servers: Sequence[str], limit_seconds: float, who: str) -> bool:
    """Wait until a TCP connection to a broker of ``bootstrap_servers`` opens; False after
    ``limit_seconds``. Says once that ``who`` waits, and once that it goes on, so a broker that
    goes away in the middle of a batch is waited for, not a failed task.
    """
    if any_server_accepts(bootstrap_servers):
        return True
    if limit_seconds <= 0:
        return False
    servers = ",".join(bootstrap_servers)
    _LOG.warning("%s waits for Kafka at %s (no connection opens), up to %.0f s",
                 who, servers, limit_seconds)
    deadline = time.monotonic() + limit_seconds
    while time.monotonic() < deadline:
        time.sleep(1.0)
        if any_server_accepts(bootstrap_servers):
            _LOG.warning("%s goes on: Kafka at %s accepts connections again", who, servers)
            return True
    return False
