"""The streaming micro-batch loop (driver side): sources, batches, watermarks, the end.

Each micro-batch:

1. every source delivers: a TestStream its next event (elements, a watermark advance, or a
   processing-time advance of the loop's clock), see :mod:`~runners.spark.streaming.
   test_stream`; without a TestStream the clock is the wall clock;
2. the stages run over the batch (:class:`~runners.spark.streaming.stages.BatchStages`):
   elements first, then the watermark advance and the timers it (or the clock) makes due,
   stage by stage, so panes flow downstream within the batch;
3. the batch is logged and reported as metrics (namespace ``spark_streaming``): counter
   ``batches``, counter ``input_elements`` (elements into keyed steps), distribution
   ``batch_millis``, and per keyed step (GroupByKey or stateful stage) a gauge
   ``output_watermark_millis``, a gauge ``state_keys`` (keys holding state after the last
   batch) and a distribution ``state_keys_per_batch``.

The job ends by itself once every source is exhausted and every watermark is at the end of
time; ``--max_batches`` and ``--streaming_timeout_seconds`` bound it otherwise.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional

from apache_beam.metrics.cells import DistributionData, GaugeData
from apache_beam.utils.timestamp import MAX_TIMESTAMP, Timestamp

from runners.spark.beam_internals import monitoring_infos
from runners.spark.components import SharedComponents
from runners.spark.execution import RunCancelled
from runners.spark.metrics import pack
from runners.spark.planning import TEST_STREAM_STAGE, ExecutionPlan
from runners.spark.streaming.stages import BatchStages
from runners.spark.streaming.test_stream import TestStreamSource

_LOGGER = logging.getLogger(__name__)

#: Namespace of the loop's own metrics in ``result.metrics()``.
METRICS_NAMESPACE = "spark_streaming"


class StreamingExecution:
    """One streaming run of an :class:`ExecutionPlan` (same interface as ``PlanExecution``).

    Args:
      spark_context: the SparkContext to run on.
      plan: the stages, planned with ``streaming=True``.
      metrics: the run's MonitoringInfo accumulator.
      parallelism: key partitions of every GroupByKey and stateful stage.
      bundle_size: at most this many elements per bundle, or None.
      batch_interval: seconds between batches when the clock is the wall clock.
      max_batches: stop after this many batches (None: run until the sources end).
      timeout: stop after this many seconds (None: no limit).
    """

    def __init__(self, spark_context: Any, plan: ExecutionPlan, metrics: Any, parallelism: int,
                 bundle_size: Optional[int], batch_interval: float = 1.0,
                 max_batches: Optional[int] = None, timeout: Optional[float] = None) -> None:
        self.spark_context = spark_context
        self.plan = plan
        self.metrics = metrics
        self.parallelism = parallelism
        self.bundle_size = bundle_size
        self.batch_interval = batch_interval
        self.max_batches = max_batches
        self.timeout = timeout
        self.components: Optional[SharedComponents] = None
        self.stages: Optional[BatchStages] = None
        self.batches = 0
        #: One dict per batch: index, input elements, millis, watermarks (for inspection).
        self.history: List[Dict[str, Any]] = []
        self._cancelled = threading.Event()
        self._gauge_time = 0.0

    def cancel(self) -> None:
        self._cancelled.set()

    def run(self) -> None:
        self.components = SharedComponents.create(self.spark_context, self.plan.components)
        self.stages = BatchStages(self.spark_context, self.plan, self.components, self.metrics,
                                  self.parallelism, self.bundle_size)
        sources = [TestStreamSource(stage, self.components) for stage in self.plan.stages
                   if stage.kind == TEST_STREAM_STAGE]
        # A TestStream's clock starts at 0 and moves only with its events, as the
        # DirectRunner's TestClock does; otherwise processing time is the wall clock.
        clock = 0.0 if sources else time.time()
        started = time.time()
        while True:
            if self._cancelled.is_set():
                raise RunCancelled("the pipeline was cancelled")
            batch_started = time.time()
            chunks: Dict[bytes, List[bytes]] = {}
            advance = 0.0
            for source in sources:
                delivered, advanced_by = source.next_batch()
                for buffer_id, buffer_chunks in delivered.items():
                    chunks.setdefault(buffer_id, []).extend(buffer_chunks)
                advance = max(advance, advanced_by)
            clock = clock + advance if sources else time.time()
            watermarks = {buffer_id: source.watermarks[tag] for source in sources
                          for tag, buffer_id in source.buffers.items()}
            self.stages.run_batch(chunks, watermarks, clock)
            self._report(batch_started, chunks, sources)
            self.batches += 1
            if all(source.finished for source in sources) and self.stages.watermarks_final(
                    watermarks):
                return
            if self.max_batches is not None and self.batches >= self.max_batches:
                _LOGGER.info("streaming: stopping after --max_batches=%d", self.max_batches)
                return
            if self.timeout is not None and time.time() - started >= self.timeout:
                _LOGGER.info("streaming: stopping after %.1f s (timeout)", self.timeout)
                return
            if not sources:
                time.sleep(max(0.0, self.batch_interval - (time.time() - batch_started)))

    def _report(self, batch_started: float, chunks: Dict[bytes, List[bytes]],
                sources: List[TestStreamSource]) -> None:
        millis = int((time.time() - batch_started) * 1000)
        inputs = sum(step.inputs for step in self.stages.steps.values())
        watermarks = {step.name: _millis(step.output_watermark)
                      for step in self.stages.steps.values()}
        entry = {"batch": self.batches, "step_inputs": inputs, "millis": millis,
                 "watermarks": watermarks,
                 "state_keys": {step.name: step.keys for step in self.stages.steps.values()}}
        self.history.append(entry)
        _LOGGER.info("streaming batch %d: %d keyed inputs, %d ms, watermarks %s",
                     self.batches, inputs, millis, watermarks)
        infos = [
            monitoring_infos.int64_user_counter(METRICS_NAMESPACE, "batches", 1, "loop"),
            monitoring_infos.int64_user_counter(METRICS_NAMESPACE, "input_elements", inputs,
                                                "loop"),
            monitoring_infos.int64_user_distribution(
                METRICS_NAMESPACE, "batch_millis", DistributionData(millis, 1, millis, millis),
                "loop"),
        ]
        # Gauges keep the value with the latest timestamp (in ms): make each batch's later.
        self._gauge_time = max(time.time(), self._gauge_time + 0.001)
        for step in self.stages.steps.values():
            infos.append(monitoring_infos.int64_user_gauge(
                METRICS_NAMESPACE, "output_watermark_millis",
                GaugeData(_millis(step.output_watermark), self._gauge_time), step.name))
            infos.append(monitoring_infos.int64_user_gauge(
                METRICS_NAMESPACE, "state_keys", GaugeData(step.keys, self._gauge_time),
                step.name))
            infos.append(monitoring_infos.int64_user_distribution(
                METRICS_NAMESPACE, "state_keys_per_batch",
                DistributionData(step.keys, 1, step.keys, step.keys), step.name))
        self.metrics.add(pack(infos))

    def release(self) -> None:
        if self.stages is not None:
            self.stages.release()
        if self.components is not None:
            self.components.release()


def _millis(watermark: Timestamp) -> int:
    if watermark >= MAX_TIMESTAMP:
        return MAX_TIMESTAMP.micros // 1000
    return watermark.micros // 1000
