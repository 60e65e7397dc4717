"""Kafka client helpers for the source: connecting, listing partitions, resolving offsets.

Everything here runs on a worker with a live ``kafka.KafkaConsumer``. The code is written for
real Apache Kafka and checked against the two embedded brokers (see ``services/broker.py``);
where a broker answers wrongly the code does not trust one answer alone:

* The log end offset is ``max(end_offsets(tp), highwater(tp) after a fetch)``. On Kafka both
  agree (the fetch response carries the partition's high watermark). tansu answers
  ``end_offsets`` with the last batch's base offset + 1, an underestimate; the fetch corrects
  it. This is what ``start="latest"`` and the bounded mode use.
* ``offsets_for_times`` returns, on Kafka, the first offset whose record timestamp is at or
  after the time, so the record there is never older than the time asked for. If it is
  (tansu always answers offset 0), the answer is wrong and the source scans forward from it
  for the first record at or after the time. On Kafka the check costs one small fetch.
"""

from __future__ import annotations

import time
from typing import Dict, Iterable, List, Optional, Sequence

from transforms.kafka.connectivity import any_server_accepts, quiet_connection_retries
from transforms.kafka.polling import poll_records
from transforms.kafka.security import KafkaSecurity, as_security_error, check_tls_path

__all__ = [
    "KafkaUnavailableError",
    "unavailable_message",
    "create_consumer",
    "list_partitions",
    "log_end_offsets",
    "offsets_for_timestamp",
    "committed_offsets",
]

#: How long a one-off lookup (end offsets, a timestamp's offset) may keep polling.
LOOKUP_TIMEOUT_SECONDS = 30.0


class KafkaUnavailableError(RuntimeError):
    """No Kafka broker answered at the configured bootstrap servers."""


#: How long a TCP probe waits for a broker before a consumer is made.
BROKER_PROBE_SECONDS = 2.0


def unavailable_message(bootstrap_servers: Sequence[str], error: BaseException) -> str:
    servers = ",".join(bootstrap_servers)
    return (
        f"no Kafka broker answered at bootstrap servers {servers} ({type(error).__name__}: "
        f"{error}). Start the embedded broker with `make kafka` (then pass the "
        "--bootstrap_servers it prints), or point --bootstrap_servers at a running Kafka."
    )


def create_consumer(
    bootstrap_servers: Sequence[str], group_id: Optional[str], consumer_config: dict,
    security: Optional[KafkaSecurity] = None,
):
    """A consumer that never subscribes (partitions are assigned by the source) and never
    auto-commits (the source commits offsets only once a bundle's output is durable).

    ``consumer_config`` holds the resolved security settings too; ``security`` is what they
    came from, for the TLS check and for errors that name a setting (KafkaSecurityError)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaConfigurationError, KafkaError

    quiet_connection_retries()
    # A broker that is away fails here at once, not after kafka-python's bootstrap timeout: a
    # task reading a planned range then hands it back for a later batch without waiting.
    if not any_server_accepts(bootstrap_servers, BROKER_PROBE_SECONDS):
        raise KafkaUnavailableError(unavailable_message(
            bootstrap_servers, ConnectionRefusedError("no TCP connection to it opens")))
    check_tls_path(bootstrap_servers, security)
    try:
        return KafkaConsumer(
            bootstrap_servers=list(bootstrap_servers),
            group_id=group_id,
            enable_auto_commit=False,
            **consumer_config,
        )
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError) as error:
        refused = as_security_error(error, bootstrap_servers, security)
        if refused is not None:
            raise refused from None
        raise KafkaUnavailableError(unavailable_message(bootstrap_servers, error)) from error


def close_consumer(consumer) -> None:
    """Close ``consumer`` (None: nothing to close) without committing offsets: the sources
    commit only what a committed bundle or batch read."""
    if consumer is not None:
        consumer.close(autocommit=False)


def list_partitions(consumer, topics: Iterable[str]) -> List:
    """Every ``TopicPartition`` of ``topics``, sorted; ValueError names a topic that is missing."""
    from kafka import TopicPartition

    found = []
    missing = []
    for topic in topics:
        partitions = None
        deadline = time.monotonic() + 10.0
        # Metadata for a topic just created can take a moment to reach the broker we ask.
        while partitions is None and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                time.sleep(0.1)
        if not partitions:
            missing.append(topic)
            continue
        found.extend(TopicPartition(topic, partition) for partition in sorted(partitions))
    if missing:
        raise ValueError(
            f"Kafka topic(s) {missing} do not exist on the broker; create them first "
            f"(existing topics: {sorted(consumer.topics())[:20]})"
        )
    return found


def _fetch_until(consumer, partitions: List, done) -> Dict:
    """Poll the assigned ``partitions`` until ``done(records_by_partition)`` or a timeout."""
    records: Dict = {tp: [] for tp in partitions}
    deadline = time.monotonic() + LOOKUP_TIMEOUT_SECONDS
    while not done(records) and time.monotonic() < deadline:
        for tp, batch in poll_records(consumer, 0.2).items():
            records[tp].extend(batch)
    return records


def log_end_offsets(consumer, partitions: List, beginnings: Dict) -> Dict:
    """The offset after the last record of each partition (the high watermark), right now.

    ``beginnings`` are the partitions' first offsets (``consumer.beginning_offsets``).
    """
    if not partitions:
        return {}
    listed = consumer.end_offsets(partitions)
    consumer.assign(partitions)
    for tp in partitions:
        consumer.seek(tp, max(listed[tp] - 1, beginnings[tp]))
    # Any fetch response for a partition carries its high watermark, records or not.
    _fetch_until(consumer, partitions, lambda _: all(consumer.highwater(tp) is not None
                                                     for tp in partitions))
    ends = {}
    for tp in partitions:
        highwater = consumer.highwater(tp)
        ends[tp] = max(listed[tp], highwater if highwater is not None else listed[tp])
    return ends


def offsets_for_timestamp(consumer, partitions: List, timestamp_ms: int, ends: Dict) -> Dict:
    """The first offset of each partition whose record timestamp is >= ``timestamp_ms``
    (the end offset if there is none)."""
    answers = consumer.offsets_for_times({tp: timestamp_ms for tp in partitions})
    offsets = {}
    to_check = []
    for tp in partitions:
        answer = answers.get(tp)
        offsets[tp] = ends[tp] if answer is None else min(answer.offset, ends[tp])
        if offsets[tp] < ends[tp]:
            to_check.append(tp)
    if not to_check:
        return offsets
    consumer.assign(to_check)
    for tp in to_check:
        consumer.seek(tp, offsets[tp])
    # Read from each answer until the first record at or after the time (on Kafka: the first
    # record read) or the end of the partition.
    unresolved = set(to_check)

    def resolved(records) -> bool:
        for tp in list(unresolved):
            hit = next((r for r in records[tp] if r.timestamp >= timestamp_ms), None)
            if hit is not None:
                offsets[tp] = hit.offset
                unresolved.discard(tp)
            elif consumer.position(tp) >= ends[tp]:
                offsets[tp] = ends[tp]
                unresolved.discard(tp)
            else:
                records[tp].clear()
        return not unresolved

    _fetch_until(consumer, to_check, resolved)
    return offsets


def committed_offsets(consumer, partitions: List, fallback: Dict) -> Dict:
    """The group's committed offset per partition, or ``fallback[tp]`` where there is none."""
    offsets = {}
    for tp in partitions:
        committed = consumer.committed(tp)
        offsets[tp] = fallback[tp] if committed is None else committed
    return offsets
