"""The streaming micro-batch loop (driver side): sources, batches, rounds, the end.

Each micro-batch:

1. every source delivers: a TestStream its next event (elements, a watermark advance, or a
   processing-time advance of the loop's clock), see :mod:`~runners.spark.streaming.
   test_stream`; without a TestStream the clock is the wall clock;
2. the stages run over the batch as one Spark job (:mod:`~runners.spark.streaming.
   micro_batch`): elements first, then the watermark advance and the timers it (or the
   clock) makes due, so panes flow downstream within the job. Keyed state stays on the
   executors, one store per key partition (:mod:`~runners.spark.state.store`): a
   batch touches only the keys it brings or that are due, and a batch with nothing to do
   runs no job at all. Splittable DoFns (the Kafka source, any unbounded SDF) run there too,
   over their new input and the residuals they deferred in the previous batch
   (:mod:`~runners.spark.streaming.unbounded`);
3. with a TestStream, the batch *settles* as the DirectRunner's does: when the watermarks
   the job moved (a GroupByKey's holds released, a splittable DoFn's watermark) make a
   keyed step further down due, another round runs, until none is; on the wall clock the
   next batch sees them instead (a second job per batch would double its latency);
4. the batch is reported (:mod:`~runners.spark.streaming.batch_report`).

Without a TestStream the clock is the wall clock and a batch starts every
``--batch_interval_seconds``. The job ends by itself once every source is exhausted (no
residual left) and every watermark is at the end of time; ``--max_batches`` and
``--streaming_timeout_seconds`` bound it otherwise. Bundle finalizations are called after
each batch's output is written.

Draining (:meth:`StreamingExecution.drain`: ``result.drain()``, SIGTERM with
``--on_signal=drain``, the job server's Drain) takes effect between two batches: the sources
take no new input (a TestStream ends where it is, the splittable DoFns' residuals are
dropped, so a Kafka read plans no further offsets), every watermark advances to the end of
time, and the batches that follow settle as a TestStream's do, so every open window fires
its final pane and every event-time timer runs; their output is written and committed, a
final checkpoint is written, and the run ends (DONE). Started again on its checkpoint, a
drained job is at its end and emits nothing.

With ``--checkpoint_dir`` keyed state is durable at every batch (each task writes what it
changed there), the loop is checkpointed every ``--checkpoint_interval_batches`` batches and
when it stops by itself, and resumes from the latest checkpoint when started again
(:mod:`~runners.spark.state.checkpoint`; metric ``checkpoint_bytes``). On a cluster
master a pipeline with keyed state needs it: a key partition's store is a cache on the
executor that last ran it, rebuilt from the checkpoint location wherever its task runs (the
backend's :class:`~runners.spark.backends.base.PartitionAffinity` sends it back there).
When the run ends its stores are removed from the executors.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from runners.spark.backends.base import Backend, RunMetrics
from runners.spark.dependencies.worker import JobEnvironment
from runners.spark.execution.run_context import RunCancelled, RunContext
from runners.spark.planning.execution_plan import TEST_STREAM_STAGE, ExecutionPlan
from runners.spark.state.checkpoint import Checkpoints
from runners.spark.state.encoding import processing_micros
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.update import NameMapping
from runners.spark.streaming.batch_report import BatchReporter
from runners.spark.streaming.keyed_batch import remove_run_partition
from runners.spark.streaming.micro_batch import Round, RoundGraph, StreamingState
from runners.spark.streaming.planned_sources import PlannedSources
from runners.spark.streaming.test_stream import TestStreamSource
from runners.spark.worker.components import iter_encoded

_LOGGER = logging.getLogger(__name__)

#: Rounds one TestStream batch may take to settle before the runner calls it a loop.
MAX_ROUNDS = 1000


class StreamingExecution:
    """One streaming run of an :class:`ExecutionPlan` (same interface as ``PlanExecution``).

    Args:
      backend: how the run reaches Spark.
      plan: the stages, planned with ``streaming=True``.
      metrics: the run's metrics.
      parallelism: key partitions of every GroupByKey and stateful stage.
      requested_parallelism: ``--spark_parallelism`` as given (None: not given): a
        checkpoint of another number of key partitions is re-split into it (see
        :mod:`~runners.spark.state.rescale`); without it a resumed run keeps the
        checkpoint's.
      bundle_size: at most this many elements per bundle, or None.
      batch_interval: seconds between batches when the clock is the wall clock.
      max_batches: stop after this many batches (None: run until the sources end).
      timeout: stop after this many seconds (None: no limit).
      report_path: append one JSON line per batch to this file (see
        :mod:`~runners.spark.streaming.batch_report`).
      checkpoint_storage: ``--checkpoint_dir``: keyed state is durable there at every batch,
        and the loop is checkpointed there and resumes from it (see :mod:`~runners.spark.
        state.checkpoint`); None: no checkpoints (refused on a cluster master when the
        pipeline has keyed state).
      checkpoint_interval: batches between checkpoints.
      compact_rounds: run small rounds in one task on a local master (see :mod:`~runners.
        spark.streaming.compact_round`).
      name_mapping: ``--transform_name_mapping``: resuming the checkpoint of an earlier
        version of the pipeline, its steps' old names -> new (see :mod:`~runners.spark.
        state.update`).
      environment: what the pipeline staged for its workers.
    """

    def __init__(self, backend: Backend, plan: ExecutionPlan, metrics: RunMetrics,
                 parallelism: int,
                 bundle_size: Optional[int], batch_interval: float = 1.0,
                 max_batches: Optional[int] = None, timeout: Optional[float] = None,
                 report_path: Optional[str] = None,
                 checkpoint_storage: Optional[DurableStorage] = None,
                 checkpoint_interval: int = 10, compact_rounds: bool = True,
                 name_mapping: NameMapping = NameMapping(),
                 environment: JobEnvironment = JobEnvironment(),
                 requested_parallelism: Optional[int] = None) -> None:
        check_durable_state(backend.single_executor, backend.describe(), plan,
                            checkpoint_storage)
        self.context = RunContext(backend, plan, metrics, parallelism, bundle_size, environment)
        self.requested_parallelism = requested_parallelism
        self.batch_interval = batch_interval
        self.max_batches = max_batches
        self.timeout = timeout
        self.reporter = BatchReporter(metrics, report_path)
        self.checkpoint_storage = checkpoint_storage
        self.checkpoint_interval = checkpoint_interval
        self.compact_rounds = compact_rounds
        self.name_mapping = name_mapping
        self.resumed_from = 0  # the batch of the checkpoint this run resumed from
        self.state: Optional[StreamingState] = None
        self.batches = 0
        self._planned: Optional[PlannedSources] = None
        self._drain_requested = threading.Event()
        self.draining = False  # the loop has started draining

    @property
    def plan(self) -> ExecutionPlan:
        return self.context.plan

    @property
    def history(self) -> List[Dict[str, Any]]:
        """One dict per batch, as reported (see :mod:`~runners.spark.streaming.batch_report`)."""
        return self.reporter.history

    def cancel(self) -> None:
        self.context.cancelled.set()
        self._drain_requested.set()  # wakes the loop waiting for its next batch

    def drain(self) -> None:
        """Ask the loop to drain (see the module docstring); returns at once."""
        self._drain_requested.set()

    def run(self) -> None:
        self.context.start()
        checkpoints = Checkpoints(self.checkpoint_storage, self.checkpoint_interval, self.plan,
                                  self.name_mapping)
        if checkpoints.enabled:  # a restart from the checkpoint names its bundles as before
            self.context.run_name = checkpoints.run_name
        # Stores of this run on the executors: a fresh directory, rebuilt from the
        # checkpoint location when resuming.
        self.state = StreamingState.create(self.context, uuid.uuid4().hex[:16],
                                           self.checkpoint_storage, checkpoints.state_directory)
        self.state.compact_rounds = self.compact_rounds
        self._planned = PlannedSources(self.plan, self.context.components)
        self.state.planned_stages = frozenset(self._planned.stage_indexes())
        sources = [TestStreamSource(stage, self.context.components)
                   for stage in self.plan.stages if stage.kind == TEST_STREAM_STAGE]
        # A TestStream's clock starts at 0 and moves only with its events, as the
        # DirectRunner's TestClock does; otherwise processing time is the wall clock.
        clock = 0.0 if sources else time.time()
        clock = checkpoints.restore(self, sources, clock)
        settle = bool(sources)
        started = time.time()
        state = self.state
        while True:
            self.context.check_cancelled()
            if self._drain_requested.is_set() and not self.draining:
                self._start_draining(sources)
                settle = True
            batch_started = time.time()
            chunks: Dict[bytes, List[bytes]] = {}
            advance = 0.0
            for source in sources:
                delivered, advanced_by = source.next_batch()
                for buffer_id, buffer_chunks in delivered.items():
                    chunks.setdefault(buffer_id, []).extend(buffer_chunks)
                advance = max(advance, advanced_by)
            clock = clock + advance if sources else time.time()
            clock = self._plan_sources(checkpoints, clock)
            for source in sources:
                for tag, buffer_id in source.buffers.items():
                    state.watermarks.sources[buffer_id] = source.watermarks[tag]
            checkpoint = checkpoints.is_due(self.batches + 1)
            self.context.batch = self.batches
            self.context.names.start_batch(self.batches)
            jobs_before = self.context.jobs + state.residuals.jobs
            rounds, compact = self._run_batch(chunks, clock, settle)
            # The batch's output is written: its bundles' finalizations run, and sources
            # that plan their batches hear that it is.
            with self.context.names.job("bundle finalization (sources commit what they read)"):
                state.residuals.finalize()
            self._planned.done()
            delivered = _test_stream_elements(sources, chunks) + sum(
                state.residuals.elements.values())
            self.reporter.report(self.batches, batch_started, clock, delivered,
                                 self.context.jobs + state.residuals.jobs - jobs_before,
                                 rounds, state, compact)
            # Executors that joined get key partitions (a look every few batches).
            state.placement.spread(self.batches, {step.name: step.executors
                                                  for step in state.steps.values()},
                                   self.context.names)
            self.batches += 1
            checkpoints.note_batch(self.batches, state.round_number)
            checkpoints.rescale_when_replayed(self)
            if checkpoint:
                checkpoints.write(self, sources, clock)
            if (all(source.finished for source in sources) and not state.residuals.pending()
                    and state.watermarks.final()):
                break
            if (self.max_batches is not None
                    and self.batches - self.resumed_from >= self.max_batches):
                _LOGGER.info("streaming: stopping after --max_batches=%d", self.max_batches)
                break
            if self.timeout is not None and time.time() - started >= self.timeout:
                _LOGGER.info("streaming: stopping after %.1f s (timeout)", self.timeout)
                break
            if not sources and not self.draining:
                self._drain_requested.wait(
                    max(0.0, self.batch_interval - (time.time() - batch_started)))
        if checkpoints.enabled and checkpoints.written_batch != self.batches:
            checkpoints.write(self, sources, clock)
        self.reporter.count_late_storage_retries()
        if self.draining:
            _LOGGER.info("streaming: drained after batch %d%s", self.batches - 1,
                         f"; final checkpoint in {checkpoints.directory}"
                         if checkpoints.enabled else "")

    def _start_draining(self, sources: List[TestStreamSource]) -> None:
        """Sources take no new input, and their watermarks go to the end of time."""
        self.draining = True
        for source in sources:
            source.drain()
        dropped = self.state.residuals.drain()
        _LOGGER.info("streaming: draining after batch %d: the sources take no new input (%d "
                     "unread restrictions dropped), watermarks advance to the end of time, "
                     "open windows fire their final panes", self.batches - 1, dropped)

    def _plan_sources(self, checkpoints: Checkpoints, clock: float) -> float:
        """Plan what the sources that plan their batches read in this one (Kafka: an offset
        range per partition), and log it before the batch runs; a batch an earlier driver
        logged and no checkpoint covers is replayed as it was (its plan, its clock, and the
        records it planned, which decide whether it runs compact: its bundles must be named
        as they were). Returns the batch's clock; ``state.planned_records`` says how many
        records the plan reads."""
        state = self.state
        if not self._planned or self.draining:
            state.planned_records = 0
            return clock
        logged = checkpoints.logged_plan(self.batches)
        if logged is not None:
            clock, residuals, state.planned_records = logged
            state.residuals.restore(residuals, replace_all=False)
            _LOGGER.info("streaming: replaying batch %d as it was planned before the restart",
                         self.batches)
            return clock
        self._planned.plan(state.residuals, clock)
        state.planned_records = self._planned.planned_records
        checkpoints.log_plan(self.batches, clock,
                             state.residuals.snapshot(self._planned.stage_indexes()),
                             {stage.index: stage.name for stage in self.plan.stages},
                             state.planned_records)
        return clock

    def _run_batch(self, chunks: Dict[bytes, List[bytes]], clock: float,
                   settle: bool) -> Tuple[int, int]:
        """Run one batch's rounds; returns how many ran with a job, and how many of them
        in one task (compact)."""
        state = self.state
        for step in state.steps.values():
            step.start_batch()
        state.residuals.next_batch()
        rounds = compact = 0
        first = True
        while True:
            state.watermarks.refresh()
            round_ = Round(state.round_number + 1, clock, chunks if first else {},
                           first and not state.watermarks.impulse_done)
            round_.step_inputs = {key: state.step_input(key) for key in state.steps}
            graph = RoundGraph(self.context, state, round_)
            if graph.plan_pass().is_empty():  # nothing to do: only watermarks move
                for key, step in state.steps.items():
                    step.skip(round_.step_inputs[key])
            else:
                state.round_number = round_.number
                graph.apply(graph.run_pass())
                rounds += 1
                compact += graph.compact
                if round_.impulse:
                    state.watermarks.impulse_done = True
            state.watermarks.refresh()
            state.expire_side_inputs()
            first = False
            if not settle or not self._moved_into_due(clock):
                return rounds, compact
            if rounds >= MAX_ROUNDS:
                raise RuntimeError(f"a batch did not settle after {MAX_ROUNDS} rounds: keyed "
                                   "steps kept becoming due as watermarks moved")

    def _moved_into_due(self, clock: float) -> bool:
        """A keyed step whose input watermark the last round moved has something due, or
        main elements held for their side inputs became ready."""
        state = self.state
        clock_micros = processing_micros(clock)
        for key, step in state.steps.items():
            moved = state.step_input(key)
            if moved > step.input_watermark and step.is_due(moved, clock_micros):
                return True
        return any(state.releasable(stage) for stage in self.plan.stages)

    def release(self) -> None:
        if self._planned is not None:
            self._planned.close()
        self.context.release()
        if self.state is not None and self.state.steps:
            try:
                with self.context.names.job("remove the run's keyed state from the executors"):
                    removed = sum(self.state.placement.run_at_every_place(
                        functools.partial(remove_run_partition, self.state.run)))
                _LOGGER.debug("streaming: removed the run's state from %d executor directories",
                              removed)
            except Exception as error:  # the context may be stopping; Spark removes its
                _LOGGER.warning("streaming: the run's stores could not be removed from the "
                                "executors (%s); Spark removes them with its local "
                                "directories when the executors stop", error)
            self.state.placement.release()


def check_durable_state(single_executor: bool, where: str, plan: ExecutionPlan,
                        storage: Optional[DurableStorage]) -> None:
    """On a cluster (not ``single_executor``), keyed state must be durable: refuse to start
    without a checkpoint location (a key partition's task may run on any executor);
    ``where`` names the Spark in the message."""
    if storage is not None or single_executor:
        return
    keyed = sorted({group.transform_name for group in plan.groups.values()}
                   | {stage.name for stage in plan.stages if stage.keyed})
    if keyed:
        raise ValueError(
            f"this streaming pipeline keeps keyed state ({', '.join(keyed[:3])}"
            f"{', ...' if len(keyed) > 3 else ''}) and runs on {where}: give "
            "--checkpoint_dir on storage every executor can read and write (a shared "
            "path, s3://, gs://, hdfs://): a key partition's task may run on any executor, "
            "which rebuilds the partition's state from there")


def _test_stream_elements(sources: List[TestStreamSource],
                          chunks: Dict[bytes, List[bytes]]) -> int:
    """Elements a TestStream delivered this batch (its buffers' chunks, decoded)."""
    count = 0
    for source in sources:
        for tag, buffer_id in source.buffers.items():
            impl = source.output_impls[tag]
            for chunk in chunks.get(buffer_id, []):
                count += sum(1 for _ in iter_encoded(impl, chunk))
    return count


__all__ = ["StreamingExecution", "RunCancelled"]
