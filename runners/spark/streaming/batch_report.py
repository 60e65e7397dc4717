"""The per-batch report of the streaming loop: a log line, metrics, and a JSON line.

Each batch is logged (INFO) and reported as metrics (namespace ``spark_streaming``):
counter ``batches``, counters ``source_elements`` (elements the sources delivered: TestStream
events, splittable DoFn outputs) and ``input_elements`` (elements into keyed steps),
distribution ``batch_millis``, gauges ``input_rate`` (source elements per second of wall time
since the previous batch started), ``watermark_lag_millis`` (the clock minus the output
watermark of the last keyed step) and ``spark_jobs`` (Spark jobs the batch ran); per keyed
step (GroupByKey or stateful stage) gauges ``input_watermark_millis``,
``output_watermark_millis``, ``state_keys`` (keys holding state after the batch),
``state_bytes`` (their encoded state), a distribution ``state_keys_per_batch`` and a
counter ``stores_loaded`` (stores rebuilt from the checkpoint location); counter
``storage_retries`` (transient errors of the checkpoint location retried, by the driver and
the tasks: :mod:`~runners.spark.state.storage.faults`); per
splittable DoFn (step: its name) gauges ``input_watermark_millis``,
``output_watermark_millis`` and ``residuals``.

Listeners (``SparkPipelineResult.add_listener``) are called after each batch with the
batch's dict, the one the report line holds.

``--streaming_report FILE`` appends one JSON object per batch, one line each, to FILE (a
stable format, for live progress and plots; later fields may be added, none removed)::

    {"batch": 3,                 # 0, 1, 2, ...
     "time": 1700000000.25,      # wall time at the end of the batch, seconds since the epoch
     "clock": 1700000000.1,      # the loop's clock (processing time) of the batch, seconds
     "source_elements": 10000,   # elements the sources (TestStream, splittable DoFns) delivered
     "input_elements": 10000,    # elements into keyed steps (after combiner lifting: partials)
     "rate": 9800.0,             # source elements per second since the previous batch started
     "millis": 840,              # batch processing time
     "spark_jobs": 1,            # Spark jobs the batch ran (0: nothing to do)
     "rounds": 1,                # rounds (a TestStream batch settles its watermarks)
     "compact_rounds": 0,        # of them, run in one Spark task (a local master, little data)
     "input_watermarks": {"Sum/GroupByKey": 1699999990.0, ...},   # per step, see below
     "output_watermarks": {"Sum/GroupByKey": 1699999980.0, "Read": 1699999990.0, ...},
     "watermark_lag_seconds": 20.1,  # clock - output watermark of the last keyed step
     "state_keys": {"Sum/GroupByKey": 120},      # per keyed step
     "state_bytes": {"Sum/GroupByKey": 5400},    # per keyed step, encoded
     "touched_keys": {"Sum/GroupByKey": 20},     # per keyed step: keys read and written
     "stores_loaded": {"Sum/GroupByKey": 0},     # per keyed step: key partitions whose store
                                 # was rebuilt from the checkpoint location (a task that ran
                                 # on another executor than the store's, or a new executor)
     "executors": {"Sum/GroupByKey": {"0": "1@host-a", "1": "2@host-b"}},  # per keyed
                                 # step: partition -> the executor that ran its last task and
                                 # holds its store (Spark's executor id @ host)
     "storage_retries": 0,       # transient errors of --checkpoint_dir retried since the
                                 # previous report (the driver's and the keyed tasks')
     "side_input_elements": {"Rates/Map": 12},   # per side input (its PCollection): kept
     "held_for_side_inputs": 0}  # main elements waiting for their side inputs to be ready

Steps are keyed steps (GroupByKey and stateful stages, by transform name) and splittable
DoFns (by transform name). Watermarks are seconds since the epoch, ``null`` at the
beginning of time (nothing known yet) and the string ``"end"`` at the end of time;
``watermark_lag_seconds`` is ``null`` while either end holds.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable, Dict, List, Optional

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from runners.spark.beam_internals import DistributionData, GaugeData, monitoring_infos
from runners.spark.state.storage.faults import take_retries
from runners.spark.worker.metrics import pack

_LOGGER = logging.getLogger(__name__)

#: Namespace of the loop's own metrics in ``result.metrics()``.
METRICS_NAMESPACE = "spark_streaming"


class BatchReporter:
    """Reports each batch (see the module docstring).

    Args:
      metrics: the run's metrics (:class:`~runners.spark.backends.base.RunMetrics`).
      report_path: append one JSON line per batch to this file, or None.
    """

    def __init__(self, metrics: Any, report_path: Optional[str]) -> None:
        self.metrics = metrics
        self.report_path = report_path
        #: One dict per batch (as written to the report file), for inspection.
        self.history: List[Dict[str, Any]] = []
        #: Called with each batch's dict (``SparkPipelineResult.add_listener``).
        self.listeners: List[Callable[[Dict[str, Any]], None]] = []
        self._gauge_time = 0.0
        self._previous_start: Optional[float] = None

    def report(self, batch: int, batch_started: float, clock: float, delivered: int,
               jobs: int, rounds: int, state: Any, compact_rounds: int = 0) -> Dict[str, Any]:
        """Report one batch; ``state`` is the loop's
        :class:`~runners.spark.streaming.micro_batch.StreamingState`."""
        now = time.time()
        millis = int((now - batch_started) * 1000)
        steps = list(state.steps.values())
        inputs = sum(step.inputs for step in steps)
        retries = take_retries() + sum(step.storage_retries for step in steps)
        since = batch_started if self._previous_start is None else self._previous_start
        self._previous_start = batch_started
        rate = delivered / max(now - since, 1e-3)
        splittable = state.watermarks.splittable()
        input_watermarks = {step.name: step.input_watermark for step in steps}
        input_watermarks.update({name: pair[0] for name, pair in splittable.items()})
        output_watermarks = {step.name: step.output_watermark for step in steps}
        output_watermarks.update({name: pair[1] for name, pair in splittable.items()})
        last = steps[-1].output_watermark if steps else None
        lag = (clock - last.micros / 1e6 if last is not None and MIN_TIMESTAMP < last < MAX_TIMESTAMP
               else None)
        entry = {"batch": batch, "time": now, "clock": clock, "input_elements": inputs,
                 "source_elements": delivered, "rate": rate, "millis": millis,
                 "spark_jobs": jobs, "rounds": rounds, "compact_rounds": compact_rounds,
                 "input_watermarks": {name: _seconds(wm) for name, wm in input_watermarks.items()},
                 "output_watermarks": {name: _seconds(wm)
                                       for name, wm in output_watermarks.items()},
                 "watermark_lag_seconds": lag,
                 "state_keys": {step.name: step.keys for step in steps},
                 "state_bytes": {step.name: step.state_bytes for step in steps},
                 "touched_keys": {step.name: step.touched for step in steps},
                 "stores_loaded": {step.name: step.loaded for step in steps},
                 "executors": {step.name: {str(partition): executor for partition, executor
                                           in sorted(step.executors.items())}
                               for step in steps},
                 "storage_retries": retries,
                 "side_input_elements": state.side_input_sizes(),
                 "held_for_side_inputs": state.held.count()}
        self.history.append(entry)
        if self.report_path:
            with open(self.report_path, "a", encoding="utf-8") as report:
                report.write(json.dumps(entry, sort_keys=True) + "\n")
        _LOGGER.info("streaming batch %d: %d keyed inputs (%.0f/s), %d ms, %d Spark jobs, lag %s s, "
                     "output watermarks %s%s", batch, inputs, rate, millis, jobs,
                     "-" if lag is None else f"{lag:.1f}", entry["output_watermarks"],
                     f", {retries} storage retries" if retries else "")
        self._metrics(inputs, delivered, millis, rate, lag, jobs, steps, splittable, state)
        self._count_retries(retries)
        for listener in list(self.listeners):
            try:
                listener(dict(entry))
            except Exception:  # a listener's bug must not stop the job
                _LOGGER.warning("streaming: the progress listener %r failed on batch %d",
                                listener, batch, exc_info=True)
        return entry

    def count_late_storage_retries(self) -> None:
        """Count the retries the driver made after the last batch's report (its final
        checkpoint) in the ``storage_retries`` counter."""
        self._count_retries(take_retries())

    def _count_retries(self, retries: int) -> None:
        if retries:
            self.metrics.add(pack([monitoring_infos.int64_user_counter(
                METRICS_NAMESPACE, "storage_retries", retries, "loop")]))

    def _metrics(self, inputs: int, delivered: int, millis: int, rate: float,
                 lag: Optional[float], jobs: int, steps: List[Any],
                 splittable: Dict[str, Any], state: Any) -> None:
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
        gauge("spark_jobs", jobs, "loop")
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
            infos.append(monitoring_infos.int64_user_counter(
                METRICS_NAMESPACE, "stores_loaded", step.loaded, step.name))
        for name, (input_watermark, output_watermark) in splittable.items():
            gauge("input_watermark_millis", _millis(input_watermark), name)
            gauge("output_watermark_millis", _millis(output_watermark), name)
            gauge("residuals", state.residuals.pending_of(name), name)
        self.metrics.add(pack(infos))


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
