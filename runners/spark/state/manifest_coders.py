"""The coders of a streaming job's keyed state, kept in its checkpoint manifest for readers.

A keyed step's store holds bytes only: keys encoded with the step's key coder, and blobs
(:mod:`~runners.spark.state.encoding`) holding elements, windows, user-state cells and
timers encoded with the pipeline's coders. To read them without the pipeline's code, each
checkpoint manifest carries, under ``"decoding"`` (:func:`state_decoding`), per keyed step
(by the name its state files are kept under):

* ``kind``: ``"GroupByKey"`` or ``"stateful DoFn"``;
* ``key_coder``: the coder id that decodes the store's keys (a stateful DoFn's is the SDK's
  key coder, length-prefixed when the SDK reads the key as opaque bytes);
* ``window_coder``: the windowing strategy's window coder;
* a GroupByKey's ``value_coder``: the grouped values (its buffered elements), and
  ``values``: ``"accumulators"`` when the GroupByKey is a lifted combine's (its values are
  the combine's accumulators, encoded with its accumulator coder), else ``"elements"``;
* a stateful DoFn's ``state`` (``transform id -> state id -> {"spec", "coder"}``: each
  cell's coder from its state spec) and ``timers`` (``"<transform id>/<family id>"`` -> the
  timer family's coder);

and ``coders``: every coder id those name, and the components they reference, as Beam
runner-API ``Coder`` protos (serialized, base64). :func:`load_coders` turns them back into
Beam coders, refusing (with the reason) any it cannot build safely: a pickled Python coder
is built only when its pickle names nothing but Beam's own coder classes, and those of them
that unpickle what they decode (``FastPrimitivesCoder``, ``PickleCoder``, ...) are built as
coders that decode plain data only (:mod:`~runners.spark.state.safe_decoding`).

A GroupByKey's keys and values are kept as the runner reads them: where the SDK's coder is
one the runner does not know (a pickled Python coder, such as ``FastPrimitivesCoder`` for a
pipeline without type hints), the runner holds the SDK's encoding as opaque bytes
(``bytes_coder``), and the manifest names the SDK's coder those bytes are the encoding of.

>>> from apache_beam.coders import VarIntCoder
>>> from apache_beam.runners.pipeline_context import PipelineContext
>>> context = PipelineContext()
>>> coder_id = context.coders.get_id(VarIntCoder())
>>> coders = load_coders({coder_id: encode_coder(context.coders.get_proto(VarIntCoder()))})
>>> coders.get(coder_id).encode(300)
b'\\xac\\x02'
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
import zlib
from typing import Any, Dict, Iterable, Optional, Set

from apache_beam.coders.coders import Coder
from google.protobuf import wrappers_pb2

# The runner's own coder URNs (microsecond windowed values and timers) register on import:
# a reader builds the coders the job's plan used.
import runners.spark.planning.coders  # noqa: F401
from runners.spark.beam_internals import (
    PipelineContext,
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    common_urns,
    python_urns,
    split_buffer_id,
)
from runners.spark.planning.execution_plan import SDK_STAGE, ExecutionPlan, stateful_par_do
from runners.spark.state.safe_decoding import REFUSED, SUBSTITUTES

GROUP_BY_KEY = "GroupByKey"
STATEFUL_DO_FN = "stateful DoFn"
#: What a GroupByKey's values are (``values``): a lifted combine's accumulators, or elements.
ACCUMULATORS = "accumulators"
ELEMENTS = "elements"
#: A pickled Python coder as a reader builds it (:func:`load_coders`): Beam's coder classes
#: only, those that unpickle what they decode replaced.
READER_PICKLED_CODER_URN = "beam:coder:spark_runner:state_reader_pickled:v1"
#: Modules whose coder classes a pickled Python coder may name.
_BEAM_CODER_MODULES = ("apache_beam.coders.",)


def encode_coder(proto: Any) -> str:
    """A runner-API ``Coder`` proto as base64 text (what a manifest holds)."""
    return base64.b64encode(proto.SerializeToString(deterministic=True)).decode("ascii")


def state_decoding(plan: ExecutionPlan) -> Dict[str, Any]:
    """What a reader of the plan's keyed state needs to decode it (see the module
    docstring), as plain data for a checkpoint manifest."""
    components = plan.components
    steps: Dict[str, Dict[str, Any]] = {}
    merged = _merged_accumulators(plan)
    for buffer_id, group in plan.groups.items():
        steps[group.transform_name] = _group(components, group, split_buffer_id(buffer_id)[1],
                                             merged)
    for stage in plan.stages:
        if stage.keyed and stage.kind == SDK_STAGE and stage.descriptor:
            steps[stage.name] = _stateful(components, stage)
    used: Set[str] = set()
    for step in steps.values():
        used.update(_coder_ids(step))
    coders: Dict[str, str] = {}
    pending = sorted(used)
    while pending:
        coder_id = pending.pop()
        if coder_id in coders or coder_id not in components.coders:
            continue
        proto = components.coders[coder_id]
        coders[coder_id] = encode_coder(proto)
        pending.extend(proto.component_coder_ids)
    return {"steps": steps, "coders": coders}


def _coder_ids(step: Dict[str, Any]) -> Iterable[str]:
    for name in ("key_coder", "value_coder", "window_coder"):
        if step.get(name):
            yield step[name]
    for cells in step.get("state", {}).values():
        for cell in cells.values():
            yield from cell["coders"]
    yield from step.get("timers", {}).values()


def _kv_components(components: Any, coder_id: str) -> "tuple[str, str]":
    """The key and value coder ids of a KV coder, through windowed-value and length-prefix
    wrappers (the first component of each)."""
    coder = components.coders[coder_id]
    while coder.spec.urn != common_urns.coders.KV.urn and coder.component_coder_ids:
        coder_id = coder.component_coder_ids[0]
        coder = components.coders[coder_id]
    if coder.spec.urn != common_urns.coders.KV.urn:
        return coder_id, coder_id
    return coder.component_coder_ids[0], coder.component_coder_ids[1]


def _merged_accumulators(plan: ExecutionPlan) -> Set[str]:
    """The PCollections a lifted combine merges the accumulators of (its GroupByKey's
    output)."""
    merged: Set[str] = set()
    urn = common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn
    for stage in plan.stages:
        if stage.kind != SDK_STAGE or not stage.descriptor:
            continue
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
        merged.update(pcollection for transform in descriptor.transforms.values()
                      if transform.spec.urn == urn for pcollection in transform.inputs.values())
    return merged


def _reading_coder(components: Any, runner_coder: str, sdk_coder: str) -> str:
    """The coder that decodes what the runner encoded with ``runner_coder``: the SDK's coder
    of which it holds the encoding as opaque bytes (a length-prefixed coder's component),
    else its own (a coder the runner knows, or one with length-prefixed parts inside, which
    both encode alike)."""
    sdk = components.coders[sdk_coder]
    if (runner_coder != sdk_coder and sdk.spec.urn == common_urns.coders.LENGTH_PREFIX.urn
            and components.coders[runner_coder].spec.urn == common_urns.coders.BYTES.urn):
        return sdk.component_coder_ids[0]
    return runner_coder


def _group(components: Any, group: Any, transform_id: str, merged: Set[str]) -> Dict[str, Any]:
    # The job decodes its input with spec.input_coder_id (grouping.py); the SDK encoded it
    # with its input PCollection's coder.
    key_coder, value_coder = _kv_components(components, group.input_coder_id)
    transform = components.transforms.get(transform_id)
    values = ELEMENTS
    if transform is not None:
        input_id = next(iter(transform.inputs.values()))
        sdk_key, sdk_value = _kv_components(components,
                                            components.pcollections[input_id].coder_id)
        key_coder = _reading_coder(components, key_coder, sdk_key)
        value_coder = _reading_coder(components, value_coder, sdk_value)
        if set(transform.outputs.values()) & merged:
            values = ACCUMULATORS
    strategy = components.windowing_strategies[group.windowing_strategy_id]
    return {"kind": GROUP_BY_KEY, "key_coder": key_coder, "value_coder": value_coder,
            "values": values, "window_coder": strategy.window_coder_id}


def _stateful(components: Any, stage: Any) -> Dict[str, Any]:
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    state: Dict[str, Dict[str, Any]] = {}
    timers: Dict[str, str] = {}
    window_coder = ""
    for transform_id, transform in sorted(descriptor.transforms.items()):
        stateful = stateful_par_do(transform)
        if stateful is None:
            continue
        payload, main = stateful
        strategy_id = descriptor.pcollections[main].windowing_strategy_id
        window_coder = descriptor.windowing_strategies[strategy_id].window_coder_id
        cells = {}
        for state_id, spec in sorted(payload.state_specs.items()):
            kind = spec.WhichOneof("spec")
            kind_spec = getattr(spec, kind)
            coders = [getattr(kind_spec, field) for field in
                      ("coder_id", "element_coder_id", "key_coder_id", "value_coder_id",
                       "accumulator_coder_id") if getattr(kind_spec, field, "")]
            cells[state_id] = {"spec": kind, "coders": coders}
        state[transform_id] = cells
        for family_id, spec in sorted(payload.timer_family_specs.items()):
            timers[f"{transform_id}/{family_id}"] = spec.timer_family_coder_id
    return {"kind": STATEFUL_DO_FN, "key_coder": stage.key_coder_id,
            "key_prefixed": stage.key_prefixed, "window_coder": window_coder,
            "state": state, "timers": timers}


class LoadedCoders:
    """Beam coders by id, built from a manifest's ``coders``; :meth:`get` returns None for
    one that could not be built, :meth:`why` says why."""

    def __init__(self, coders: Dict[str, Any], refused: Dict[str, str]) -> None:
        self._coders = coders
        self._refused = refused

    def get(self, coder_id: Optional[str]) -> Optional[Any]:
        return self._coders.get(coder_id) if coder_id else None

    def why(self, coder_id: Optional[str]) -> str:
        if not coder_id:
            return "the checkpoint names no coder"
        return self._refused.get(coder_id, f"coder {coder_id} is not in the checkpoint")


def load_coders(encoded: Dict[str, str]) -> LoadedCoders:
    """Build each coder of a manifest's ``coders`` (id -> base64 ``Coder`` proto). A coder
    whose proto (or any component's) is a pickled Python coder naming anything but Beam's
    own coder classes is refused, as is one Beam cannot build."""
    protos = {}
    refused: Dict[str, str] = {}
    for coder_id, text in encoded.items():
        try:
            protos[coder_id] = beam_runner_api_pb2.Coder.FromString(base64.b64decode(text))
        except (binascii.Error, ValueError) as error:
            refused[coder_id] = f"coder {coder_id} is unreadable ({error})"
    for coder_id, proto in protos.items():
        if proto.spec.urn == python_urns.PICKLED_CODER:
            reason = _pickled_coder_problem(proto.spec.payload)
            if reason:
                refused[coder_id] = f"coder {coder_id}: {reason}"
            else:  # built by _build_pickled_coder
                proto.spec.urn = READER_PICKLED_CODER_URN
    context = PipelineContext(beam_runner_api_pb2.Components(coders=protos))
    built: Dict[str, Any] = {}
    for coder_id in protos:
        blocked = _refused_component(coder_id, protos, refused, set())
        if blocked:
            refused.setdefault(coder_id, refused[blocked])
            continue
        try:
            built[coder_id] = context.coders.get_by_id(coder_id)
        except Exception as error:  # an unknown URN, a payload Beam cannot read
            refused[coder_id] = (f"coder {coder_id} ({protos[coder_id].spec.urn}) cannot be "
                                 f"built: {error}")
    return LoadedCoders(built, refused)


def _refused_component(coder_id: str, protos: Dict[str, Any], refused: Dict[str, str],
                       seen: Set[str]) -> Optional[str]:
    """The first refused coder among ``coder_id`` and its components (None: none)."""
    if coder_id in refused:
        return coder_id
    if coder_id in seen or coder_id not in protos:
        return None
    seen.add(coder_id)
    for component in protos[coder_id].component_coder_ids:
        found = _refused_component(component, protos, refused, seen)
        if found:
            return found
    return None


class _CoderClassesOnly(pickle.Unpickler):
    """Unpickles a pickled Python coder naming Beam's coder classes only, those that
    unpickle what they decode replaced by :mod:`~runners.spark.state.safe_decoding`'s."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in REFUSED:
            raise pickle.UnpicklingError(f"it names {module}.{name}: "
                                         f"{REFUSED[(module, name)]}")
        if (module, name) in SUBSTITUTES:
            return SUBSTITUTES[(module, name)]
        if module.startswith(_BEAM_CODER_MODULES):
            found = super().find_class(module, name)
            if isinstance(found, type) and issubclass(found, Coder):
                return found
        raise pickle.UnpicklingError(f"it names {module}.{name}, not one of Beam's coder "
                                     "classes, and reading it would run that code")


def _load_pickled_coder(serialized: bytes) -> Any:
    """A pickled Python coder (Beam's ``serialize_coder``: its class name, ``$``, then a
    compressed pickle as base64) as a reader builds it (:class:`_CoderClassesOnly`)."""
    pickled = zlib.decompress(base64.b64decode(serialized.split(b"$", 1)[1]))
    return _CoderClassesOnly(io.BytesIO(pickled)).load()


def _build_pickled_coder(payload: Any, components: Any, context: Any) -> Any:
    return _load_pickled_coder(payload.value)


Coder.register_urn(READER_PICKLED_CODER_URN, wrappers_pb2.BytesValue, _build_pickled_coder)


def _pickled_coder_problem(payload: bytes) -> str:
    """Why a pickled Python coder's payload is not read ('' when it is Beam's own)."""
    try:
        _load_pickled_coder(wrappers_pb2.BytesValue.FromString(payload).value)
    except pickle.UnpicklingError as error:
        return f"a pickled Python coder: {error}"
    except Exception as error:  # malformed payload
        return f"a pickled Python coder that cannot be read ({type(error).__name__}: {error})"
    return ""
