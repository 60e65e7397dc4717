"""Which steps of a fused stage run as one loop: planning (driver side).

Inside a fused stage Beam's SDK harness gives every step an ``Operation``: for each element
each step wraps its output in a new ``WindowedValue`` and hands it through the DoFn
runner, the invoker, the output handler and the consumer set of the next step (measured:
~0.37 us of CPU per element per step on top of the user's function; a DoFn asking for its
timestamp goes through Beam's per-window invoker, which compares each of its parameters
with every kind Beam knows, per element). A step needs none of that when it is a function
of its element, its element's timestamp, window and pane: a ``Map``, ``FlatMap``,
``Filter``, ``MapTuple``, ``FlatMapTuple`` (and so ``WithKeys``, ``Keys``, ``Values``,
``KvSwap``), or a DoFn whose ``process`` asks for no more, with its own ``setup``,
``start_bundle``, ``finish_bundle``, ``teardown`` and metrics. A ``WindowInto`` of a
standard non-merging WindowFn is a function of the timestamp.

This module finds the runs of such steps, each feeding only the next, and replaces each
run in the stage's ``ProcessBundleDescriptor`` by one transform of
:data:`CHAINED_STEPS_URN`, whose payload holds the steps as they were;
:mod:`runners.spark.chains.operation` executes it as one loop. A step is chained only when
Beam's own signature of its DoFn says it needs nothing else (:func:`why_not_chained` says
why not): side inputs, state, timers, splitting, several outputs, bundle finalization, a
``process`` parameter other than the timestamp, window and pane (key, windowed value,
contexts, ...), parameters of its bundle or lifecycle methods, runtime type checks, any
doubt: it keeps Beam's operation.

>>> import apache_beam as beam
>>> from apache_beam.transforms.window import FixedWindows
>>> from runners.spark.planning.execution_plan import pipeline_proto
>>> pipeline = beam.Pipeline()
>>> _ = (pipeline | beam.Create([1, 2]) | "Double" >> beam.Map(lambda x: 2 * x)
...      | "Even" >> beam.Filter(lambda x: x % 4 == 0)
...      | "Stamp" >> beam.Map(lambda x, t=beam.DoFn.TimestampParam: (x, t))
...      | "Window" >> beam.WindowInto(FixedWindows(60)) | "Keyed" >> beam.WithKeys(1)
...      | "Key" >> beam.Map(lambda kv, k=beam.DoFn.KeyParam: k))
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> proto = pipeline_proto(pipeline, PipelineOptions([]))
>>> steps = {step.unique_name: step for step in proto.components.transforms.values()}
>>> [why_not_chained(steps[name]) for name in ("Double", "Stamp", "Window", "Key")]
[None, None, None, 'process asks for KeyParam']
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any, Dict, List, Optional

from runners.spark.beam_internals import (
    ArgumentPlaceholder,
    beam_runner_api_pb2,
    common_urns,
    dofn_data,
    process_asks_for_window,
    proto_utils,
    python_urns,
    why_not_chained_dofn,
)
from runners.spark.chains.window_assignment import assigns_natively

#: The runner-private URN of a chain of steps in worker descriptors; its payload is a
#: ``Components`` holding the chained transforms as they were.
CHAINED_STEPS_URN = "beam:transform:spark_runner:chained_steps:v1"

#: A chain's nested blocks at most (Python allows 20 in a function; each step that can
#: output several values is a loop of the chain's function, and a step invoked once per
#: window of its element another: :func:`nested_blocks`).
MAX_CHAIN_BLOCKS = 16

#: The annotation of a transform the runner runs with an operation of its own (the value
#: names which): it is never chained.
RUNNER_OPERATION = "spark_runner:operation"
PRECOMBINE_URN = common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn

_LOGGER = logging.getLogger(__name__)
PAR_DO_URN = common_urns.primitives.PAR_DO.urn


def why_not_chained(transform: Any) -> Optional[str]:
    """Why a step keeps Beam's own operation; None when it can be chained.

    ``transform`` is a ``PTransform`` proto of a fused stage (a ``ParDo`` whose DoFn is
    unpickled here to ask Beam what it needs, or a ``WindowInto``).
    """
    if RUNNER_OPERATION in transform.annotations:
        return "the runner runs it with an operation of its own"
    if assigns_natively(transform):
        return None
    if transform.spec.urn != PAR_DO_URN:
        return f"it is not a ParDo ({transform.spec.urn})"
    payload = proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)
    if payload.side_inputs:
        return "it reads side inputs"
    if payload.state_specs or payload.timer_family_specs:
        return "it has state or timers"
    if payload.restriction_coder_id:
        return "it is splittable"
    if payload.requests_finalization:
        return "it finalizes bundles"
    if payload.requires_stable_input or payload.requires_time_sorted_input:
        return "it requires stable or time-sorted input"
    if len(transform.inputs) != 1 or len(transform.outputs) != 1:
        return "it has several inputs or outputs"
    if payload.do_fn.urn != python_urns.PICKLED_DOFN_INFO:
        return f"its DoFn is not a Python DoFn ({payload.do_fn.urn})"
    dofn, args, kwargs, side_inputs, _ = dofn_data(payload)
    if side_inputs or any(isinstance(argument, ArgumentPlaceholder)
                          for argument in list(args) + list(kwargs.values())):
        return "it reads side inputs"
    return why_not_chained_dofn(dofn)


def nested_blocks(transform: Any) -> int:
    """How many nested loops a chained step may open in the chain's function: one for the
    values it outputs, and one more for the windows of an element when Beam invokes its
    DoFn once per window (its ``process`` asks for the window)."""
    if transform.spec.urn != PAR_DO_URN:
        return 1
    payload = proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)
    return 2 if process_asks_for_window(dofn_data(payload)[0]) else 1


def chain_simple_steps(descriptor: Any) -> List[List[str]]:
    """Replace, in a ``ProcessBundleDescriptor``, every run of chainable steps (each one's
    only output read by the next step only) by one :data:`CHAINED_STEPS_URN` transform.

    A chain may end with the precombine of a lifted ``CombinePerKey``, and opens at most
    :data:`MAX_CHAIN_BLOCKS` nested blocks (a longer run goes on in the next chain). The chain keeps
    its first step's id and name, its first step's input and its last step's outputs; the
    intermediate PCollections stay in the descriptor (their coders size the elements the
    chain counts into them). Returns the chains, as lists of step ids in order; a lone
    ``WindowInto`` is left as it is (nothing to chain it with).
    """
    transforms = descriptor.transforms
    readers: Dict[str, List[str]] = defaultdict(list)
    for transform_id, transform in transforms.items():
        for pcollection_id in transform.inputs.values():
            readers[pcollection_id].append(transform_id)
    chainable = set()
    blocks: Dict[str, int] = {}
    for transform_id, transform in transforms.items():
        reason = why_not_chained(transform)
        if reason is None:
            chainable.add(transform_id)
            blocks[transform_id] = nested_blocks(transform)
        elif transform.spec.urn == PAR_DO_URN:
            _LOGGER.debug("step %r keeps Beam's operation: %s", transform.unique_name, reason)
    following: Dict[str, str] = {}
    for transform_id in chainable:
        output = _only(transforms[transform_id].outputs)
        next_ids = readers.get(output, [])
        if len(next_ids) == 1 and next_ids[0] in chainable:
            following[transform_id] = next_ids[0]
    chains = []
    starts = sorted(chainable - set(following.values()))
    while starts:
        first = starts.pop(0)
        chain, used = [first], blocks[first]
        while (chain[-1] in following
               and used + blocks[following[chain[-1]]] <= MAX_CHAIN_BLOCKS):
            chain.append(following[chain[-1]])
            used += blocks[chain[-1]]
        if chain[-1] in following:  # cut: the rest of the run is a chain of its own
            starts.append(following[chain[-1]])
        next_ids = readers.get(_only(transforms[chain[-1]].outputs), [])
        if len(next_ids) == 1 and _absorbs_precombine(descriptor, transforms[next_ids[0]]):
            chain.append(next_ids[0])
        if len(chain) == 1 and assigns_natively(transforms[first]):
            continue
        chains.append(chain)
        _replace(descriptor, chain)
    return chains


def _absorbs_precombine(descriptor: Any, transform: Any) -> bool:
    """A lifted combine's precombine whose outputs are at the end of their window (or in
    the global window): it can end a chain (:mod:`runners.spark.chains.precombine`)."""
    if transform.spec.urn != PRECOMBINE_URN:
        return False
    pcollection = descriptor.pcollections[_only(transform.inputs)]
    strategy = descriptor.windowing_strategies[pcollection.windowing_strategy_id]
    return strategy.output_time == beam_runner_api_pb2.OutputTime.Enum.END_OF_WINDOW


def _only(mapping: Any) -> str:
    (value,) = mapping.values()
    return value


def _replace(descriptor: Any, chain: List[str]) -> None:
    transforms = descriptor.transforms
    steps = beam_runner_api_pb2.Components()
    for transform_id in chain:
        steps.transforms[transform_id].CopyFrom(transforms[transform_id])
    first, last = transforms[chain[0]], transforms[chain[-1]]
    chained = beam_runner_api_pb2.PTransform(
        unique_name=first.unique_name,
        spec=beam_runner_api_pb2.FunctionSpec(
            urn=CHAINED_STEPS_URN, payload=steps.SerializeToString()),
        inputs=dict(first.inputs),
        outputs=dict(last.outputs),
        environment_id=first.environment_id,
    )
    for transform_id in chain:
        del transforms[transform_id]
    transforms[chain[0]].CopyFrom(chained)


def unchained_transforms(descriptor: Any) -> Dict[str, Any]:
    """A descriptor's transforms by id, every chain replaced by the steps it holds: the
    stage as Beam's fusion made it, whether its steps run chained or not (what a
    checkpoint's pipeline fingerprint is computed from)."""
    transforms: Dict[str, Any] = {}
    for transform_id, transform in descriptor.transforms.items():
        if transform.spec.urn == CHAINED_STEPS_URN:
            steps = beam_runner_api_pb2.Components.FromString(transform.spec.payload)
            transforms.update(steps.transforms.items())
        else:
            transforms[transform_id] = transform
    return transforms


def chain_order(steps: Any, chained: Any) -> List[Any]:
    """The chained steps (``PTransform`` protos from the payload) in order, first to last:
    each reads the one before's output."""
    by_input = {_only(step.inputs): step for step in steps.transforms.values()}
    ordered = [by_input[_only(chained.inputs)]]
    while len(ordered) < len(steps.transforms):
        ordered.append(by_input[_only(ordered[-1].outputs)])
    return ordered
