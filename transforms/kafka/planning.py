"""Planned micro-batch reads: the driver decides each batch's offset range per partition.

On a runner that plans micro-batches (the project's SparkRunner in streaming: its driver calls
a splittable DoFn's ``plan_micro_batch`` at the start of every batch and its
``micro_batch_done`` once the batch's output is written), ``ReadFromKafka`` reads the way
Spark's own Kafka source does:

1. the driver asks the brokers for each partition's end offset (the log end, as
   :func:`~transforms.kafka.offsets.log_end_offsets` trusts it: the listed end, corrected by a
   fetch's high watermark);
2. it caps each partition's range ``[next offset, end)`` by the admission-control settings
   (``batch_max_records_per_partition``, and ``batch_max_records`` shared over the
   partitions in proportion to their backlog): a backlog is read over several batches;
3. the plan travels in each partition's element (:class:`~transforms.kafka.read.
   PartitionRange` ``planned_end``) to the task, which reads exactly that range, records
   that already exist, with no waiting (the runner logs the plan before the batch runs, so
   a replay reads the same ranges);
4. once the batch's output is written, the group's offsets are committed to the planned
   ends (for monitoring and ``start="committed"``; recovery replays from the runner's
   checkpoint, not from them).

A broker that does not answer while planning is logged once and waited for: the batch reads
nothing (the partitions keep their watermarks) and the next batch asks again; its return is
logged too.

>>> share_batch({"a": 90, "b": 10, "c": 0}, total=50)
{'a': 45, 'b': 5, 'c': 0}
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from transforms.kafka import offsets as kafka_offsets
from transforms.kafka.config import ReaderConfig
from transforms.kafka.connectivity import any_server_accepts
from transforms.kafka.polling import poll_records

_LOG = logging.getLogger(__name__)

#: How long a planning lookup may wait for the fetch that carries a high watermark.
PLANNING_TIMEOUT_SECONDS = 2.0
#: A planned range's records exist: a read that gets none for this long hands the range back.
PLANNED_READ_TIMEOUT_SECONDS = 30.0


def share_batch(backlogs: Dict[Any, int], total: Optional[int]) -> Dict[Any, int]:
    """How many records each partition may read when ``total`` is shared in proportion to the
    backlogs (each at most its backlog; None: every backlog whole)."""
    if total is None or sum(backlogs.values()) <= total:
        return dict(backlogs)
    whole = sum(backlogs.values())
    shares = {key: backlog * total // whole for key, backlog in backlogs.items()}
    left = total - sum(shares.values())
    for key in sorted(backlogs, key=lambda key: backlogs[key] - shares[key], reverse=True):
        if left <= 0:
            break
        if shares[key] < backlogs[key]:
            shares[key] += 1
            left -= 1
    return shares


class BatchPlanner:
    """The driver-side half of a planned ``ReadFromKafka`` (see the module docstring).

    Args:
      config: the reader's settings (servers, group, admission control).
    """

    def __init__(self, config: ReaderConfig) -> None:
        self._config = config
        self._consumer = None
        self._committer = None
        self._unreachable = False
        #: records the last plan reads (the runner runs a small batch in one task)
        self.planned_records = 0

    def plan(self, work: Sequence[Tuple[Any, Any]]) -> List[Any]:
        """``[(PartitionRange, OffsetRange)]`` -> the elements with ``planned_end`` set."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        if not work:
            return []
        partitions = [TopicPartition(element.topic, element.partition) for element, _ in work]
        try:
            if not any_server_accepts(self._config.bootstrap_servers):
                # A client would block in its retries, and log each of them.
                raise kafka_offsets.KafkaUnavailableError("no TCP connection to it opens")
            ends = self._end_offsets(partitions)
        except (KafkaError, OSError, kafka_offsets.KafkaUnavailableError) as error:
            if not self._unreachable:
                _LOG.warning("Kafka at %s does not answer (%s: %s): reading nothing until it "
                             "does, asking again every micro-batch",
                             ",".join(self._config.bootstrap_servers), type(error).__name__,
                             error)
            self._unreachable = True
            self.close()
            self.planned_records = 0
            return [element._replace(planned_end=restriction.start, caught_up=False)
                    for element, restriction in work]
        if self._unreachable:
            _LOG.warning("Kafka at %s answers again: reading on",
                         ",".join(self._config.bootstrap_servers))
            self._unreachable = False
        available = {}
        for (element, restriction), tp in zip(work, partitions):
            available[tp] = max(0, min(ends[tp], restriction.stop) - restriction.start)
        cap = self._config.batch_max_records_per_partition
        if cap is not None:
            available = {tp: min(backlog, cap) for tp, backlog in available.items()}
        allowed = share_batch(available, self._config.batch_max_records)
        self.planned_records = sum(allowed.values())
        planned = []
        for (element, restriction), tp in zip(work, partitions):
            end = restriction.start + allowed[tp]
            planned.append(element._replace(planned_end=end, caught_up=end >= ends[tp]))
        return planned

    def done(self, elements: Sequence[Any]) -> None:
        """The batch's output is written: commit the planned ends to the group, if any."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        group_id = self._config.group_id
        if group_id is None:
            return
        offsets = {TopicPartition(element.topic, element.partition):
                   OffsetAndMetadata(element.planned_end, "", -1)
                   for element in elements if element.planned_end is not None}
        if not offsets:
            return
        try:
            if self._committer is None:
                self._committer = kafka_offsets.create_consumer(
                    self._config.bootstrap_servers, group_id, self._config.client_config(),
                    self._config.security)
            self._committer.commit(offsets)
        except (KafkaError, OSError, kafka_offsets.KafkaUnavailableError) as error:
            _LOG.warning("could not commit the offsets read for group %s (monitoring only: "
                         "recovery replays from the checkpoint): %s", group_id, error)
            self._close_committer()

    def close(self) -> None:
        """Close the planner's clients (the run is over, or the broker went away)."""
        consumer, self._consumer = self._consumer, None
        try:
            kafka_offsets.close_consumer(consumer)
        finally:
            self._close_committer()

    def _close_committer(self) -> None:
        committer, self._committer = self._committer, None
        kafka_offsets.close_consumer(committer)

    def _end_offsets(self, partitions: List[Any]) -> Dict[Any, int]:
        if self._consumer is None:
            config = dict(self._config.client_config())
            # A fetch past the end answers at once: only its high watermark is wanted.
            config.setdefault("fetch_max_wait_ms", 10)
            config.setdefault("request_timeout_ms", 5000)
            self._consumer = kafka_offsets.create_consumer(
                self._config.bootstrap_servers, None, config, self._config.security)
        consumer = self._consumer
        listed = consumer.end_offsets(partitions)
        consumer.assign([])  # a new assignment forgets the high watermarks of the last batch
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, max(listed[tp] - 1, 0))
        # Any fetch response carries the partition's high watermark: on Kafka it equals the
        # listed end; where a broker lists less (tansu), it corrects it.
        highwater: Dict[Any, int] = {}
        deadline = time.monotonic() + PLANNING_TIMEOUT_SECONDS
        while len(highwater) < len(partitions) and time.monotonic() < deadline:
            poll_records(consumer, 0.05, max_records=1)
            for tp in partitions:
                mark = consumer.highwater(tp)
                if mark is not None:
                    highwater[tp] = mark
        return {tp: max(listed[tp], highwater.get(tp, listed[tp])) for tp in partitions}


def read_planned(client: Callable[[], Any], close_client: Callable[[], None], element: Any,
                 tp: Any, tracker: Any, watermark_estimator: Any,
                 to_output: Callable[[Any, Any], Any], poll_timeout_seconds: float,
                 max_poll_records: int) -> Iterator[Any]:
    """The task side: read exactly ``[start, planned_end)`` of a partition, records the
    driver saw in the log, so with no waiting; then hand the rest back (or finish a bounded
    range). A broker that fails mid-read hands back the rest from the first record not read,
    for a later batch."""
    from kafka.errors import KafkaError

    restriction = tracker.current_restriction()
    end = min(element.planned_end, restriction.stop)
    if end > restriction.start:
        try:
            # Opening the consumer is inside: the broker may go away between plan and read.
            consumer = client()
            consumer.assign([tp])
            consumer.seek(tp, restriction.start)
            deadline = time.monotonic() + PLANNED_READ_TIMEOUT_SECONDS
            while consumer.position(tp) < end:
                batch = poll_records(consumer, poll_timeout_seconds,
                                     max_records=max_poll_records).get(tp, [])
                for record in batch:
                    if record.offset >= end:
                        break
                    if not tracker.try_claim(record.offset):
                        return  # the runner split the restriction here
                    yield to_output(record, watermark_estimator)
                if not batch and time.monotonic() > deadline:
                    raise KafkaError(f"no record of {tp} in [{consumer.position(tp)}, {end}) "
                                     f"after {PLANNED_READ_TIMEOUT_SECONDS} s")
        except (KafkaError, kafka_offsets.KafkaUnavailableError) as error:
            _LOG.warning("reading %s up to offset %d failed, resuming in a later batch: %s",
                         tp, end, error)
            close_client()
            watermark_estimator.has_backlog()
            tracker.defer_remainder()
            return
    if end >= restriction.stop:
        tracker.try_claim(restriction.stop)  # a bounded range, read to its end
        return
    if element.caught_up:
        watermark_estimator.caught_up()
    else:
        watermark_estimator.has_backlog()
    tracker.defer_remainder()
