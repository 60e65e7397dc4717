"""The streaming micro-batch loop (driver side): sources, batches, watermarks, the end.

Each micro-batch:

1. every source delivers: a TestStream its next event (elements, a watermark advance, or a
   processing-time advance of the loop's clock), see :mod:`~runners.spark.streaming.
   test_stream`; without a TestStream the clock is the wall clock;
2. the stages run over the batch (:class:`~runners.spark.streaming.stages.BatchStages`):
   elements first, then the watermark advance and the timers it (or the clock) makes due,
   stage by stage, so panes flow downstream within the batch;
   Splittable DoFns (the Kafka source, any unbounded SDF) run there too: each batch over
   its new input and the residuals it deferred in the previous batch, its output watermark
   held by theirs (:mod:`~runners.spark.streaming.unbounded`);
3. the batch is logged and reported as metrics (namespace ``spark_streaming``): counter
   ``batches``, counters ``source_elements`` (elements the sources delivered: TestStream
   events, splittable DoFn outputs) and ``input_elements`` (elements into keyed steps),
   distribution ``batch_millis``, gauges ``input_rate`` (source elements per second of wall
   time since the previous batch started) and ``watermark_lag_millis`` (the clock minus the output
   watermark of the last keyed step); per keyed step (GroupByKey or stateful stage) gauges
   ``input_watermark_millis``, ``output_watermark_millis``, ``state_keys`` (keys holding
   state after the last batch), ``state_bytes`` (encoded state) and a distribution
   ``state_keys_per_batch``; per splittable DoFn (step: its name) gauges
   ``input_watermark_millis``, ``output_watermark_millis`` and ``residuals``.

Without a TestStream the clock is the wall clock and a batch starts every
``--batch_interval_seconds``. The job ends by itself once every source is exhausted (no
residual left) and every watermark is at the end of time; ``--max_batches`` and
``--streaming_timeout_seconds`` bound it otherwise. Bundle finalizations (Kafka offset
commits) are called after each batch's output is written.

With ``--checkpoint_dir`` the loop is checkpointed every ``--checkpoint_interval_batches``
batches and when it stops by itself, and resumes from the latest checkpoint when started
again (:mod:`~runners.spark.streaming.checkpoint`; metric ``checkpoint_bytes``).

``--streaming_report FILE`` appends one JSON object per batch, one line each, to FILE (a
stable format, for live progress and plots; later fields may be added, none removed)::

    {"batch": 3,                 # 0, 1, 2, ...
     "time": 1700000000.25,      # wall time at the end of the batch, seconds since the epoch
     "clock": 1700000000.1,      # the loop's clock (processing time) of the batch, seconds
     "source_elements": 10000,   # elements the sources (TestStream, splittable DoFns) delivered
     "input_elements": 10000,    # elements into keyed steps (after combiner lifting: partials)
     "rate": 9800.0,             # source elements per second since the previous batch started
     "millis": 840,              # batch processing time
     "input_watermarks": {"Sum/GroupByKey": 1699999990.0, ...},   # per step, see below
     "output_watermarks": {"Sum/GroupByKey": 1699999980.0, "Read": 1699999990.0, ...},
     "watermark_lag_seconds": 20.1,  # clock - output watermark of the last keyed step
     "state_keys": {"Sum/GroupByKey": 120},      # per keyed step
     "state_bytes": {"Sum/GroupByKey": 5400}}    # per keyed step, encoded

Steps are keyed steps (GroupByKey and stateful stages, by transform name) and splittable
DoFns (by transform name). Watermarks are seconds since the epoch, ``null`` at the
beginning of time (nothing known yet) and the string ``"end"`` at the end of time;
``watermark_lag_seconds`` is ``null`` while either end holds.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Dict, List, Optional

from apache_beam.metrics.cells import DistributionData, GaugeData
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from runners.spark.beam_internals import monitoring_infos
from runners.spark.components import SharedComponents, iter_encoded
from runners.spark.execution import RunCancelled
from runners.spark.metrics import pack
from runners.spark.planning import TEST_STREAM_STAGE, ExecutionPlan
from runners.spark.streaming.checkpoint import Checkpoints
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
      report_path: append one JSON line per batch to this file (see the module docstring).
      checkpoint_dir: checkpoint the loop there and resume from it (see :mod:`~runners.
        spark.streaming.checkpoint`); None: no checkpoints.
      checkpoint_interval: batches between checkpoints.
    """

    def __init__(self, spark_context: Any, plan: ExecutionPlan, metrics: Any, parallelism: int,
                 bundle_size: Optional[int], batch_interval: float = 1.0,
                 max_batches: Optional[int] = None, timeout: Optional[float] = None,
                 report_path: Optional[str] = None, checkpoint_dir: Optional[str] = None,
                 checkpoint_interval: int = 10) -> None:
        self.spark_context = spark_context
        self.plan = plan
        self.metrics = metrics
        self.parallelism = parallelism
        self.bundle_size = bundle_size
        self.batch_interval = batch_interval
        self.max_batches = max_batches
        self.timeout = timeout
        self.report_path = report_path
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_interval = checkpoint_interval
        self.resumed_from = 0  # the batch of the checkpoint this run resumed from
        self.components: Optional[SharedComponents] = None
        self.stages: Optional[BatchStages] = None
        self.batches = 0
        #: One dict per batch: index, input elements, millis, watermarks (for inspection).
        self.history: List[Dict[str, Any]] = []
        self._cancelled = threading.Event()
        self._gauge_time = 0.0
        self._previous_start: Optional[float] = None

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
        checkpoints = Checkpoints(self.checkpoint_dir, self.checkpoint_interval, self.plan)
        clock = checkpoints.restore(self, sources, clock)
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
            # The batch's output is written: its bundles' finalizations (offset commits) run.
            self.stages.unbounded.finalize()
            self._report(batch_started, clock, _test_stream_elements(sources, chunks))
            self.batches += 1
            checkpoints.after_batch(self, sources, clock)
            if (all(source.finished for source in sources) and not self.stages.unbounded.pending()
                    and self.stages.watermarks_final(watermarks)):
                break
            if (self.max_batches is not None
                    and self.batches - self.resumed_from >= self.max_batches):
                _LOGGER.info("streaming: stopping after --max_batches=%d", self.max_batches)
                break
            if self.timeout is not None and time.time() - started >= self.timeout:
                _LOGGER.info("streaming: stopping after %.1f s (timeout)", self.timeout)
                break
            if not sources:
                time.sleep(max(0.0, self.batch_interval - (time.time() - batch_started)))
        checkpoints.finish(self, sources, clock)

    def _report(self, batch_started: float, clock: float, test_stream_elements: int) -> None:
        now = time.time()
        millis = int((now - batch_started) * 1000)
        steps = list(self.stages.steps.values())
        inputs = sum(step.inputs for step in steps)
        since = batch_started if self._previous_start is None else self._previous_start
        self._previous_start = batch_started
        delivered = test_stream_elements + sum(self.stages.unbounded.elements.values())
        rate = delivered / max(now - since, 1e-3)
        sources = self.stages.unbounded.watermarks(self.stages.stage_watermarks)
        input_watermarks = {step.name: step.input_watermark for step in steps}
        input_watermarks.update({name: pair[0] for name, pair in sources.items()})
        output_watermarks = {step.name: step.output_watermark for step in steps}
        output_watermarks.update({name: pair[1] for name, pair in sources.items()})
        last = steps[-1].output_watermark if steps else None
        lag = (clock - last.micros / 1e6 if last is not None and MIN_TIMESTAMP < last < MAX_TIMESTAMP
               else None)
        entry = {"batch": self.batches, "time": now, "clock": clock, "input_elements": inputs,
                 "source_elements": delivered, "rate": rate, "millis": millis,
                 "input_watermarks": {name: _seconds(wm) for name, wm in input_watermarks.items()},
                 "output_watermarks": {name: _seconds(wm)
                                       for name, wm in output_watermarks.items()},
                 "watermark_lag_seconds": lag,
                 "state_keys": {step.name: step.keys for step in steps},
                 "state_bytes": {step.name: step.state_bytes for step in steps}}
        self.history.append(entry)
        if self.report_path:
            with open(self.report_path, "a", encoding="utf-8") as report:
                report.write(json.dumps(entry, sort_keys=True) + "\n")
        _LOGGER.info("streaming batch %d: %d keyed inputs (%.0f/s), %d ms, lag %s s, "
                     "output watermarks %s", self.batches, inputs, rate, millis,
                     "-" if lag is None else f"{lag:.1f}", entry["output_watermarks"])
        infos = [
            monitoring_infos.int64_user_counter(METRICS_NAMESPACE, "batches", 1, "loop"),
            monitoring_infos.int64_user_counter(METRICS_NAMESPACE, "input_elements", inputs,
                                                "loop"),
            monitoring_infos.int64_user_counter(METRICS_NAMESPACE, "source_elements", delivered,
                                                "loop"),
            monitoring_infos.int64_user_distribution(
                METRICS_NAMESPACE, "batch_millis", DistributionData(millis, 1, millis, millis),
                "loop"),
        ]
        # Gauges keep the value with the latest timestamp (in ms): make each batch's later.
        self._gauge_time = max(time.time(), self._gauge_time + 0.001)

        def gauge(name: str, value: int, step: str) -> None:
            infos.append(monitoring_infos.int64_user_gauge(
                METRICS_NAMESPACE, name, GaugeData(int(value), self._gauge_time), step))

        gauge("input_rate", rate, "loop")
        if lag is not None:
            gauge("watermark_lag_millis", lag * 1000, "loop")
        for step in steps:
            gauge("input_watermark_millis", _millis(step.input_watermark), step.name)
            gauge("output_watermark_millis", _millis(step.output_watermark), step.name)
            gauge("state_keys", step.keys, step.name)
            gauge("state_bytes", step.state_bytes, step.name)
            infos.append(monitoring_infos.int64_user_distribution(
                METRICS_NAMESPACE, "state_keys_per_batch",
                DistributionData(step.keys, 1, step.keys, step.keys), step.name))
        for name, (input_watermark, output_watermark) in sources.items():
            gauge("input_watermark_millis", _millis(input_watermark), name)
            gauge("output_watermark_millis", _millis(output_watermark), name)
            gauge("residuals", self.stages.unbounded.pending_of(name), name)
        self.metrics.add(pack(infos))

    def release(self) -> None:
        if self.stages is not None:
            self.stages.release()
        if self.components is not None:
            self.components.release()


def _test_stream_elements(sources: List[TestStreamSource],
                          chunks: Dict[bytes, List[bytes]]) -> int:
    """Elements the TestStreams delivered this batch."""
    return sum(1 for source in sources for tag, buffer_id in source.buffers.items()
               for chunk in chunks.get(buffer_id, [])
               for _ in iter_encoded(source.output_impls[tag], chunk))


def _seconds(watermark: Timestamp) -> Any:
    """A watermark in the report: seconds, None at the beginning of time, "end" at its end."""
    if watermark <= MIN_TIMESTAMP:
        return None
    if watermark >= MAX_TIMESTAMP:
        return "end"
    return watermark.micros / 1e6


def _millis(watermark: Timestamp) -> int:
    if watermark >= MAX_TIMESTAMP:
        return MAX_TIMESTAMP.micros // 1000
    return watermark.micros // 1000
