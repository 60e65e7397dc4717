"""The PipelineResult of a run on Spark: state, waiting, cancelling, metrics.

The run executes in a background thread (a Spark job group of its own), so ``run()``
returns at once and ``cancel()`` can stop the run's Spark jobs. ``wait_until_finish()``
re-raises a failed run's error: the user's own exception from the failed task (type and
message, with the transform named), not Spark's Java error text.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Optional

from apache_beam.runners.runner import PipelineResult, PipelineState
from pyspark import InheritableThread

from runners.spark.errors import StageError, original_error
from runners.spark.execution import PlanExecution
from runners.spark.metrics import SparkMetrics, unpack


class SparkPipelineResult(PipelineResult):
    """A pipeline running (or run) on Spark.

    >>> # result = pipeline.run(); result.wait_until_finish()
    >>> # result.metrics().query()["counters"]
    """

    def __init__(self, spark_context: Any, execution: PlanExecution, metrics: Any) -> None:
        super().__init__(PipelineState.STARTING)
        self._spark_context = spark_context
        self._execution = execution
        self._metrics_accumulator = metrics
        self._job_group = f"beam-{uuid.uuid4().hex}"
        self._error: Optional[BaseException] = None
        self._cancel_requested = False
        self._lock = threading.Lock()
        self._thread = InheritableThread(target=self._run, name=self._job_group, daemon=True)

    def start(self) -> "SparkPipelineResult":
        self._state = PipelineState.RUNNING
        self._thread.start()
        return self

    def _run(self) -> None:
        self._spark_context.setJobGroup(
            self._job_group, "Apache Beam pipeline", interruptOnCancel=True)
        try:
            self._execution.run()
        except Exception as error:  # reported through wait_until_finish
            with self._lock:
                if self._cancel_requested:
                    self._state = PipelineState.CANCELLED
                else:
                    self._error = original_error(error) or _spark_failure(error)
                    self._state = PipelineState.FAILED
        else:
            self._state = PipelineState.DONE
        finally:
            self._execution.release()

    @property
    def state(self) -> str:
        return self._state

    def wait_until_finish(self, duration: Optional[int] = None) -> str:
        """Wait for the run to end (at most ``duration`` milliseconds); return its state.

        Raises the run's error if it failed.
        """
        self._thread.join(None if duration is None else duration / 1000.0)
        if self._state == PipelineState.FAILED and self._error is not None:
            raise self._error
        return self._state

    def cancel(self) -> str:
        """Stop the run's Spark jobs; returns the final state (CANCELLED unless it had ended)."""
        with self._lock:
            if PipelineState.is_terminal(self._state):
                return self._state
            self._cancel_requested = True
        self._execution.cancel()
        self._spark_context.cancelJobGroup(self._job_group)
        self._thread.join()
        return self._state

    def metrics(self) -> SparkMetrics:
        """User metrics (counters, distributions, gauges, string sets) of successful tasks."""
        return SparkMetrics(unpack(self._metrics_accumulator.value))

    def monitoring_metrics(self) -> SparkMetrics:
        """All metrics, including Beam's system metrics (element counts, timings)."""
        return SparkMetrics(unpack(self._metrics_accumulator.value), user_metrics_only=False)


def _spark_failure(error: BaseException) -> BaseException:
    """A failure with no user exception inside: driver-side errors as they are, Spark's own
    (e.g. a lost executor) summarized in one line, the full text kept as the cause."""
    if not type(error).__module__.startswith(("py4j", "pyspark")):
        return error
    text = str(error).strip().splitlines()
    summary = text[0] if text else type(error).__name__
    failure = StageError(f"the Spark job failed: {summary}")
    failure.__cause__ = error
    return failure
