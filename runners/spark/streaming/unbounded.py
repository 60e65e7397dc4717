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

Exactly once per batch: re-reading a source is not deterministic, so the stage's result is
persisted and locally checkpointed, and one Spark job computes it (collecting the
residuals); readers downstream read that result, never a recomputation.

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
>>> carried.residuals[3] = [Residual(0, b"element", 5_000_000, 0.0)]
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
import time
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Optional, Tuple

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from pyspark import StorageLevel

from runners.spark.beam_internals import beam_fn_api_pb2, common_urns, monitoring_infos
from runners.spark.bundles import DeferredWork, StageTask, process_partition
from runners.spark.planning import SDK_STAGE, StageSpec
from runners.spark.streaming import coders as _coders  # noqa: F401 (registers the coder)

_LOGGER = logging.getLogger(__name__)

_PROCESS_URN = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn
#: Version of :meth:`CarriedResiduals.snapshot`'s format.
SNAPSHOT_VERSION = 1
#: Spark jobs :meth:`CarriedResiduals.finalize` may run to reach every worker process.
FINALIZE_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class Residual:
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
        if transform.spec.urn == _PROCESS_URN:
            name = transform.unique_name
            name = name[:-len("/Process")] if name.endswith("/Process") else name
            return name, frozenset(transform.outputs.values())
    return None


class CarriedResiduals:
    """The residuals of every splittable stage, carried by the driver between batches.

    Args:
      spark_context: the SparkContext (None only to restore or inspect a snapshot).
      parallelism: at most this many partitions for a batch's residuals.
    """

    def __init__(self, spark_context: Any = None, parallelism: int = 1) -> None:
        self.sc = spark_context
        self.parallelism = parallelism
        self.residuals: Dict[int, List[Residual]] = {}
        #: stage index -> elements the splittable DoFn emitted this batch.
        self.elements: Dict[int, int] = {}
        self._results: Dict[int, Any] = {}
        self._batch = 0
        self._pending: Dict[int, Tuple[int, int]] = {}  # pid -> (report sequence, pending)
        #: Callbacks of batches before this one that are still pending are dropped.
        self._stale_before = 0
        self._names: Dict[int, Optional[str]] = {}  # stage index -> splittable DoFn or None
        self._outputs: Dict[int, FrozenSet[str]] = {}  # stage index -> its PCollections
        #: stage index -> the stage's input watermark in the last batch.
        self.input_watermarks: Dict[int, Timestamp] = {}

    # ----- the plan
    def reads(self, stage: StageSpec) -> bool:
        """True for a stage that runs a splittable DoFn (it is run by :meth:`run`)."""
        if stage.index not in self._names:
            step = splittable_step(stage)
            self._names[stage.index] = None if step is None else step[0]
            self._outputs[stage.index] = frozenset() if step is None else step[1]
        return self._names[stage.index] is not None

    # ----- watermarks
    def output_watermark(self, stage_index: int, input_watermark: Timestamp,
                         previous: Timestamp) -> Timestamp:
        """min(input watermark, residual watermarks), never before ``previous``."""
        self.input_watermarks[stage_index] = input_watermark
        return max(previous, min(input_watermark, self.hold(stage_index)))

    def watermarks(self, stage_watermarks: Dict[int, Timestamp]
                   ) -> Dict[str, Tuple[Timestamp, Timestamp]]:
        """{splittable DoFn name: (input watermark, output watermark)} after the last batch."""
        return {self._names[index]: (watermark, stage_watermarks.get(index, MIN_TIMESTAMP))
                for index, watermark in self.input_watermarks.items()}

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

    # ----- one batch
    def next_batch(self) -> None:
        """A new micro-batch starts (every earlier one has been written)."""
        self._batch += 1
        self.elements = {}

    def run(self, stage: StageSpec, task: StageTask, sources: List[Tuple[int, Any, Any]],
            inputs_empty: bool, clock: float) -> Tuple[Any, bool]:
        """Run the stage over this batch's input and its due residuals, exactly once.

        Returns the stage's tagged output RDD and whether it is known to be empty; the
        residuals it deferred replace the ones it ran.
        """
        carried = self.residuals.get(stage.index, [])
        due = [residual for residual in carried if residual.resume_at <= clock]
        waiting = [residual for residual in carried if residual.resume_at > clock]
        if inputs_empty and not due:
            return self.sc.emptyRDD(), True
        tagged = [rdd.map(functools.partial(_tag, index)) for index, _, rdd in sources
                  if not inputs_empty]
        if due:
            records = [(residual.input_index, residual.element) for residual in due]
            tagged.append(self.sc.parallelize(records, min(len(records), self.parallelism)))
        records = tagged[0] if len(tagged) == 1 else self.sc.union(tagged)
        result = records.mapPartitions(functools.partial(
            process_splittable_partition, task, self._batch, self._stale_before,
            self._outputs[stage.index]))
        result = result.persist(StorageLevel.MEMORY_AND_DISK)
        result.localCheckpoint()
        reports = result.filter(_is_not_output).collect()
        self._release(stage.index)
        self._results[stage.index] = result
        deferred = waiting + [
            Residual(payload[0], payload[1], payload[2], clock + payload[3])
            for kind, payload in reports if kind == "residual"]
        self.residuals[stage.index] = deferred
        outputs = 0
        for kind, meta in reports:
            if kind == "meta":
                outputs += meta["outputs"]
                self.elements[stage.index] = self.elements.get(stage.index, 0) + meta["elements"]
                self._note_pending(meta)
        if not outputs:
            return self.sc.emptyRDD(), True
        return result.filter(_is_output).map(_payload), False

    # ----- finalization
    def _note_pending(self, meta: Dict[str, Any]) -> None:
        sequence, _ = self._pending.get(meta["pid"], (-1, 0))
        if meta["sequence"] > sequence:
            self._pending[meta["pid"]] = (meta["sequence"], meta["pending"])

    def finalize(self) -> int:
        """Call the finalizations of every batch run so far (its output was written);
        returns how many worker processes could not be reached (their callbacks are dropped)."""
        for _ in range(FINALIZE_ATTEMPTS):
            waiting = [pid for pid, (_, pending) in self._pending.items() if pending]
            if not waiting:
                return 0
            slices = 2 * max(self.parallelism, len(waiting))
            reports = self.sc.parallelize(range(slices), slices).mapPartitions(
                functools.partial(_finalize_partition, self._batch + 1,
                                  self._stale_before)).collect()
            for meta in reports:
                self._note_pending(meta)
        missed = [pid for pid, (_, pending) in self._pending.items() if pending]
        if missed:
            _LOGGER.warning("streaming: bundle finalizations of worker processes %s could not "
                            "be run; they are dropped (a source may re-read some records "
                            "after a restart)", missed)
            self._stale_before = self._batch + 1
            for pid in missed:
                self._pending[pid] = (self._pending[pid][0], 0)
        return len(missed)

    # ----- checkpoints
    def snapshot(self) -> bytes:
        """The carried residuals as versioned JSON (finalization callbacks are not kept)."""
        stages = {str(index): [
            [r.input_index, base64.b64encode(r.element).decode("ascii"), r.watermark_micros,
             r.resume_at] for r in residuals] for index, residuals in self.residuals.items()}
        return json.dumps({"version": SNAPSHOT_VERSION, "stages": stages},
                          sort_keys=True).encode("utf-8")

    def restore(self, snapshot: bytes) -> None:
        """Carry the residuals of a :meth:`snapshot` into the next batch."""
        data = json.loads(snapshot.decode("utf-8"))
        if data.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"residual snapshot version {data.get('version')!r}: this runner "
                             f"reads version {SNAPSHOT_VERSION}; start without the checkpoint")
        self.residuals = {
            int(index): [Residual(input_index, base64.b64decode(element), watermark, resume_at)
                         for input_index, element, watermark, resume_at in residuals]
            for index, residuals in data["stages"].items()}

    def _release(self, stage_index: int) -> None:
        previous = self._results.pop(stage_index, None)
        if previous is not None:
            previous.unpersist(blocking=False)

    def release(self) -> None:
        for index in list(self._results):
            self._release(index)


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


def _report(outputs: int, elements: int = 0) -> Dict[str, Any]:
    return {"pid": os.getpid(), "sequence": next(_SEQUENCE),
            "pending": len(_FINALIZATIONS), "outputs": outputs, "elements": elements}


def _element_count(infos: List[Any], pcollections: FrozenSet[str]) -> int:
    """Elements the SDK counted into these PCollections (Beam's element_count metric)."""
    return sum(monitoring_infos.extract_counter_value(info) for info in infos
               if info.urn == monitoring_infos.ELEMENT_COUNT_URN
               and info.labels.get(monitoring_infos.PCOLLECTION_LABEL) in pcollections)


def process_splittable_partition(task: StageTask, batch: int, stale_before: int,
                                 counted: FrozenSet[str], records: Iterable[Tuple[int, bytes]]
                                 ) -> Iterator[Tuple[str, Any]]:
    """The stage over one partition; yields ``("out", (output index, chunk))`` records,
    ``("residual", (input index, element, watermark micros, delay seconds))`` records and
    one ``("meta", {...})``."""
    _finalize_before(batch, stale_before)
    deferred = DeferredWork()
    outputs = 0
    for index, chunk in process_partition(task, records, deferred):
        outputs += 1
        yield "out", (index, chunk)
    input_index = {spec.transform_id: index for index, spec in enumerate(task.stage.inputs)}
    for transform_id, residual in deferred.residuals:
        yield "residual", (input_index[transform_id], residual.application.element,
                           _watermark_micros(residual), _delay_seconds(residual))
    if deferred.finalizations:
        _FINALIZATIONS.append((batch, deferred.finalizations))
    yield "meta", _report(outputs, _element_count(deferred.monitoring_infos, counted))


def _finalize_partition(batch: int, stale_before: int, unused) -> Iterator[Dict[str, Any]]:
    _finalize_before(batch, stale_before)
    time.sleep(0.05)  # keep this worker busy so the job's other tasks reach other workers
    yield _report(0)


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


def _tag(index: int, chunk: bytes) -> Tuple[int, bytes]:
    return index, chunk


def _is_output(record) -> bool:
    return record[0] == "out"


def _is_not_output(record) -> bool:
    return record[0] != "out"


def _payload(record) -> Any:
    return record[1]
