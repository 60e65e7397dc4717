"""Running a fused stage over one Spark partition, in the task's Python worker.

A partition is processed as one bundle (or several, with ``--bundle_size``) by Beam's own
SDK harness, in process: a ``BundleProcessor`` built from the stage's serialized
``ProcessBundleDescriptor``, fed and drained through an in-memory data channel. Building a
processor costs milliseconds, so processors are pooled per worker process and reset between
bundles; a processor that failed is dropped, never reused.

A pooled processor serves only tasks of its own run and side-input table
(:attr:`StageTask.pool_key`), never those of another job with the same descriptor: it keeps
more than its code. Beam's DoFn invoker fills in the values of side inputs in the global
window at the first element and keeps them for the processor's life (``DoFn`` instances
keep what their ``setup`` and earlier bundles left too). Pooled by descriptor alone, a
processor gave a job the side inputs of an earlier job of the same shape: ``Create(data) |
CombineGlobally(sum)``, whose default comes through a side input, gave another job's sum.

After the last bundle of a partition, timers the stage set are fired (the input is bounded,
so its watermark is at the end of time: every event-time timer is due), repeatedly until no
new ones are set. Residuals of self-checkpointing splittable DoFns are re-processed until
none is left, as Beam's FnApiRunner runs a splittable DoFn to its end in batch (an
unbounded one too: PeriodicImpulse, a Kafka read); each once the delay it asked for has
passed (a PeriodicImpulse ahead of the clock asks to resume at its next fire time). The
loop sleeps until the earliest is due instead of re-running it at once: the FnApiRunner
re-runs residuals immediately, spinning a core until then, for the same output. A
cancelled run's Spark kills the task's Python worker, sleeping or not.
In streaming (a :class:`DeferredWork` passed in) residuals and bundle finalizations are
handed back instead, for the next micro-batch (:mod:`runners.spark.streaming.unbounded`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import math
import os
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from runners.spark.beam_internals import (
    FNAPI_RUNNER_CAPABILITIES,
    BundleProcessor,
    GlobalCachingStateHandler,
    InMemoryDataChannel,
    InMemoryDataChannelFactory,
    StateCache,
    StateHandler,
    beam_fn_api_pb2,
    create_OutputStream,
    take_finalization_callbacks,
)
from runners.spark.chains import operation as _chain_operation  # noqa: F401 - registers it
from runners.spark.chains.window_assignment import use_native_window_assignment
from runners.spark.dependencies.worker import JobEnvironment, prepare_python_worker
from runners.spark.dependencies.working_directory import in_driver_directory
from runners.spark.planning.execution_plan import StageSpec
from runners.spark.text_io.planning import use_text_io_operations
from runners.spark.worker.collection import young_objects_collected_less_often
from runners.spark.worker.components import SharedComponents, iter_encoded
from runners.spark.worker.decode_loop import STAGE_INPUT_URNS, use_decode_loop
from runners.spark.worker.errors import failing_as_task
from runners.spark.worker.metrics import pack
from runners.spark.worker.records import Elements
from runners.spark.worker.replay_names import BundleNamer
from runners.spark.worker.side_inputs import TaskStateHandler

#: (descriptor digest, run, side-input table digest) -> idle processors, per Python worker
#: process (:attr:`StageTask.pool_key`).
PoolKey = Tuple[str, str, Optional[str]]
_POOL: Dict[PoolKey, List["StageProcessor"]] = {}
_POOL_LIMIT = 64
_BUNDLE_IDS = itertools.count()
#: Without --bundle_size, a bundle ends once it holds this much encoded input.
MAX_BUNDLE_BYTES = 64 << 20

TimerKey = Tuple[str, str]  # (transform id, timer family id)


class StageTask:
    """Everything a task needs to run a stage: picklable, no protos.

    Args:
      stage: the stage's plan.
      components: the pipeline components (for coders), broadcast.
      side_inputs: the stage's side-input table, ``value`` and ``digest`` (a
        :class:`~runners.spark.worker.side_inputs.SharedSideInputs`), or None.
      metrics: the run's metrics sink (:class:`~runners.spark.backends.base.MetricsSink`),
        or None.
      bundle_size: at most this many elements per bundle; None for one bundle per partition.
      descriptor: the stage's descriptor broadcast, when it is too large to ship with every
        task (``stage.descriptor`` is then left empty).
      namer: names the task's bundles (:mod:`runners.spark.worker.replay_names`), or None.
      environment: what the job staged for its workers (packages, main session).
      run: what identifies the run in this process (no other run's tasks reuse its pooled
        processors).
    """

    def __init__(self, stage: StageSpec, components: SharedComponents, side_inputs: Any,
                 metrics: Any, bundle_size: Optional[int], descriptor: Any = None,
                 namer: Optional[BundleNamer] = None,
                 environment: JobEnvironment = JobEnvironment(), run: str = "") -> None:
        self.digest = hashlib.sha256(stage.descriptor).hexdigest()
        self.run = run
        self.stage = stage if descriptor is None else dataclasses.replace(stage, descriptor=b"")
        self.components = components
        self.side_inputs = side_inputs
        self.metrics = metrics
        self.bundle_size = bundle_size
        self._descriptor = descriptor
        self.namer = namer
        self.environment = environment

    def descriptor(self) -> bytes:
        return self.stage.descriptor if self._descriptor is None else self._descriptor.value

    @property
    def pool_key(self) -> PoolKey:
        """Which pooled processors may run this task: built from the same descriptor, in
        the same run, for the same side-input table (see the module docstring)."""
        side_inputs = None if self.side_inputs is None else self.side_inputs.digest
        return self.digest, self.run, side_inputs


class _DelegatingState(StateHandler):
    """The processor's state handler for its lifetime; each task plugs in its own state."""

    def __init__(self) -> None:
        self.target: StateHandler = TaskStateHandler()

    def get_raw(self, state_key, continuation_token=None):
        return self.target.get_raw(state_key, continuation_token)

    def append_raw(self, state_key, data):
        return self.target.append_raw(state_key, data)

    def clear(self, state_key):
        return self.target.clear(state_key)

    def process_instruction_id(self, bundle_id):
        return self.target.process_instruction_id(bundle_id)

    def done(self):
        self.target.done()


class StageProcessor:
    """A ``BundleProcessor`` for one stage, with its in-memory data channel."""

    def __init__(self, descriptor_bytes: bytes,
                 environment: JobEnvironment = JobEnvironment()) -> None:
        prepare_python_worker(environment)  # the job's packages and main session, first
        self.descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(descriptor_bytes)
        # WindowInto of the standard WindowFns runs natively: ~3x faster windowed stages.
        use_native_window_assignment(self.descriptor)
        # Beam's text IO marked by planning (--bulk_text_io) runs the runner's operations.
        use_text_io_operations(self.descriptor)
        use_decode_loop(self.descriptor)
        self.channel = InMemoryDataChannel()
        self.state = _DelegatingState()
        self.caching_state = GlobalCachingStateHandler(StateCache(0), self.state)
        self.processor = BundleProcessor(
            FNAPI_RUNNER_CAPABILITIES,
            self.descriptor,
            self.caching_state,
            InMemoryDataChannelFactory(self.channel.inverse()),
        )

    def run_bundle(self, data: Dict[str, List[bytes]], timers: Dict[TimerKey, List[bytes]],
                   finalizations: Optional[List[Any]] = None,
                   namer: Optional[BundleNamer] = None):
        """Process one bundle; returns (outputs by transform, timers set, residuals, metrics).

        With a ``finalizations`` list, the bundle's finalization callbacks are appended to
        it instead of being called now (streaming calls them once the batch's output is
        written, see :mod:`runners.spark.streaming.unbounded`).
        """
        bundle_id = f"{self.descriptor.id}-{os.getpid()}-{next(_BUNDLE_IDS)}"
        for transform_id, chunks in data.items():
            stream = self.channel.output_stream(bundle_id, transform_id)
            for chunk in chunks:
                stream.write(chunk)
            stream.close()
        for (transform_id, family_id), encoded in timers.items():
            stream = self.channel.output_timer_stream(bundle_id, transform_id, family_id)
            for timer in encoded:
                stream.write(timer)
            stream.close()
        named = namer.bundle() if namer is not None else contextlib.nullcontext()
        with named, self.caching_state.process_instruction_id(bundle_id, []):
            residuals, needs_finalization = self.processor.process_bundle(bundle_id)
        outputs: Dict[str, List[bytes]] = {}
        timers_set: Dict[TimerKey, List[bytes]] = {}
        for element in self.channel.input_elements(bundle_id, []):
            if isinstance(element, beam_fn_api_pb2.Elements.Timers):
                timers_set.setdefault((element.transform_id, element.timer_family_id), []).append(
                    element.timers)
            elif element.data:
                outputs.setdefault(element.transform_id, []).append(element.data)
        infos = self.processor.monitoring_infos()
        if needs_finalization and finalizations is not None:
            finalizations.extend(self.finalization_callbacks())
        elif needs_finalization:
            self.processor.finalize_bundle()
        self.processor.reset()
        return outputs, timers_set, residuals, infos

    def finalization_callbacks(self) -> List[Any]:
        """The callbacks the bundle's DoFns registered, taken instead of called."""
        return take_finalization_callbacks(self.processor)

    def residual_input(self, application) -> str:
        """The DATA_INPUT transform that feeds a residual's transform (as FnApiRunner finds it)."""
        transforms = self.descriptor.transforms
        wanted = transforms[application.transform_id].inputs[application.input_id]
        for transform_id, transform in transforms.items():
            if transform.spec.urn in STAGE_INPUT_URNS and wanted in transform.outputs.values():
                return transform_id
        for transform in transforms.values():  # the read is followed by a truncate step
            if wanted in transform.outputs.values():
                upstream = next(iter(transform.inputs.values()))
                for transform_id, candidate in transforms.items():
                    if (candidate.spec.urn in STAGE_INPUT_URNS
                            and upstream in candidate.outputs.values()):
                        return transform_id
        raise RuntimeError(f"no input of stage feeds residual of {application.transform_id!r}")

    def timer_coder_impl(self, key: TimerKey) -> Any:
        return self.processor.timers_info[key].timer_coder_impl


def checkout(task: StageTask) -> StageProcessor:
    """An idle processor built for the task's :attr:`~StageTask.pool_key` from this worker's
    pool, or a new one."""
    idle = _POOL.get(task.pool_key)
    if idle:
        return idle.pop()
    return StageProcessor(task.descriptor(), task.environment)


def checkin(task: StageTask, processor: StageProcessor) -> None:
    """Return a processor that finished its bundles cleanly to the pool.

    Idle processors of the same stage built for another run or side-input table are shut
    down (their run has most likely ended, or moved on to a newer table: keeping them would
    hold their DoFns for nothing), and the whole pool when it is full."""
    key = task.pool_key
    for other in [other for other in _POOL if other[0] == key[0] and other != key]:
        _shut_down(_POOL.pop(other))
    if sum(len(idle) for idle in _POOL.values()) >= _POOL_LIMIT:
        for idle in _POOL.values():
            _shut_down(idle)
        _POOL.clear()
    _POOL.setdefault(key, []).append(processor)


def _shut_down(processors: List[StageProcessor]) -> None:
    for stale in processors:
        stale.processor.shutdown()


def process_partition(
    task: StageTask, records: Iterator[Any], deferred: Optional["DeferredWork"] = None,
) -> Iterator[Any]:
    """Run ``task.stage`` over one partition: :class:`~runners.spark.worker.records.Elements`
    on the stage's input ports, and reports for the driver, handed on untouched.

    Yields ``Elements`` on the stage's output ports, then the reports; raises
    :class:`~runners.spark.worker.errors.TaskFailure` carrying the user's exception when a
    bundle fails. With ``deferred`` (streaming), residuals of self-checkpointing splittable
    DoFns and bundle finalizations are handed back in it instead of being run here. It runs
    in the driver's working directory (:mod:`~runners.spark.dependencies.working_directory`).
    """
    with in_driver_directory(task.environment.working_directory), \
            young_objects_collected_less_often():
        yield from _process_partition(task, records, deferred)


def _process_partition(task: StageTask, records: Iterator[Any],
                       deferred: Optional["DeferredWork"]) -> Iterator[Any]:
    stage = task.stage
    output_index = {transform_id: index for index, (transform_id, _) in enumerate(stage.outputs)}
    processor = checkout(task)
    table = task.side_inputs.value if task.side_inputs is not None else None
    processor.state.target = TaskStateHandler(table)
    collected: List[Any] = []
    reports: List[Any] = []
    timers = PendingTimers(processor, stage)
    try:
        with failing_as_task(stage.name, processor.processor.shutdown):
            for bundle in _bundles(task, records, reports):
                for transform_id, chunk in _run_with_residuals(processor, bundle, {}, timers,
                                                               collected, deferred, task.namer):
                    yield Elements(output_index[transform_id], chunk)
            while timers:
                for transform_id, chunk in _run_with_residuals(processor, {}, timers.due(),
                                                               timers, collected, deferred,
                                                               task.namer):
                    yield Elements(output_index[transform_id], chunk)
        checkin(task, processor)
    finally:
        processor.state.target = TaskStateHandler()
    if collected and task.metrics is not None:
        yield from task.metrics.report(pack(collected))
    yield from reports


class DeferredWork:
    """What a streaming task hands back to the driver instead of doing it now: residuals
    (``(DATA_INPUT transform id, DelayedBundleApplication)``) and finalization callbacks."""

    def __init__(self) -> None:
        self.residuals: List[Tuple[str, Any]] = []
        self.finalizations: List[Any] = []
        self.monitoring_infos: List[Any] = []  # of every bundle run (element counts...)


def _run_with_residuals(processor, data, fired, timers, collected, deferred=None, namer=None):
    waiting = DelayedResiduals()
    while True:
        outputs, timers_set, residuals, infos = processor.run_bundle(
            data, fired, None if deferred is None else deferred.finalizations, namer)
        collected.extend(infos)
        timers.add(timers_set)
        for transform_id, chunks in outputs.items():
            for chunk in chunks:
                yield transform_id, chunk
        if deferred is not None:
            deferred.monitoring_infos.extend(infos)
            deferred.residuals.extend(
                (processor.residual_input(residual.application), residual)
                for residual in residuals)
            return
        for residual in residuals:
            waiting.add(processor.residual_input(residual.application), residual)
        if not waiting:
            return
        data, fired = waiting.take_due(), {}


class DelayedResiduals:
    """Residuals of a batch bundle waiting for the delay their splittable DoFn asked for
    (``requested_time_delay``, counted from when the bundle returned them)."""

    def __init__(self) -> None:
        self._waiting: List[Tuple[float, str, bytes]] = []  # (due, input transform, element)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, input_transform_id: str, residual: Any) -> None:
        delay = residual.requested_time_delay
        seconds = max(0.0, delay.seconds + delay.nanos / 1e9)
        self._waiting.append((time.monotonic() + seconds, input_transform_id,
                              residual.application.element))

    def take_due(self) -> Dict[str, List[bytes]]:
        """Remove and return the residuals that are due (by input transform), after sleeping
        until the earliest is, if none is yet."""
        earliest = min(due for due, _, _ in self._waiting)
        wait = earliest - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        now = max(time.monotonic(), earliest)
        data: Dict[str, List[bytes]] = {}
        later = []
        for entry in self._waiting:
            due, input_transform_id, element = entry
            if due <= now:
                data.setdefault(input_transform_id, []).append(element)
            else:
                later.append(entry)
        self._waiting = later
        return data


def _bundles(task: StageTask, records: Iterator[Any],
             reports: List[Any]) -> Iterator[Dict[str, List[bytes]]]:
    """The partition's input, cut into bundles (reports are set aside in ``reports``).

    Without ``--bundle_size`` a bundle is the whole partition, capped at
    :data:`MAX_BUNDLE_BYTES` of encoded input so memory stays bounded; with it, at most that
    many elements (chunks are split into elements to count them).
    """
    inputs = task.stage.inputs
    bundle: Dict[str, List[bytes]] = {}
    size = 0
    limit = task.bundle_size or MAX_BUNDLE_BYTES
    coders: Dict[str, Any] = {}
    for record in records:
        if type(record) is not Elements:
            reports.append(record)
            continue
        spec = inputs[record.port]
        if task.bundle_size is None:
            pieces = [(record.data, len(record.data))]
        else:
            if spec.coder_id not in coders:
                coders[spec.coder_id] = task.components.coder_impl(spec.coder_id)
            pieces = [(element, 1) for _, element in iter_encoded(coders[spec.coder_id],
                                                                  record.data)]
        for piece, weight in pieces:
            bundle.setdefault(spec.transform_id, []).append(piece)
            size += weight
            if size >= limit:
                yield bundle
                bundle, size = {}, 0
    if bundle:
        yield bundle


@dataclasses.dataclass
class KeyTimers:
    """One key's pending timers: encoded per timer family, and the earliest fire times
    (micros) in each time domain."""

    encoded: Dict[TimerKey, List[bytes]]
    event: Optional[int]
    processing: Optional[int]


class PendingTimers:
    """Timers a stage has set and not yet fired, the latest setting per key, tag and window.

    Batch fires them once its input is done (:meth:`due`); the streaming loop carries them
    from micro-batch to micro-batch (:meth:`encoded`) and fires those due at the batch's
    watermark and clock (:meth:`take_due`).
    """

    def __init__(self, processor: StageProcessor, stage: StageSpec) -> None:
        self._processor = processor
        self._processing_time = {
            (family.transform_id, family.family_id): family.processing_time
            for family in stage.timer_families
        }
        self._timers: Dict[TimerKey, Dict[Any, Any]] = {}

    def __bool__(self) -> bool:
        return any(self._timers.values())

    def count(self) -> int:
        return sum(len(family) for family in self._timers.values())

    def add(self, encoded: Dict[TimerKey, List[bytes]]) -> None:
        for key, chunks in encoded.items():
            coder = self._processor.timer_coder_impl(key)
            family = self._timers.setdefault(key, {})
            for chunk in chunks:
                for timer in coder.decode_all(chunk):
                    identity = (timer.user_key, timer.dynamic_timer_tag, timer.windows[0])
                    if timer.clear_bit:
                        family.pop(identity, None)
                    else:
                        family[identity] = timer

    def due(self) -> Dict[TimerKey, List[bytes]]:
        """Remove and encode the timers to fire now, earliest first.

        Event-time timers are all due (the bounded input is complete); processing-time
        timers when the clock reaches them: if only later ones remain, wait for the earliest.
        """
        fired = self.take_due(math.inf, time.time())
        if not fired and self:
            earliest = min(timer.fire_timestamp.micros / 1e6
                           for family in self._timers.values() for timer in family.values())
            time.sleep(max(0.0, earliest - time.time()))
            fired = self.take_due(math.inf, time.time())
        return fired

    def take_due(self, watermark_micros: float, now: float) -> Dict[TimerKey, List[bytes]]:
        """Remove and encode the event-time timers at or before ``watermark_micros`` and the
        processing-time timers at or before ``now`` (seconds), earliest first per family."""
        fired: Dict[TimerKey, List[bytes]] = {}
        for key, family in self._timers.items():
            processing_time = self._processing_time.get(key, False)
            ready = sorted(
                (timer for timer in family.values()
                 if (timer.fire_timestamp.micros / 1e6 <= now if processing_time
                     else timer.fire_timestamp.micros <= watermark_micros)),
                key=lambda timer: timer.fire_timestamp)
            if not ready:
                continue
            coder = self._processor.timer_coder_impl(key)
            out = create_OutputStream()
            for timer in ready:
                coder.encode_to_stream(timer, out, True)
                del family[(timer.user_key, timer.dynamic_timer_tag, timer.windows[0])]
            fired[key] = [out.get()]
        return fired

    def next_processing_time(self) -> Optional[float]:
        """When the earliest processing-time timer is set for (seconds), or None."""
        times = [timer.fire_timestamp.micros / 1e6 for key, family in self._timers.items()
                 if self._processing_time.get(key, False) for timer in family.values()]
        return min(times) if times else None

    def by_key(self, encode_key: Any) -> Dict[bytes, "KeyTimers"]:
        """The pending timers per key (its encoding by ``encode_key``), with the earliest
        event-time and processing-time fire times (micros) of each key."""
        keys: Dict[bytes, KeyTimers] = {}
        for family_key, family in self._timers.items():
            coder = self._processor.timer_coder_impl(family_key)
            processing_time = self._processing_time.get(family_key, False)
            for timer in family.values():
                key = encode_key(timer.user_key)
                found = keys.get(key)
                if found is None:
                    found = keys[key] = KeyTimers({}, None, None)
                found.encoded.setdefault(family_key, []).append(coder.encode_nested(timer))
                micros = timer.fire_timestamp.micros
                if processing_time:
                    found.processing = (micros if found.processing is None
                                        else min(found.processing, micros))
                else:
                    found.event = micros if found.event is None else min(found.event, micros)
        return keys

    def encoded(self) -> Dict[TimerKey, List[bytes]]:
        """The pending timers, encoded per family (to carry them to the next batch)."""
        result = {}
        for key, family in self._timers.items():
            if family:
                coder = self._processor.timer_coder_impl(key)
                result[key] = [coder.encode_nested(timer) for timer in family.values()]
        return result
