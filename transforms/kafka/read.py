"""ReadFromKafka: a pure-Python Kafka source, a splittable DoFn over (topic, partition).

Beam's own ``ReadFromKafka`` is a Java cross-language transform (a JVM expansion service and
Maven downloads). This one runs on kafka-python on any runner that executes splittable DoFns.

How it reads:

1. One element (Impulse) becomes one :class:`PartitionRange` per partition of the topics: the
   start offset resolved once, when the job starts (``earliest``, ``latest``, a timestamp, or
   the group's ``committed`` offset), and in the bounded mode the stop offset (the end of the
   log at start, and/or ``max_records`` offsets after the start).
2. Each partition is read by a splittable DoFn whose restriction is an :class:`OffsetRange`
   tracked by Beam's ``OffsetRestrictionTracker`` (stop = 2**63-1 when unbounded). Each
   offset is claimed before its record is emitted, so a runner can checkpoint or split at any
   record. When no record is available, or after ``records_per_bundle`` records or
   ``seconds_per_bundle``, the DoFn self-checkpoints (``defer_remainder``) so output flows on
   and the runner resumes the partition later from the next offset.
3. Event time is the record's Kafka timestamp, or ``timestamp_fn(record)``; the watermark is
   estimated per partition (:mod:`transforms.kafka.watermark`), so an idle partition does not
   hold the others back once ``idle_timeout_seconds`` pass.
4. Records that cannot be decoded, or whose event time cannot be computed, go to the
   ``dead_letter`` output as :class:`KafkaDeadLetter` with the original bytes; the job goes on.

Offsets and at-least-once: with a ``group_id``, the offsets a bundle read are committed to the
group only after the runner has made the bundle's output durable, never before, so a job that
fails and restarts with ``start="committed"`` re-reads what was not durably processed
(duplicates possible, loss not). Two signals say "durable", and both are used: the bundle
finalizer (called by the runner after it committed the bundle: Beam's portable runners and the
DirectRunner in batch), and a resumed restriction (a runner hands the DoFn the remainder that
starts at offset N only after it committed the bundle that read the offsets before N), which
also covers runners that never call finalizers. Commit failures are logged, never fatal: a
stale committed offset only means more re-reading.

>>> import apache_beam as beam
>>> from transforms.kafka import ReadFromKafka, utf8
>>> with beam.Pipeline() as p:  # doctest: +SKIP
...     read = p | ReadFromKafka("127.0.0.1:9092", "clicks", value_decoder=utf8, bounded=True)
...     _ = read.records | beam.Map(print)          # (key, value) pairs with event time
...     _ = read.dead_letter | beam.Map(print)      # KafkaDeadLetter records
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any, Callable, Dict, Iterable, NamedTuple, Optional, Sequence, Union

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Duration

from transforms.kafka import offsets as kafka_offsets
from transforms.kafka import planning as kafka_planning
from transforms.kafka.config import ReaderConfig
from transforms.kafka.connectivity import BROKER_WAIT_SECONDS, wait_for_a_server
from transforms.kafka.polling import poll_records
from transforms.kafka.records import KafkaDeadLetter, decode_record, event_time_seconds
from transforms.kafka.security import KafkaSecurity
from transforms.kafka.watermark import PartitionWatermarkEstimatorProvider

__all__ = ["ReadFromKafka", "PartitionRange", "RECORDS", "DEAD_LETTER", "UNBOUNDED_END",
           "METRICS_NAMESPACE"]

_LOG = logging.getLogger(__name__)
RECORDS = "records"
DEAD_LETTER = "dead_letter"
METRICS_NAMESPACE = "transforms.kafka"
#: The stop offset of an unbounded partition restriction.
UNBOUNDED_END = 2**63 - 1


class PartitionRange(NamedTuple):
    """What one partition's restriction starts from: resolved once, when the job starts.

    On a runner that plans micro-batches, the plan of the current batch rides along: read up
    to ``planned_end`` (exclusive), then hand the rest back (``caught_up``: that is the end
    of the log as the plan saw it, so the partition's idle clock may start).
    """

    topic: str
    partition: int
    start_offset: int
    stop_offset: Optional[int]  # None: unbounded
    planned_end: Optional[int] = None
    caught_up: bool = False


class _ResolvePartitions(beam.DoFn):
    """Impulse -> one PartitionRange per partition (start, and stop when bounded)."""

    def __init__(self, config: ReaderConfig) -> None:
        self._config = config

    def process(self, unused_impulse) -> Iterable[PartitionRange]:
        config = self._config
        consumer = kafka_offsets.create_consumer(
            config.bootstrap_servers, config.group_id, config.client_config(),
            config.security)
        try:
            partitions = kafka_offsets.list_partitions(consumer, config.topics)
            earliest = consumer.beginning_offsets(partitions)
            ends = kafka_offsets.log_end_offsets(consumer, partitions, earliest)
            start = config.start
            if start == "earliest":
                starts = earliest
            elif start == "latest":
                starts = ends
            elif start == "committed":
                fallback = earliest if config.committed_fallback == "earliest" else ends
                starts = kafka_offsets.committed_offsets(consumer, partitions, fallback)
            else:
                starts = kafka_offsets.offsets_for_timestamp(
                    consumer, partitions, int(round(start * 1000)), ends)
        finally:
            consumer.close()
        for tp in partitions:
            first = max(starts[tp], earliest[tp])
            stop = None
            if config.bounded:
                stop = max(first, ends[tp])
            if config.max_records is not None:
                stop = first + config.max_records if stop is None else min(stop, first + config.max_records)
            # On a runner that plans micro-batches, read nothing until the driver planned a
            # range: every record is then read in a batch whose plan was logged first.
            planned_end = first if config.planned else None
            yield PartitionRange(tp.topic, tp.partition, first, stop, planned_end)


class _OffsetRangeProvider(RestrictionProvider):
    """OffsetRange restrictions over one partition's offsets."""

    def initial_restriction(self, element: PartitionRange) -> OffsetRange:
        stop = UNBOUNDED_END if element.stop_offset is None else element.stop_offset
        return OffsetRange(element.start_offset, stop)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: PartitionRange, restriction: OffsetRange) -> float:
        if restriction.stop == UNBOUNDED_END:
            # The backlog is unknown without asking the broker; a constant keeps sizes comparable.
            return 1.0
        return float(restriction.size())


class _ReadPartitionFn(beam.DoFn, WatermarkEstimatorProvider):
    """Reads one partition's offset range; self-checkpoints; see the module docstring.

    The DoFn is its own watermark estimator provider, so the estimators get the configured
    ``idle_timeout_seconds``.
    """

    def __init__(self, config: ReaderConfig) -> None:
        self._config = config
        self._provider = PartitionWatermarkEstimatorProvider(config.idle_timeout_seconds)
        self._consumer = None
        self._committed: Dict[Any, int] = {}
        self._records_read = Metrics.counter(METRICS_NAMESPACE, "records_read")
        self._dead_letters = Metrics.counter(METRICS_NAMESPACE, "dead_letters")

    def initial_estimator_state(self, element, restriction):
        return self._provider.initial_estimator_state(element, restriction)

    def create_watermark_estimator(self, estimator_state):
        return self._provider.create_watermark_estimator(estimator_state)

    def setup(self) -> None:
        self._consumer = None
        self._committed = {}
        self._planner = None

    # ----- micro-batch planning (driver side): see transforms/kafka/planning.py
    def plan_micro_batch(self, work):
        """``[(PartitionRange, OffsetRange)]`` of this batch -> elements with their plan."""
        if getattr(self, "_planner", None) is None:
            self._planner = kafka_planning.BatchPlanner(self._config)
        return self._planner.plan(work)

    def planned_records(self) -> int:
        """Records the last ``plan_micro_batch`` planned to read."""
        planner = getattr(self, "_planner", None)
        return 0 if planner is None else planner.planned_records

    def micro_batch_done(self, elements) -> None:
        """The batch's output is written: commit what it read to the group (monitoring)."""
        if getattr(self, "_planner", None) is not None:
            self._planner.done(elements)

    def close_micro_batches(self) -> None:
        """The run is over: close the planner's clients."""
        if getattr(self, "_planner", None) is not None:
            self._planner.close()
            self._planner = None

    def _client(self):
        # Created on the worker, never pickled; it lives for one bundle (or one commit), so
        # no client is left behind between bundles to reconnect to a broker that went away.
        if self._consumer is None:
            config = self._config
            self._consumer = kafka_offsets.create_consumer(
                config.bootstrap_servers, config.group_id, config.client_config(),
                config.security)
        return self._consumer

    def teardown(self) -> None:
        self._close_client()

    def _commit(self, tp, next_offset: int) -> None:
        """Commit ``next_offset`` (Kafka's convention: the next offset to read) for the group."""
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        if self._config.group_id is None or self._committed.get(tp) == next_offset:
            return
        try:
            self._client().commit({tp: OffsetAndMetadata(next_offset, "", -1)})
            self._committed[tp] = next_offset
        except (KafkaError, OSError, kafka_offsets.KafkaUnavailableError) as error:
            _LOG.warning("could not commit offset %d of %s for group %s (will retry on the next "
                         "bundle; records may be re-read after a restart): %s",
                         next_offset, tp, self._config.group_id, error)
        finally:
            if not getattr(self, "_in_bundle", False):  # a finalization, after the bundle
                self._close_client()

    def process(
        self,
        element: PartitionRange,
        # Positional parameters first: Beam passes the tracker and estimator by keyword.
        bundle_finalizer=beam.DoFn.BundleFinalizerParam,
        tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
        watermark_estimator=beam.DoFn.WatermarkEstimatorParam(),
    ):
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        config = self._config
        tp = TopicPartition(element.topic, element.partition)
        if element.planned_end is not None:
            yield from kafka_planning.read_planned(
                self._client, self._close_client, element, tp, tracker, watermark_estimator,
                self._to_output, config.poll_timeout_seconds, config.records_per_bundle)
            return
        start = tracker.current_restriction().start
        try:
            consumer = self._client()
        except kafka_offsets.KafkaUnavailableError:
            # The broker answered when the job started (the partitions were resolved): it is
            # restarting, or away for a while; a task that fails now would fail the job.
            if not wait_for_a_server(config.bootstrap_servers, BROKER_WAIT_SECONDS,
                                     f"the read of {tp.topic}/{tp.partition}"):
                raise
            consumer = self._client()
        if start > element.start_offset:
            # A resumed remainder: everything before `start` was output by a committed bundle.
            self._commit(tp, start)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + config.seconds_per_bundle
        emitted = 0
        next_offset = None
        finished = False
        while not finished:
            stop = tracker.current_restriction().stop
            try:
                batch = poll_records(consumer, config.poll_timeout_seconds,
                                     max_records=config.records_per_bundle - emitted).get(tp, [])
            except KafkaError as error:
                # A broker restart or a leader move: resume this partition from the same
                # offset in a later call instead of failing the job.
                _LOG.warning("poll of %s failed, resuming later: %s", tp, error)
                tracker.defer_remainder(Duration(seconds=config.poll_timeout_seconds))
                break
            for record in batch:
                if not tracker.try_claim(record.offset):
                    finished = True  # the runner split the restriction here, or its end
                    break
                next_offset = record.offset + 1
                emitted += 1
                yield self._to_output(record, watermark_estimator)
            if finished:
                break
            position = consumer.position(tp)
            if stop != UNBOUNDED_END and position >= stop:
                # The end is reached even if offsets below it are missing (compaction,
                # transaction markers): an attempt at `stop` marks the restriction done.
                tracker.try_claim(stop)
                break
            if not batch:
                highwater = consumer.highwater(tp)
                if highwater is not None and position >= highwater:
                    watermark_estimator.caught_up()
                    tracker.defer_remainder()
                    break
                watermark_estimator.has_backlog()
            if emitted >= config.records_per_bundle or time.monotonic() >= deadline:
                tracker.defer_remainder()
                break
        if next_offset is not None and config.group_id is not None:
            if isinstance(bundle_finalizer, beam.DoFn.BundleFinalizerParam):
                bundle_finalizer.register(lambda: self._commit(tp, next_offset))

    def start_bundle(self) -> None:
        self._in_bundle = True

    def finish_bundle(self) -> None:
        self._in_bundle = False
        self._close_client()

    def _close_client(self) -> None:
        consumer, self._consumer = self._consumer, None
        kafka_offsets.close_consumer(consumer)

    def _to_output(self, record, watermark_estimator):
        config = self._config
        decoded, dead = decode_record(
            record.topic, record.partition, record.offset, record.key, record.value,
            record.timestamp, record.headers or (), config.key_decoder, config.value_decoder)
        event_time = None
        if decoded is not None:
            try:
                if config.timestamp_fn is not None:
                    event_time = event_time_seconds(config.timestamp_fn(decoded))
                elif decoded.timestamp is None:
                    raise ValueError("the record has no timestamp; pass timestamp_fn")
                else:
                    event_time = decoded.timestamp
            except Exception as error:  # a property of the record: dead-letter it
                dead = KafkaDeadLetter(
                    record.topic, record.partition, record.offset, record.key, record.value,
                    decoded.timestamp, decoded.headers,
                    f"timestamp_fn failed: {type(error).__name__}: {error}")
        if dead is not None:
            self._dead_letters.inc()
            # Keep the record's own time if it has one; else do not go behind the watermark.
            when = dead.timestamp if dead.timestamp is not None else watermark_estimator.current_watermark()
            return beam.pvalue.TaggedOutput(DEAD_LETTER, beam.window.TimestampedValue(dead, when))
        self._records_read.inc()
        value = decoded if config.with_metadata else (decoded.key, decoded.value)
        return beam.window.TimestampedValue(value, event_time)


class _ReadUnboundedPartitionFn(_ReadPartitionFn):
    """The same reader, declared unbounded per element, so its output is an unbounded PCollection."""

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element: PartitionRange,
        # Positional parameters first: Beam passes the tracker and estimator by keyword.
        bundle_finalizer=beam.DoFn.BundleFinalizerParam,
        tracker=beam.DoFn.RestrictionParam(_OffsetRangeProvider()),
        watermark_estimator=beam.DoFn.WatermarkEstimatorParam(),
    ):
        return super().process(element, bundle_finalizer, tracker=tracker,
                               watermark_estimator=watermark_estimator)


class ReadFromKafka(beam.PTransform):
    """Read Kafka topics; returns outputs ``.records`` and ``.dead_letter``.

    Args:
      bootstrap_servers: "host:port[,host:port]" or a list of them.
      topics: a topic name or a list of names (all their partitions are read).
      start: where each partition starts: "earliest", "latest", "committed" (the group's
        committed offset; ``committed_fallback`` where the group has none), or a point in time
        (seconds since the epoch, or an aware datetime): the first record at or after it.
      group_id: the consumer group offsets are committed to (needed for "committed"). The
        source assigns partitions itself; it never joins the group's rebalancing.
      timestamp_fn: ``KafkaRecord -> event time`` (seconds, Beam Timestamp or aware datetime);
        default: the record's Kafka timestamp.
      with_metadata: emit :class:`KafkaRecord` (topic, partition, offset, key, value,
        timestamp, headers) instead of ``(key, value)`` pairs.
      key_decoder, value_decoder: ``bytes -> value`` (default: keep bytes); a decoder that
        raises sends the record to ``dead_letter``.
      bounded: stop each partition at the end of its log as seen when the job starts.
      max_records: stop each partition after the next ``max_records`` offsets (per partition;
        fewer records if the log has gaps). With neither, the read is unbounded.
      idle_timeout_seconds: after this long caught up with no new record, a partition's
        watermark advances with the wall clock (see :mod:`transforms.kafka.watermark`); None
        keeps it at the last event time.
      consumer_config: extra kafka-python ``KafkaConsumer`` settings (timeouts...); no
        secret's value is accepted here (it would be pickled into every task).
      security: TLS / SASL settings, a :class:`~transforms.kafka.security.KafkaSecurity` or a
        dict of ``KafkaSecurity.of``'s arguments; secrets by reference only (an environment
        variable or a file, read where a client is made).
      records_per_bundle, seconds_per_bundle: a partition self-checkpoints after this many
        records or seconds, bounding the work re-done after a failure.
      batch_max_records, batch_max_records_per_partition: on a runner that plans
        micro-batches (the SparkRunner in streaming, see :mod:`transforms.kafka.planning`),
        read at most this many records a batch, in all (shared over the partitions in
        proportion to their backlog) and per partition: a backlog is read over several
        batches instead of one long one. Default: whatever the log holds.
    """

    def __init__(
        self,
        bootstrap_servers: Union[str, Sequence[str]],
        topics: Union[str, Sequence[str]],
        start: Union[str, float, int, datetime.datetime] = "earliest",
        group_id: Optional[str] = None,
        timestamp_fn: Optional[Callable[[Any], Any]] = None,
        with_metadata: bool = False,
        value_decoder: Optional[Callable[[bytes], Any]] = None,
        key_decoder: Optional[Callable[[bytes], Any]] = None,
        bounded: bool = False,
        max_records: Optional[int] = None,
        idle_timeout_seconds: Optional[float] = 10.0,
        consumer_config: Optional[Dict[str, Any]] = None,
        committed_fallback: str = "earliest",
        records_per_bundle: int = 1000,
        seconds_per_bundle: float = 1.0,
        poll_timeout_seconds: float = 0.5,
        batch_max_records: Optional[int] = None,
        batch_max_records_per_partition: Optional[int] = None,
        label: Optional[str] = None,
        security: Optional[Union[KafkaSecurity, Dict[str, Any]]] = None,
    ) -> None:
        super().__init__(label)
        self._config = ReaderConfig.validated(
            bootstrap_servers=bootstrap_servers, topics=topics, start=start, group_id=group_id,
            timestamp_fn=timestamp_fn, with_metadata=with_metadata,
            value_decoder=value_decoder, key_decoder=key_decoder, bounded=bounded,
            max_records=max_records, idle_timeout_seconds=idle_timeout_seconds,
            consumer_config=consumer_config, committed_fallback=committed_fallback,
            records_per_bundle=records_per_bundle, seconds_per_bundle=seconds_per_bundle,
            poll_timeout_seconds=poll_timeout_seconds, batch_max_records=batch_max_records,
            batch_max_records_per_partition=batch_max_records_per_partition,
            security=security,
        )

    @property
    def config(self) -> ReaderConfig:
        return self._config

    def expand(self, pbegin):
        from apache_beam.options.pipeline_options import StandardOptions

        config = self._config
        pipeline = pbegin.pipeline
        # A runner that plans micro-batches says so (the SparkRunner, with --streaming).
        # Without the flag an unbounded read runs in batch there, as on the DirectRunner:
        # unplanned, read on and on by the splittable DoFn itself.
        streaming = bool(pipeline.options.view_as(StandardOptions).streaming)
        planned = streaming and bool(getattr(pipeline.runner, "plans_micro_batches", False))
        config = self._config = config._replace(planned=planned)
        reader = _ReadPartitionFn if config.is_bounded else _ReadUnboundedPartitionFn
        return (
            pbegin
            | "Impulse" >> beam.Impulse()
            | "ResolvePartitions" >> beam.ParDo(_ResolvePartitions(config))
            | "ReadPartitions" >> beam.ParDo(reader(config)).with_outputs(DEAD_LETTER, main=RECORDS)
        )

