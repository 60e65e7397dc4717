"""Splittable DoFns in the micro-batch loop: residuals carried from batch to batch.

A stage that contains a splittable DoFn's ``ProcessSizedElementsAndRestrictions`` (the
Kafka source, any unbounded SDF, a bounded SDF that self-checkpoints) runs each micro-batch
over its upstream input of this batch *plus the residuals it deferred in the previous
batch*. A residual (``tracker.defer_remainder()``) is not re-run in the batch that made it,
as batch execution does (an unbounded source would never end the batch): its encoded
element (element, remaining restriction, watermark estimator state) is kept on the driver
and spread over the partitions of the next batch, so several restrictions (Kafka
partitions) are read in parallel. A residual that asked for a delay waits until the loop's
clock reaches it.

Watermarks: the SDK reports, with each residual, the watermark of the DoFn's watermark
estimator (``residual.application.output_watermarks``). It holds the stage's output
watermark: ``min(input watermark, residual watermarks)`` (a residual without one holds it
at the beginning of time, as Beam's FnApiRunner does). With no residual left and the input
done, the stage's output watermark is its input watermark; it never moves back.

The stage runs in the micro-batch's one Spark job, like every stage: its residuals travel
to the driver as reports (:class:`~runners.spark.worker.records.Residual`) with the batch's data,
and are applied when the job is done (:meth:`CarriedResiduals.apply`). So the watermark a
batch's keyed steps see from a splittable DoFn is the one its residuals reported in the
*previous* batch: the data of this batch is at or after it.

Bundle finalization (Kafka commits offsets there): the callbacks are not called when the
bundle ends, but once the whole batch's output has been written: the loop then calls
:meth:`CarriedResiduals.finalize`, which runs small Spark jobs until every worker process
that reported callbacks has run them, so the callbacks of batch N all run before those of
batch N + 1 exist (a Kafka commit never moves back). It costs a Spark job per batch, only
while a source registers callbacks. Finalization is best effort, as in Beam: a callback
whose worker could not be reached is dropped (never run late, out of order), which only
means a source re-reads some records after a restart.

Checkpointing (``--checkpoint_dir``): :meth:`CarriedResiduals.snapshot` returns the carried
residuals as versioned JSON bytes, :meth:`CarriedResiduals.restore` takes them back.

>>> carried = CarriedResiduals()
>>> carried.residuals[3] = [CarriedResidual(0, b"element", 5_000_000, 0.0)]
>>> carried.hold(3)  # stage 3's output watermark is held at 5 s
Timestamp(5)
>>> restored = CarriedResiduals()
>>> restored.restore(carried.snapshot())
>>> restored.residuals == carried.residuals, restored.hold(7) == MAX_TIMESTAMP
(True, True)
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import itertools
import json
import logging
import os
import socket
import time
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Optional, Tuple

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from runners.spark.beam_internals import (
    SPLITTABLE_PROCESS_URN,
    beam_fn_api_pb2,
    monitoring_infos,
)
from runners.spark.planning.execution_plan import SDK_STAGE, StageSpec
from runners.spark.worker.bundles import DeferredWork, StageTask, process_partition
from runners.spark.worker.records import Elements, Residual, SplittableReport

_LOGGER = logging.getLogger(__name__)

#: Version of :meth:`CarriedResiduals.snapshot`'s format.
SNAPSHOT_VERSION = 1
#: Spark jobs :meth:`CarriedResiduals.finalize` may run to reach every worker process.
FINALIZE_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class CarriedResidual:
    """One deferred restriction: the stage input it re-enters, its encoded element, the
    watermark its estimator reported (micros; None: unknown) and when it may resume."""

    input_index: int
    element: bytes
    watermark_micros: Optional[int]
    resume_at: float  # the loop's clock, seconds


def splittable_step(stage: StageSpec) -> Optional[Tuple[str, FrozenSet[str]]]:
    """(name, output PCollection ids) of the splittable DoFn whose process step the stage
    runs, or None."""
    if stage.kind != SDK_STAGE or not stage.descriptor:
        return None
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    for transform in descriptor.transforms.values():
        if transform.spec.urn == SPLITTABLE_PROCESS_URN:
            name = transform.unique_name
            name = name[:-len("/Process")] if name.endswith("/Process") else name
            return name, frozenset(transform.outputs.values())
    return None


class CarriedResiduals:
    """The residuals of every splittable stage, carried by the driver between batches.

    Args:
      backend: how the run reaches Spark (None only to restore or inspect a snapshot).
      parallelism: at most this many partitions for a batch's residuals.
    """

    def __init__(self, backend: Any = None, parallelism: int = 1) -> None:
        self.backend = backend
        self.parallelism = parallelism
        self.residuals: Dict[int, List[CarriedResidual]] = {}
        #: Spark jobs run to call bundle finalizations (for the batch report).
        self.jobs = 0
        #: stage index -> elements the splittable DoFn emitted this batch.
        self.elements: Dict[int, int] = {}
        self._ran: Dict[int, float] = {}  # stage index -> clock, in the job being built
        self._batch = 0
        #: worker process (see SplittableReport) -> (report sequence, callbacks pending)
        self._pending: Dict[str, Tuple[int, int]] = {}
        #: Callbacks of batches before this one that are still pending are dropped.
        self._stale_before = 0
        self._names: Dict[int, Optional[str]] = {}  # stage index -> splittable DoFn or None
        self._outputs: Dict[int, FrozenSet[str]] = {}  # stage index -> its PCollections

    # ----- the plan
    def reads(self, stage: StageSpec) -> bool:
        """True for a stage that runs a splittable DoFn (built by :meth:`stage_dataset`)."""
        if stage.index not in self._names:
            step = splittable_step(stage)
            self._names[stage.index] = None if step is None else step[0]
            self._outputs[stage.index] = frozenset() if step is None else step[1]
        return self._names[stage.index] is not None

    # ----- watermarks
    def name_of(self, stage_index: int) -> Optional[str]:
        """The splittable DoFn's name (its transform's) that a stage runs."""
        return self._names.get(stage_index)

    def pending_of(self, name: str) -> int:
        """Residuals carried for the splittable DoFn ``name``."""
        return sum(len(self.residuals.get(index, [])) for index, candidate in self._names.items()
                   if candidate == name)

    def hold(self, stage_index: int) -> Timestamp:
        """The earliest watermark of the stage's carried residuals (end of time if none)."""
        return min((MIN_TIMESTAMP if residual.watermark_micros is None
                    else Timestamp(micros=residual.watermark_micros)
                    for residual in self.residuals.get(stage_index, [])), default=MAX_TIMESTAMP)

    def pending(self) -> int:
        return sum(len(residuals) for residuals in self.residuals.values())

    def drain(self) -> int:
        """Drop every residual: the splittable DoFns read nothing more (Beam truncates an
        unbounded restriction to nothing on drain), so their watermarks hold nothing back.
        Returns how many were dropped."""
        dropped = self.pending()
        self.residuals = {}
        return dropped

    # ----- one batch
    def next_batch(self) -> None:
        """A new micro-batch starts (every earlier one has been written)."""
        self._batch += 1
        self.elements = {}

    def has_due(self, stage: StageSpec, clock: float) -> bool:
        return any(residual.resume_at <= clock for residual in self.residuals.get(stage.index, []))

    def stage_dataset(self, stage: StageSpec, task: StageTask, records: Any, input_live: bool,
                      clock: float) -> Any:
        """The stage over this batch's input and its due residuals: ``Elements`` on its
        outputs, then ``Residual`` and ``SplittableReport`` reports (applied by
        :meth:`apply` once the batch's job is done)."""
        due = [residual for residual in self.residuals.get(stage.index, [])
               if residual.resume_at <= clock]
        parts = [records] if input_live else []
        if due:
            carried = [Elements(residual.input_index, residual.element) for residual in due]
            parts.append(self.backend.source(carried, min(len(carried), self.parallelism)))
        union = self.backend.union(parts) if parts else self.backend.empty()
        self._ran[stage.index] = clock
        return union.map_partitions(functools.partial(
            process_splittable_partition, task, stage.index, self._batch, self._stale_before,
            self._outputs[stage.index]))

    def compact_input(self, stage: StageSpec, clock: float
                      ) -> Tuple[Tuple[Elements, ...], Tuple[int, int, FrozenSet[str]]]:
        """For a round run in one task: the stage's due residuals as input records, and the
        arguments of :func:`process_splittable_partition` (the stage counts as run)."""
        due = tuple(Elements(residual.input_index, residual.element)
                    for residual in self.residuals.get(stage.index, [])
                    if residual.resume_at <= clock)
        self._ran[stage.index] = clock
        return due, (self._batch, self._stale_before, self._outputs[stage.index])

    def apply(self, reports: List[Any]) -> None:
        """Take the residuals and reports of the stages run by the batch's job: each
        stage's new residuals replace the ones it ran."""
        deferred: Dict[int, List[CarriedResidual]] = {index: [] for index in self._ran}
        for report in reports:
            if isinstance(report, Residual):
                clock = self._ran[report.stage]
                deferred[report.stage].append(CarriedResidual(
                    report.port, report.element, report.watermark_micros,
                    clock + report.delay_seconds))
            elif isinstance(report, SplittableReport):
                self.elements[report.stage] = (self.elements.get(report.stage, 0)
                                               + report.elements)
                self._note_pending(report)
        for index, clock in self._ran.items():
            waiting = [residual for residual in self.residuals.get(index, [])
                       if residual.resume_at > clock]
            self.residuals[index] = waiting + deferred[index]
        self._ran = {}

    # ----- finalization
    def _note_pending(self, report: SplittableReport) -> None:
        sequence, _ = self._pending.get(report.worker, (-1, 0))
        if report.sequence > sequence:
            self._pending[report.worker] = (report.sequence, report.pending)

    def finalize(self) -> int:
        """Call the finalizations of every batch run so far (its output was written);
        returns how many worker processes could not be reached (their callbacks are dropped)."""
        for _ in range(FINALIZE_ATTEMPTS):
            waiting = [worker for worker, (_, pending) in self._pending.items() if pending]
            if not waiting:
                return 0
            slices = 2 * max(self.parallelism, len(waiting))
            reports = self.backend.collect(self.backend.source(
                range(slices), slices).map_partitions(functools.partial(
                    _finalize_partition, self._batch + 1, self._stale_before)))
            self.jobs += 1
            for report in reports:
                self._note_pending(report)
        missed = [worker for worker, (_, pending) in self._pending.items() if pending]
        if missed:
            _LOGGER.warning("streaming: bundle finalizations of worker processes %s could not "
                            "be run; they are dropped (a source may re-read some records "
                            "after a restart)", missed)
            self._stale_before = self._batch + 1
            for worker in missed:
                self._pending[worker] = (self._pending[worker][0], 0)
        return len(missed)

    # ----- checkpoints
    def snapshot(self, stages: Optional[List[int]] = None) -> bytes:
        """The carried residuals (of these stage indexes; default: all) as versioned JSON
        (finalization callbacks are not kept)."""
        stages = {str(index): [
            [r.input_index, base64.b64encode(r.element).decode("ascii"), r.watermark_micros,
             r.resume_at] for r in residuals] for index, residuals in self.residuals.items()
            if stages is None or index in stages}
        return json.dumps({"version": SNAPSHOT_VERSION, "stages": stages},
                          sort_keys=True).encode("utf-8")

    def restore(self, snapshot: bytes, replace_all: bool = True) -> None:
        """Carry the residuals of a :meth:`snapshot` into the next batch (without
        ``replace_all``, only its stages' residuals are replaced)."""
        data = json.loads(snapshot.decode("utf-8"))
        if data.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"residual snapshot version {data.get('version')!r}: this runner "
                             f"reads version {SNAPSHOT_VERSION}; start without the checkpoint")
        restored = {
            int(index): [CarriedResidual(input_index, base64.b64decode(element), watermark,
                                         resume_at)
                         for input_index, element, watermark, resume_at in residuals]
            for index, residuals in data["stages"].items()}
        if replace_all:
            self.residuals = restored
        else:
            self.residuals.update(restored)


# ----- worker side
#: Finalization callbacks of this worker process: (batch, callbacks), oldest first.
_FINALIZATIONS: List[Tuple[int, List[Any]]] = []
_SEQUENCE = itertools.count()


def _finalize_before(batch: int, stale_before: int) -> None:
    """Run the callbacks of batches before ``batch`` (their output was written), dropping
    those before ``stale_before`` (the driver gave up on them: newer ones may have run)."""
    while _FINALIZATIONS and _FINALIZATIONS[0][0] < batch:
        created, callbacks = _FINALIZATIONS.pop(0)
        if created < stale_before:
            _LOGGER.warning("dropping %d stale bundle finalizations of batch %d",
                            len(callbacks), created)
            continue
        for callback in callbacks:
            try:
                callback()
            except Exception as error:  # finalization is best effort, as in Beam
                _LOGGER.warning("bundle finalization failed: %s", error)


def worker_name() -> str:
    """This Python worker across the cluster: host, executor (its local directories, unique
    per executor) and process id; a process id alone repeats across hosts."""
    return (f"{socket.gethostname()}:{os.environ.get('SPARK_LOCAL_DIRS', '-')}:"
            f"{os.getpid()}")


def _report(stage: int, outputs: int, elements: int = 0) -> SplittableReport:
    return SplittableReport(stage, worker_name(), next(_SEQUENCE), len(_FINALIZATIONS),
                            outputs, elements)


def _element_count(infos: List[Any], pcollections: FrozenSet[str]) -> int:
    """Elements the SDK counted into these PCollections (Beam's element_count metric)."""
    return sum(monitoring_infos.extract_counter_value(info) for info in infos
               if info.urn == monitoring_infos.ELEMENT_COUNT_URN
               and info.labels.get(monitoring_infos.PCOLLECTION_LABEL) in pcollections)


def process_splittable_partition(task: StageTask, stage_index: int, batch: int,
                                 stale_before: int, counted: FrozenSet[str],
                                 records: Iterable[Any]) -> Iterator[Any]:
    """The stage over one partition: ``Elements`` on its outputs, the reports it received,
    a :class:`Residual` per deferred restriction and one :class:`SplittableReport`."""
    _finalize_before(batch, stale_before)
    deferred = DeferredWork()
    outputs = 0
    for record in process_partition(task, records, deferred):
        if type(record) is Elements:
            outputs += 1
        yield record
    input_index = {spec.transform_id: index for index, spec in enumerate(task.stage.inputs)}
    for transform_id, residual in deferred.residuals:
        yield Residual(stage_index, input_index[transform_id], residual.application.element,
                       _watermark_micros(residual), _delay_seconds(residual))
    if deferred.finalizations:
        _FINALIZATIONS.append((batch, deferred.finalizations))
    yield _report(stage_index, outputs, _element_count(deferred.monitoring_infos, counted))


def _finalize_partition(batch: int, stale_before: int,
                        records: Iterable[Any]) -> Iterator[SplittableReport]:
    for _ in records:  # PySpark reuses a Python worker only if it read all of its input
        pass
    _finalize_before(batch, stale_before)
    time.sleep(0.05)  # keep this worker busy so the job's other tasks reach other workers
    yield _report(-1, 0)


def _watermark_micros(residual: Any) -> Optional[int]:
    watermarks = residual.application.output_watermarks
    if not watermarks:
        return None
    return min(value.seconds * 1_000_000 + value.nanos // 1000
               for value in watermarks.values())


def _delay_seconds(residual: Any) -> float:
    if not residual.HasField("requested_time_delay"):
        return 0.0
    delay = residual.requested_time_delay
    return delay.seconds + delay.nanos / 1e9
