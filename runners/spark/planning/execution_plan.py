"""From a Beam pipeline to an execution plan of fused stages (driver side).

Planning turns the pipeline into its portable proto (what it cannot run is refused before,
by :mod:`~runners.spark.planning.support`), fuses transforms into stages with Beam's own FnApiRunner
phases, and describes each stage with picklable plain data: the serialized
``ProcessBundleDescriptor`` the SDK harness executes, and the buffers the stage reads and
writes. Buffers connect stages: ``materialize:<id>`` (elements as produced), ``group:<id>``
(a GroupByKey's input, grouped by the runner) and the impulse buffer.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from apache_beam.options.pipeline_options import TypeOptions

from runners.spark.beam_internals import (
    DATA_INPUT_URN,
    DATA_OUTPUT_URN,
    FUSION_PHASES,
    IMPULSE_BUFFER,
    PAR_DO_URNS,
    RUNNER_URNS,
    SPLITTABLE_PROCESS_URN,
    STREAMING_FUSION_PHASES,
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    common_urns,
    create_and_optimize_stages,
    create_buffer_id,
    environments,
    group_by_key_input_visitor,
    merge_common_environments,
    merge_superset_dep_environments,
    proto_utils,
    python_urns,
    split_buffer_id,
    validate_pipeline_graph,
)
from runners.spark.chains.planning import chain_simple_steps
from runners.spark.text_io.planning import mark_text_io
from runners.spark.text_io.sink_stages import runs_in_driver

SDK_STAGE = "sdk"
RESHUFFLE_STAGE = "reshuffle"
#: A TestStream (streaming only): ``descriptor`` holds its serialized TestStreamPayload,
#: ``outputs`` pairs each output tag with its buffer, ``output_coders`` their data coders.
TEST_STREAM_STAGE = "test_stream"


class UnsupportedPipelineError(NotImplementedError):
    """The pipeline uses something the Spark runner cannot run; the message says what and why."""


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """A stage input: the DATA_INPUT transform, the buffer it reads, its (safe) element coder."""

    transform_id: str
    buffer_id: bytes
    coder_id: str


@dataclasses.dataclass(frozen=True)
class SideInputSpec:
    """A side input of a ParDo in the stage, read from a materialized buffer."""

    transform_id: str
    tag: str
    buffer_id: bytes
    access_pattern: bytes  # serialized FunctionSpec
    coder_id: str  # safe windowed coder of the side input's elements
    #: serialized FunctionSpec: a main input window -> the side input window it reads
    window_mapping: bytes = b""


@dataclasses.dataclass(frozen=True)
class TimerFamilySpec:
    transform_id: str
    family_id: str
    processing_time: bool


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """One fused stage, as plain data a Spark task can receive."""

    index: int
    name: str
    kind: str
    inputs: Tuple[InputSpec, ...]
    outputs: Tuple[Tuple[str, bytes], ...]  # (DATA_OUTPUT transform id, buffer id)
    descriptor: bytes = b""
    timer_families: Tuple[TimerFamilySpec, ...] = ()
    side_inputs: Tuple[SideInputSpec, ...] = ()
    keyed: bool = False  # stateful: inputs are partitioned by key before the stage runs
    #: keyed stages: the coder the SDK harness encodes the key with (user state, timers),
    #: and whether it length-prefixes the key (then the runner's element coder reads the key
    #: as opaque bytes, and the SDK's encoding is those bytes, length-prefixed)
    key_coder_id: str = ""
    key_prefixed: bool = False
    output_coder_id: str = ""  # runner stages: the coder of what they write
    output_coders: Tuple[str, ...] = ()  # TestStream stages: data coder of each output
    #: the Beam steps fused into the stage, by their names in the pipeline (what Spark's UI
    #: shows for it: :mod:`~runners.spark.backends.stage_labels`)
    steps: Tuple[str, ...] = ()
    #: one of WriteImpl's one-element stages of Beam's own file sink, which a batch run may
    #: run in the driver (:mod:`~runners.spark.text_io.sink_stages`)
    driver_side: bool = False
    #: a Reshuffle of a splittable DoFn's sized restrictions (the one ``expand_sdf`` puts
    #: before its process step): dealt by their sizes, not their count
    deal_by_size: bool = False


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """A GroupByKey the runner performs between a ``group:`` write and its read."""

    transform_name: str
    input_coder_id: str
    output_coder_id: str
    windowing_strategy_id: str


@dataclasses.dataclass
class ExecutionPlan:
    stages: List[StageSpec]
    groups: Dict[bytes, GroupSpec]
    components: beam_runner_api_pb2.Components
    #: buffer id -> how many stage inputs and side inputs read it
    readers: Dict[bytes, int]


def pipeline_proto(pipeline, options) -> beam_runner_api_pb2.Pipeline:
    """The pipeline as a portable proto, prepared as Beam's portable runners do."""
    pipeline.visit(
        group_by_key_input_visitor(
            not options.view_as(TypeOptions).allow_non_deterministic_key_coders
        )
    )
    proto = pipeline.to_runner_api(
        default_environment=environments.EmbeddedPythonEnvironment.default()
    )
    validate_pipeline_graph(proto)
    proto = merge_superset_dep_environments(proto)
    for environment_id, environment in proto.components.environments.items():
        proto.components.environments[environment_id].CopyFrom(
            environments.resolve_anyof_environment(environment, python_urns.EMBEDDED_PYTHON)
        )
    return merge_common_environments(proto)


def canonical_stage_name(name: str) -> str:
    """A fused stage's name with its parts in sorted order.

    Beam names a fused stage ``(A)+(B)`` in the order its fusion met the parts, which follows
    the iteration order of sets of objects: it differs from one process to the next. A
    checkpoint finds its stages (their state, their carried residuals) by name, so the
    runner names each stage by its sorted parts.

    >>> canonical_stage_name("((c)+(ParDo(f)/Process))+(a)")
    '((ParDo(f)/Process)+(a))+(c)'
    >>> canonical_stage_name("GroupByKey/Read")
    'GroupByKey/Read'
    """
    parts = sorted(_stage_name_parts(name))
    canonical = parts[0]
    for part in parts[1:]:
        canonical = f"({canonical})+({part})"
    return canonical


def _stage_name_parts(name: str) -> List[str]:
    if not name.startswith("("):
        return [name]
    depth = 0
    for position, character in enumerate(name):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0:
            if name[position + 1:position + 3] == "+(" and name.endswith(")"):
                return (_stage_name_parts(name[1:position])
                        + _stage_name_parts(name[position + 3:-1]))
            break
    return [name]


def par_do_payload(transform) -> beam_runner_api_pb2.ParDoPayload:
    """A ParDo transform's payload."""
    return proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)


def stateful_par_do(transform) -> Optional[Tuple[beam_runner_api_pb2.ParDoPayload, str]]:
    """A ParDo with state or timers: its payload and its main input's PCollection id (None
    for any other transform)."""
    if transform.spec.urn not in PAR_DO_URNS:
        return None
    payload = par_do_payload(transform)
    if not payload.state_specs and not payload.timer_family_specs:
        return None
    main = [pcollection for tag, pcollection in transform.inputs.items()
            if tag not in payload.side_inputs]
    return payload, main[0]


def plan(proto: beam_runner_api_pb2.Pipeline, streaming: bool = False,
         native_reshuffle: bool = True, chain_steps: bool = True,
         text_io: bool = True, driver_stages: bool = True) -> ExecutionPlan:
    """Fuse the pipeline into stages and describe each for execution on Spark.

    In streaming, TestStream is executed by the runner (the micro-batch loop), not fused.
    ``native_reshuffle=False`` runs a Reshuffle as Beam expanded it (a GroupByKey between
    two Maps) instead of as a runner shuffle: before Beam 2.65 that expansion dropped pane
    info, and a pipeline pinned to such a version (``--update_compatibility_version``)
    must get what that version gives. ``chain_steps`` runs each run of element-only steps
    of a stage as one loop (:mod:`~runners.spark.chains.planning`); ``text_io`` runs Beam's
    own text reads and writes with the runner's bulk operations (:mod:`~runners.spark.text_io.planning`);
    ``driver_stages`` marks WriteImpl's one-element stages of Beam's own file sinks, which a
    batch run may run in the driver (:mod:`~runners.spark.text_io.sink_stages`).
    """
    runner_urns = RUNNER_URNS | (
        {common_urns.primitives.TEST_STREAM.urn} if streaming else set())
    if not native_reshuffle:
        runner_urns = runner_urns - {common_urns.composites.RESHUFFLE.urn}
    context, stages = create_and_optimize_stages(
        copy.deepcopy(proto),
        phases=list(STREAMING_FUSION_PHASES if streaming else FUSION_PHASES),
        known_runner_urns=frozenset(runner_urns),
        use_state_iterables=False,
        is_drain=False,
    )
    if streaming:
        # Pane timestamps (a window's end, x.999999) must survive the data plane exactly.
        from runners.spark.planning.coders import use_microsecond_timestamps

        use_microsecond_timestamps(context.components, common_urns.coders.WINDOWED_VALUE.urn,
                                   common_urns.coders.TIMER.urn)
    builder = _PlanBuilder(context, chain_steps, text_io, driver_stages,
                           _sized_restrictions(stages))
    specs = in_dependency_order(
        [builder.stage_spec(index, stage) for index, stage in enumerate(stages)])
    readers: Dict[bytes, int] = {}
    for spec in specs:
        for buffer_id in ([i.buffer_id for i in spec.inputs]
                          + [s.buffer_id for s in spec.side_inputs]):
            readers[buffer_id] = readers.get(buffer_id, 0) + 1
    return ExecutionPlan(specs, builder.groups, context.components, readers)


def in_dependency_order(specs: List[StageSpec]) -> List[StageSpec]:
    """The stages with each one after every stage that writes what it reads (its inputs and
    side inputs), otherwise in their order.

    A pass runs the stages in the plan's order, and a stage whose input has not been
    written yet has nothing to do: it would run nothing, silently. Beam's ``sort_stages``
    orders by the stages' reads and ``must_follow``, and a stage that reads a PCollection
    as a main input counts as one of its producers, so a cycle can put a stage before its
    input's writer; this order is by the buffers alone.

    >>> first = StageSpec(0, "a", SDK_STAGE, (), (("w", b"x"),))
    >>> second = StageSpec(1, "b", SDK_STAGE, (InputSpec("r", b"x", "c"),), ())
    >>> [spec.name for spec in in_dependency_order([second, first])]
    ['a', 'b']
    """
    writers: Dict[bytes, List[int]] = {}
    for position, spec in enumerate(specs):
        for _, buffer_id in spec.outputs:
            writers.setdefault(buffer_id, []).append(position)
    readers: List[List[int]] = [[] for _ in specs]
    waiting = [0] * len(specs)  # writers of what each stage reads, not yet placed
    for position, spec in enumerate(specs):
        reads = {i.buffer_id for i in spec.inputs} | {i.buffer_id for i in spec.side_inputs}
        for writer in {writer for buffer_id in reads for writer in writers.get(buffer_id, ())
                       if writer != position}:
            readers[writer].append(position)
            waiting[position] += 1
    ready = [position for position, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    ordered: List[StageSpec] = []
    while ready:  # the first ready stage in the given order: an order that holds is kept
        position = heapq.heappop(ready)
        ordered.append(specs[position])
        for reader in readers[position]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(ordered) < len(specs):
        raise UnsupportedPipelineError(
            f"the stages {[spec.name for spec, count in zip(specs, waiting) if count]} "
            "read each other's outputs in a cycle")
    return ordered


def _sized_restrictions(stages: Sequence[Any]) -> FrozenSet[str]:
    """The PCollections of sized restrictions: what a splittable DoFn's process step
    (``PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS``) reads as its main input, each element
    ``((element, (restriction, watermark estimator state)), size)``."""
    sized: Set[str] = set()
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn == SPLITTABLE_PROCESS_URN:
                side_inputs = par_do_payload(transform).side_inputs
                sized.update(pcollection for tag, pcollection in transform.inputs.items()
                             if tag not in side_inputs)
    return frozenset(sized)


class _PlanBuilder:
    def __init__(self, context, chain_steps: bool = True, text_io: bool = True,
                 driver_stages: bool = True,
                 sized_restrictions: FrozenSet[str] = frozenset()) -> None:
        self.context = context
        self.sized_restrictions = sized_restrictions
        self.chain_steps = chain_steps
        self.text_io = text_io
        self.driver_stages = driver_stages
        self.components = context.components
        self.groups: Dict[bytes, GroupSpec] = {}
        self._written: Dict[str, bytes] = {}  # DATA_OUTPUT transform -> buffer id

    def data_coder(self, pcollection_id: str) -> str:
        """The coder the SDK harness uses on the data plane for this PCollection."""
        return self.context.data_channel_coders[pcollection_id]

    def safe_coder(self, pcollection_id: str) -> str:
        coder_id = self.data_coder(pcollection_id)
        return self.context.safe_coders.get(coder_id, coder_id)

    def grouping_coder(self, pcollection_id: str) -> str:
        """The coder the runner groups with: the safe one (opaque values, no unpickling),
        unless it made windows opaque too; then the SDK's own coder (we are Python)."""
        safe_id = self.safe_coder(pcollection_id)
        window_coder_id = self.components.coders[safe_id].component_coder_ids[1]
        window_coder = self.components.coders[window_coder_id]
        if window_coder.spec.urn == python_urns.TIMESTAMP_PREFIXED_OPAQUE_WINDOW_CODER:
            return self.data_coder(pcollection_id)
        return safe_id

    def stage_spec(self, index: int, stage) -> StageSpec:
        inputs, outputs = [], []
        transforms = []
        for transform in stage.transforms:
            transform = copy.deepcopy(transform)
            if transform.spec.urn == DATA_INPUT_URN:
                buffer_id = transform.spec.payload
                pcollection_id = next(iter(transform.outputs.values()))
                inputs.append(InputSpec(
                    transform.unique_name, buffer_id, self.safe_coder(pcollection_id)))
                if buffer_id != IMPULSE_BUFFER:
                    self._note_group(buffer_id)
                transform.spec.payload = self._port(pcollection_id)
            elif transform.spec.urn == DATA_OUTPUT_URN:
                buffer_id = transform.spec.payload
                pcollection_id = next(iter(transform.inputs.values()))
                outputs.append((transform.unique_name, buffer_id))
                self._written[transform.unique_name] = buffer_id
                self._note_group(buffer_id)
                transform.spec.payload = self._port(pcollection_id)
            transforms.append(transform)
        name = canonical_stage_name(stage.name)
        steps = tuple(t.unique_name for t in transforms
                      if t.spec.urn not in (DATA_INPUT_URN, DATA_OUTPUT_URN))
        test_streams = [t for t in transforms
                        if t.spec.urn == common_urns.primitives.TEST_STREAM.urn]
        if test_streams:
            return dataclasses.replace(
                self._test_stream_spec(index, name, test_streams[0], transforms), steps=steps)
        # Flattens run in the SDK harness (fused); a Reshuffle is the only runner stage.
        if any(t.spec.urn == common_urns.composites.RESHUFFLE.urn for t in transforms):
            return dataclasses.replace(
                self._reshuffle_spec(index, name, transforms, inputs, outputs), steps=steps)
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor(
            id=f"stage-{index}",
            transforms={t.unique_name: t for t in transforms},
            pcollections=dict(self.components.pcollections.items()),
            coders=dict(self.components.coders.items()),
            windowing_strategies=dict(self.components.windowing_strategies.items()),
            environments=dict(self.components.environments.items()),
            # Any URL: the in-memory data channel serves timers; without one, no timers flow.
            timer_api_service_descriptor={"url": "in-memory"},
        )
        if self.text_io:
            mark_text_io(descriptor)
        if self.chain_steps:
            chain_simple_steps(descriptor)
        keyed = stage.is_stateful()
        key_coder_id = self._user_key_coder(transforms) if keyed else ""
        driver_side = self.driver_stages and not keyed and runs_in_driver(transforms)
        return StageSpec(
            index,
            name,
            SDK_STAGE,
            tuple(inputs),
            tuple(outputs),
            descriptor=descriptor.SerializeToString(),
            timer_families=self._timer_families(transforms),
            side_inputs=self._side_inputs(transforms),
            keyed=keyed,
            key_coder_id=key_coder_id,
            key_prefixed=bool(key_coder_id) and (
                self.components.coders[key_coder_id].spec.urn
                == common_urns.coders.LENGTH_PREFIX.urn),
            steps=steps,
            driver_side=driver_side,
        )

    def _user_key_coder(self, transforms) -> str:
        """The coder of the key of a stateful ParDo's main input, as the SDK harness has it."""
        for transform in transforms:
            stateful = stateful_par_do(transform)
            if stateful is None:
                continue
            coder = self.components.coders[self.components.pcollections[stateful[1]].coder_id]
            return coder.component_coder_ids[0]
        return ""

    def _test_stream_spec(self, index: int, name: str, test_stream, transforms) -> StageSpec:
        """A TestStream stage: each output tag, the buffer it writes and its data coder."""
        buffers = {}
        for transform in transforms:
            if transform.spec.urn == DATA_OUTPUT_URN:
                # Payloads were rewritten to ports already: read the buffer off the name map.
                buffers[next(iter(transform.inputs.values()))] = self._written[transform.unique_name]
        outputs, coders = [], []
        for tag, pcollection_id in sorted(test_stream.outputs.items()):
            if pcollection_id in buffers:
                outputs.append((tag, buffers[pcollection_id]))
                coders.append(self.data_coder(pcollection_id))
        return StageSpec(index, name, TEST_STREAM_STAGE, (), tuple(outputs),
                         descriptor=test_stream.spec.payload, output_coders=tuple(coders))

    def _reshuffle_spec(self, index: int, name: str, transforms, inputs: List[InputSpec],
                        outputs: List[Tuple[str, bytes]]) -> StageSpec:
        """A Reshuffle moves encoded elements as they are, unless Beam inferred another coder
        for its output than its input has (a KV coder for pairs that came in pickled): then
        they are decoded and re-encoded with the SDK's own coders, as the safe coders hold
        such values as opaque bytes.

        Its one input is the elements it redistributes (``reshuffle_only_the_restrictions``
        keeps a splittable DoFn's side inputs out of the Reshuffle ``expand_sdf`` adds):
        elements of another input, decoded with their coder, would change type."""
        if len(inputs) != 1:
            raise UnsupportedPipelineError(
                f"the Reshuffle stage {name!r} reads {len(inputs)} inputs "
                f"({[spec.transform_id for spec in inputs]}); a Reshuffle redistributes one")
        input_id = next(next(iter(t.outputs.values())) for t in transforms
                        if t.spec.urn == DATA_INPUT_URN)
        output_id = next((next(iter(t.inputs.values())) for t in transforms
                          if t.spec.urn == DATA_OUTPUT_URN), None)
        if output_id is None:  # nothing reads what it shuffles
            return StageSpec(index, name, RESHUFFLE_STAGE, tuple(inputs), (),
                             output_coder_id=inputs[0].coder_id)
        output_coder = self.safe_coder(output_id)
        if output_coder != inputs[0].coder_id:
            inputs = [dataclasses.replace(inputs[0], coder_id=self.data_coder(input_id))]
            output_coder = self.data_coder(output_id)
        return StageSpec(index, name, RESHUFFLE_STAGE, tuple(inputs), tuple(outputs),
                         output_coder_id=output_coder,
                         deal_by_size=output_id in self.sized_restrictions)

    def _port(self, pcollection_id: str) -> bytes:
        port = beam_fn_api_pb2.RemoteGrpcPort(coder_id=self.data_coder(pcollection_id))
        return port.SerializeToString()

    def _note_group(self, buffer_id: bytes) -> None:
        kind, name = split_buffer_id(buffer_id)
        if kind != "group" or buffer_id in self.groups:
            return
        transform = self.components.transforms[name]
        input_id = next(iter(transform.inputs.values()))
        output_id = next(iter(transform.outputs.values()))
        self.groups[buffer_id] = GroupSpec(
            transform_name=transform.unique_name,
            input_coder_id=self.grouping_coder(input_id),
            output_coder_id=self.grouping_coder(output_id),
            windowing_strategy_id=self.components.pcollections[input_id].windowing_strategy_id,
        )

    def _timer_families(self, transforms) -> Tuple[TimerFamilySpec, ...]:
        families = []
        for transform in transforms:
            if transform.spec.urn in PAR_DO_URNS:
                payload = par_do_payload(transform)
                for family_id, family in sorted(payload.timer_family_specs.items()):
                    families.append(TimerFamilySpec(
                        transform.unique_name,
                        family_id,
                        family.time_domain == beam_runner_api_pb2.TimeDomain.PROCESSING_TIME,
                    ))
        return tuple(families)

    def _side_inputs(self, transforms) -> Tuple[SideInputSpec, ...]:
        side_inputs = []
        for transform in transforms:
            if transform.spec.urn in PAR_DO_URNS:
                payload = par_do_payload(transform)
                for tag, side_input in sorted(payload.side_inputs.items()):
                    pcollection_id = transform.inputs[tag]
                    side_inputs.append(SideInputSpec(
                        transform.unique_name,
                        tag,
                        create_buffer_id(pcollection_id),
                        side_input.access_pattern.SerializeToString(),
                        self.safe_coder(pcollection_id),
                        side_input.window_mapping_fn.SerializeToString(),
                    ))
        return tuple(side_inputs)
