"""The PipelineResult of a run on Spark: state, waiting, cancelling, draining, metrics.

The run executes in a background thread (its Spark jobs carry a job tag of their own), so
``run()`` returns at once and ``cancel()`` can stop the run's Spark jobs, on classic Spark and
on Spark Connect alike.
``wait_until_finish()`` re-raises a failed run's error: the user's own exception from the
failed task (type and message, with the transform named), not Spark's Java error text.

A streaming run is watched while it runs: ``metrics()`` answers with what the tasks
finished so far reported (the loop's own metrics included: watermarks, lag, input rate,
state size per step), and a listener added with ``add_listener`` is called after every
micro-batch with that batch's progress, the dict ``--streaming_report`` writes as a line.
``drain()`` stops it without losing what is in flight (see
:mod:`runners.spark.streaming.loop`); ``--on_signal=drain`` makes SIGTERM drain it.

>>> # result = pipeline.run()
>>> # result.add_listener(lambda progress: print(progress["batch"], progress["millis"]))
>>> # result.metrics().query()["counters"]   # while it runs
>>> # result.drain()                         # final panes, commits, checkpoint: "DONE"
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any, Callable, Dict, Optional

from apache_beam.runners.runner import PipelineResult, PipelineState

from runners.spark.backends.base import Backend, RunMetrics
from runners.spark.execution.batch import PlanExecution
from runners.spark.worker.errors import StageError, original_error
from runners.spark.worker.metrics import SparkMetrics, unpack

_LOGGER = logging.getLogger(__name__)

#: A progress listener: called with each micro-batch's progress (see ``add_listener``).
ProgressListener = Callable[[Dict[str, Any]], None]


class SparkPipelineResult(PipelineResult):
    """A pipeline running (or run) on Spark.

    >>> # result = pipeline.run(); result.wait_until_finish()
    >>> # result.metrics().query()["counters"]
    """

    def __init__(self, backend: Backend, execution: PlanExecution, metrics: RunMetrics) -> None:
        super().__init__(PipelineState.STARTING)
        self._backend = backend
        self._execution = execution
        self._run_metrics = metrics
        self._names = execution.context.names
        self._error: Optional[BaseException] = None
        self._cancel_requested = False
        self._lock = threading.Lock()
        self._thread = backend.thread(self._run, self._names.run_tag)

    def start(self) -> "SparkPipelineResult":
        self._state = PipelineState.RUNNING
        self._thread.start()
        return self

    def _run(self) -> None:
        self._names.start_run()
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
        if threading.current_thread() is not self._thread:  # a listener may drain its run
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
        self._backend.cancel(self._names.run_tag)
        self._thread.join()
        return self._state

    def drain(self, duration: Optional[int] = None) -> str:
        """Drain a streaming run: its sources take no new input, every watermark advances
        to the end of time, every open window fires its final pane and every event-time
        timer runs, sinks commit, a final checkpoint is written, and the run ends DONE.
        Waits at most ``duration`` milliseconds (None: until it ends); returns the state
        (``DRAINING`` while it has not ended). A batch run reads bounded input: it is
        waited for. Raises the run's error if it failed.
        """
        with self._lock:
            if not PipelineState.is_terminal(self._state):
                drain = getattr(self._execution, "drain", None)
                if drain is not None:
                    self._state = PipelineState.DRAINING
                    drain()
        return self.wait_until_finish(duration)

    def add_listener(self, listener: ProgressListener) -> None:
        """Call ``listener(progress)`` after every micro-batch of a streaming run, in the
        run's thread, with the batch's progress: the dict ``--streaming_report`` writes
        (batch, millis, rate, per-step watermarks, lag, state keys and bytes, ...). A
        listener that raises is logged and called again for the next batch."""
        reporter = getattr(self._execution, "reporter", None)
        if reporter is None:
            raise TypeError("progress listeners are called after each micro-batch of a "
                            "--streaming run; this run is a batch run")
        reporter.listeners.append(listener)

    def drain_on_signal(self, signum: int = signal.SIGTERM) -> None:
        """Make ``signum`` drain this run (``--on_signal=drain``); a second one cancels it,
        and once the run has ended the signal does what it did before. Call from the main
        thread (Python runs signal handlers there only)."""
        previous = signal.getsignal(signum)
        signals = []

        def handle(received: int, frame: Any) -> None:
            if PipelineState.is_terminal(self._state):
                signal.signal(received, previous)
                if callable(previous):
                    previous(received, frame)
                elif previous == signal.SIG_DFL:
                    os.kill(os.getpid(), received)
                return
            signals.append(received)
            name = signal.Signals(received).name
            if len(signals) == 1:
                _LOGGER.warning("%s: draining the pipeline (final panes, commits, a final "
                                "checkpoint); send it again to cancel", name)
                threading.Thread(target=self.drain, args=(0,), daemon=True).start()
            else:
                _LOGGER.warning("%s again: cancelling the pipeline", name)
                threading.Thread(target=self.cancel, daemon=True).start()

        signal.signal(signum, handle)

    def metrics(self) -> SparkMetrics:
        """User metrics (counters, distributions, gauges, string sets) of successful tasks:
        while the run goes on, of the tasks finished so far."""
        return SparkMetrics(unpack(self._run_metrics.value))

    def monitoring_metrics(self) -> SparkMetrics:
        """All metrics, including Beam's system metrics (element counts, timings)."""
        return SparkMetrics(unpack(self._run_metrics.value), user_metrics_only=False)


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
