"""Every private Apache Beam API the Spark runner uses, imported in one place.

The runner reuses Beam's own machinery instead of re-implementing it: the fusion phases of
the FnApiRunner (``fn_api_runner.translations``), the in-process SDK harness
(``worker.bundle_processor`` over an in-memory data channel), the runner-side grouping
helpers (``fn_api_runner.execution``) and the trigger driver. None of these are public API,
so the runner supports exactly one Beam minor version: importing this module with another
version fails at once, naming what to do, instead of misbehaving later.

The runner's other modules import Beam internals from here only.
"""

from __future__ import annotations

import argparse
import logging
import uuid
from typing import Any, Dict, List, Set

import apache_beam
from apache_beam.options.pipeline_options import PipelineOptions, S3Options

#: The Beam minor version whose internals this runner was written and tested against.
SUPPORTED_BEAM_VERSION = "2.77"


def _check_beam_version(version: str) -> None:
    if not (version == SUPPORTED_BEAM_VERSION or version.startswith(SUPPORTED_BEAM_VERSION + ".")):
        raise ImportError(
            f"runners.spark uses Beam internals of apache-beam {SUPPORTED_BEAM_VERSION}.x, "
            f"but apache-beam {version} is installed. "
            f"Install apache-beam=={SUPPORTED_BEAM_VERSION}.* "
            "(pinned in setup.py), or port runners/spark/beam_internals.py and rerun "
            "tests/test_spark_runner_*.py."
        )


_check_beam_version(apache_beam.__version__)

# Re-exported for the runner's other modules (they import Beam internals from here only).
# pylint: disable=wrong-import-position,unused-import
from apache_beam.coders.coder_impl import (  # noqa: E402
    BooleanCoderImpl,
    IterableCoderImpl,
    PaneInfoCoderImpl,
    StreamCoderImpl,
    TupleSequenceCoderImpl,
    create_InputStream,
    create_OutputStream,
)
from apache_beam.internal import pickler  # noqa: E402
from apache_beam.metrics import monitoring_infos  # noqa: E402
from apache_beam.metrics.cells import DistributionData, GaugeData  # noqa: E402
from apache_beam.metrics.execution import MetricResult  # noqa: E402
from apache_beam.portability import common_urns, python_urns  # noqa: E402
from apache_beam.portability.api import (  # noqa: E402
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    metrics_pb2,
)
from apache_beam.runners.common import ENCODED_IMPULSE_VALUE  # noqa: E402
from apache_beam.runners.pipeline_context import PipelineContext  # noqa: E402
from apache_beam.runners.pipeline_utils import (  # noqa: E402
    group_by_key_input_visitor,
    merge_common_environments,
    merge_superset_dep_environments,
    validate_pipeline_graph,
)
from apache_beam.runners.portability import portable_metrics  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import translations  # noqa: E402
from apache_beam.runners.portability.fn_api_runner.execution import (  # noqa: E402
    WindowGroupingBuffer,
)
from apache_beam.runners.portability.fn_api_runner.translations import (  # noqa: E402
    IMPULSE_BUFFER,
    PAR_DO_URNS,
    create_and_optimize_stages,
    create_buffer_id,
    split_buffer_id,
)
from apache_beam.runners.portability.fn_api_runner.worker_handlers import (  # noqa: E402
    FNAPI_RUNNER_CAPABILITIES,
    StateServicer,
)
from apache_beam.runners.worker.bundle_processor import (  # noqa: E402
    DATA_INPUT_URN,
    DATA_OUTPUT_URN,
    BundleProcessor,
)
from apache_beam.runners.worker.data_plane import (  # noqa: E402
    InMemoryDataChannel,
    InMemoryDataChannelFactory,
)
from apache_beam.runners.worker.sdk_worker import (  # noqa: E402
    GlobalCachingStateHandler,
    StateHandler,
)
from apache_beam.runners.worker.statecache import StateCache  # noqa: E402
from apache_beam.transforms import environments  # noqa: E402
from apache_beam.transforms.timeutil import TimeDomain  # noqa: E402
from apache_beam.transforms import trigger as _trigger  # noqa: E402
from apache_beam.transforms.trigger import (  # noqa: E402
    InMemoryUnmergedState,
    create_trigger_driver,
)
from apache_beam.utils import proto_utils  # noqa: E402

from runners.spark.executor_identity import executor_name  # noqa: E402
from runners.spark.fast_paths import install_fast_paths  # noqa: E402


def create_unmerged_trigger_driver(windowing: Any, clock: Any) -> Any:
    """Beam's streaming trigger driver for a non-merging WindowFn, keeping state per window.

    ``GeneralTriggerDriver`` always treats windows as mergeable (``is_merging = True``): each
    call wraps the key's state in a ``MergeableStateAdapter`` that maps windows to ids, runs
    a merge with a ``MergeContext`` class defined on each call, and goes through the
    adapter for every state read and write. A non-merging window never merges, and the
    driver's own ``is_merging = False`` path keeps the state under the window itself
    (measured: ~40% of the driver's time per new key). Panes are the same; the state's
    layout differs, so a key whose state was kept under window ids stays with the merging
    driver (:func:`create_trigger_driver`).
    """
    if windowing.windowfn.is_merging():
        raise ValueError(f"{windowing.windowfn!r} merges windows: use create_trigger_driver")
    driver = create_trigger_driver(windowing, False, clock=clock)
    if not isinstance(driver, _trigger.GeneralTriggerDriver):
        raise TypeError(f"expected Beam's GeneralTriggerDriver, got {type(driver).__name__}")
    driver.is_merging = False
    output = driver._output

    def _output(window, finished, state, output_watermark, maybe_ontime):
        pane = output(window, finished, state, output_watermark, maybe_ontime)
        # Unmerged state hands out its live list of elements, which later elements of an
        # accumulating window extend; the adapter's panes got a new list, so this one does.
        return pane.with_value(list(pane.value))

    driver._output = _output
    return driver


def unpickle_dofn(payload: "beam_runner_api_pb2.ParDoPayload") -> Any:
    """The user's DoFn object of a ParDo payload (as ``ParDo.from_runner_api_parameter``
    unpickles it; defined with :func:`dofn_data`, below)."""
    return dofn_data(payload)[0]


def user_state_cells(servicer: StateServicer) -> "dict[bytes, list[bytes]]":
    """The user-state cells a ``StateServicer`` holds: serialized state key -> values.

    Beam's servicer keeps them in a private dict; streaming carries them between batches
    (ordered-list state, kept apart by the servicer, is not carried)."""
    return {key: list(values) for key, values in servicer._state.items() if values}


def load_user_state_cells(servicer: StateServicer, cells: "dict[bytes, list[bytes]]") -> None:
    """Put cells from :func:`user_state_cells` back into a servicer."""
    for key, values in cells.items():
        servicer._state[key] = list(values)


def take_finalization_callbacks(processor: Any) -> "list[Any]":
    """The callbacks a bundle's DoFns registered with their ``BundleFinalizerParam``, taken
    instead of called: the runner calls them once the bundle's output is durable. The SDK's
    operations keep their finalizer params private, so the processor finalizes with
    ``finalize_bundle`` patched to collect (a param's callbacks are a private list)."""
    callbacks: "list[Any]" = []
    finalizer_param = apache_beam.DoFn.BundleFinalizerParam
    original = finalizer_param.finalize_bundle
    finalizer_param.finalize_bundle = lambda param: callbacks.extend(param._callbacks)
    try:
        processor.finalize_bundle()
    finally:
        finalizer_param.finalize_bundle = original
    return callbacks


def _memoize_combining_tags() -> None:
    """Beam 2.77's ``_CombiningValueStateTag.without_extraction`` defines a new CombineFn
    *class* on every call, and the trigger driver calls it, on a tag it just made with
    ``with_prefix``, for every state read and write of a pane index or count: measured,
    ~1/4 of the streaming GroupByKey's time per key. Both return tags that depend only on
    the tag they are called on (and the prefix), so each is made once per tag.
    """
    tag_class = _trigger._CombiningValueStateTag
    if getattr(tag_class, "memoized_by_spark_runner", False):
        return
    original_without_extraction = tag_class.without_extraction
    original_with_prefix = tag_class.with_prefix

    def without_extraction(self):
        made = self.__dict__.get("_spark_runner_without_extraction")
        if made is None:
            made = self.__dict__["_spark_runner_without_extraction"] = (
                original_without_extraction(self))
        return made

    def with_prefix(self, prefix):
        made = self.__dict__.setdefault("_spark_runner_with_prefix", {})
        if prefix not in made:
            made[prefix] = original_with_prefix(self, prefix)
        return made[prefix]

    tag_class.without_extraction = without_extraction
    tag_class.with_prefix = with_prefix
    tag_class.memoized_by_spark_runner = True


_memoize_combining_tags()


install_fast_paths()


def _key_batches_per_executor() -> None:
    """``BatchElements`` with a maximum buffering duration keys every element with a UUID
    made once per process (``util.SharedKey``): one batch per SDK worker. A Spark executor
    runs its Python tasks in several processes, where Beam's portable runners run one SDK
    worker with several threads, so a key per process split one worker's batches into one
    per Python worker the tasks happened to land on: more, smaller batches than the
    DirectRunner's (Beam's global-window buffering-timer test gave [1, 4, 3, 1, 1] or
    [3, 2, 4, 1] on a Connect server whose workers were PySpark's own, against the
    DirectRunner's [9, 1]). The key is made from the executor's identity instead
    (:mod:`~runners.spark.executor_identity`, the same in every Python process of an
    executor): one per executor, whether or not its workers fork from the runner's daemon
    (a Connect server or cluster started without it, ``spark.python.use.daemon=false``)."""
    from apache_beam.transforms import util

    if getattr(util.SharedKey, "made_once_by_spark_runner", False):
        return

    def __init__(self) -> None:
        self.key = uuid.uuid5(_EXECUTOR_KEYS, executor_name()).hex

    util.SharedKey.__init__ = __init__
    util.SharedKey.made_once_by_spark_runner = True


#: The namespace of the executors' ``BatchElements`` keys (a UUID of the runner's own).
_EXECUTOR_KEYS = uuid.UUID("6b4f3c2e-7a51-4d0e-9a8e-2f1c5b9d0a17")

_key_batches_per_executor()


def share_s3_clients() -> None:
    """Beam's S3 filesystem makes a new ``S3IO``, and with it a new boto3 client, for every
    operation (open, exists, match, delete): ~100 ms each, nearly all of it botocore loading
    its service JSON (measured on an S3 server on loopback: 110 ms a 1 KB write, a read or
    an exists). A streaming run writes state files at every batch. boto3 clients are
    thread-safe: make one per set of S3 options and process, and give it to every Beam
    client of those options (each keeps its own download position). Needs
    ``apache-beam[aws]``; a no-op without boto3."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return
    client_class = boto3_client.Client
    if boto3_client.boto3 is None or getattr(client_class, "shared_by_spark_runner", False):
        return
    original = client_class.__init__
    parser = argparse.ArgumentParser(add_help=False)
    S3Options._add_argparse_args(parser)  # Beam's own way to list a class's options
    names = sorted(action.dest for action in parser._actions)
    shared: "dict[Any, Any]" = {}

    def __init__(self, options: Any) -> None:
        if isinstance(options, PipelineOptions):
            view = options.view_as(S3Options)
            key = tuple((name, repr(getattr(view, name, None))) for name in names)
        else:
            key = tuple((name, repr(options.get(name))) for name in names)
        if key not in shared:
            original(self, options)
            shared[key] = self.client
            return
        self.client = shared[key]
        self._download_request = None
        self._download_stream = None
        self._download_pos = 0

    client_class.__init__ = __init__
    client_class.shared_by_spark_runner = True


#: How often a bundle's execution-time sampler wakes (ms), at most.
STATE_SAMPLING_PERIOD_MS = 10


def _sample_execution_state_more_often() -> None:
    """Each bundle's ``StateSampler`` (Beam's msec counters) runs a thread that sleeps for
    growing periods of up to 200 ms, and ending the bundle joins it: it waits out the
    current sleep. Measured on a streaming runner: ~28 ms a bundle on average, up to 200 ms
    for second-long bundles (every micro-batch has several). Its sleeps cost nothing (no
    GIL): cap them at :data:`STATE_SAMPLING_PERIOD_MS`."""
    from apache_beam.runners.worker import statesampler

    statesampler.StateSampler.__init__.__defaults__ = (STATE_SAMPLING_PERIOD_MS,)


_sample_execution_state_more_often()


def unlift_combines_output_at_earliest(stages: Any, context: Any) -> Any:
    """A streaming phase before ``lift_combiners``: a CombinePerKey whose input is windowed
    with ``OUTPUT_AT_EARLIEST`` runs as its GroupByKey and combining step, unlifted.

    An element behind a GroupByKey's output watermark sets no watermark hold at its own
    timestamp (Beam's ``GeneralTriggerDriver``, Java's ``WatermarkHold``). A lifted combine
    merges the timestamps of a bundle's elements before the shuffle, taking the earliest,
    late ones included: the GroupByKey then sees one accumulator behind the watermark and
    the pane falls back to the window's end. (``OUTPUT_AT_LATEST`` keeps the latest, which
    is behind the watermark only when all of its elements were: lifting stays correct.)
    """
    components = context.components
    for stage in stages:
        transform = stage.transforms[0] if len(stage.transforms) == 1 else None
        if (transform is not None
                and transform.spec.urn == common_urns.composites.COMBINE_PER_KEY.urn
                and transform.subtransforms):
            input_id = next(iter(transform.inputs.values()))
            strategy = components.windowing_strategies[
                components.pcollections[input_id].windowing_strategy_id]
            if strategy.output_time == beam_runner_api_pb2.OutputTime.EARLIEST_IN_PANE:
                for sub in transform.subtransforms:
                    yield translations.Stage(
                        components.transforms[sub].unique_name,
                        [components.transforms[sub]],
                        downstream_side_inputs=stage.downstream_side_inputs,
                        must_follow=stage.must_follow, parent=stage.name,
                        environment=stage.environment)
                continue
        yield stage


def annotate_side_input_readers_as_roots(stages: Any, context: Any) -> Any:
    """A streaming phase before fusion: a ParDo with side inputs starts its stage.

    In streaming a main element waits until its side inputs are ready for the side windows
    its windows map to (:mod:`runners.spark.streaming.side_input_readiness`); the runner
    checks that at the stage's input, where the element's windows must be the ones the
    ParDo sees (a WindowInto fused before it would change them).
    """
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn == common_urns.primitives.PAR_DO.urn:
                payload = proto_utils.parse_Bytes(transform.spec.payload,
                                                  beam_runner_api_pb2.ParDoPayload)
                if payload.side_inputs:
                    stage.forced_root = True
        yield stage


def reshuffle_only_the_restrictions(stages: Any, context: Any) -> Any:
    """A phase right after ``expand_sdf``: the Reshuffle it puts between a splittable
    DoFn's split and its process reads only the split restrictions.

    ``expand_sdf`` gives that Reshuffle all of the DoFn's inputs, side inputs too. A
    Reshuffle has no ParDo payload saying which are side inputs, so fusion read them into
    the Reshuffle's stage as elements to redistribute: a side input's elements (the file
    indices of ``ReadFromCsv``) reached the DoFn as its elements, of another type. Its
    stage then also "produced" the side input (through its read), which let
    ``sort_stages`` place it before the stage that splits the restrictions. The side
    inputs are the tags the DoFn's process step (which reads the Reshuffle's output)
    declares as side inputs; that step still reads them as side inputs.
    """
    stages = list(stages)
    side_tags: Dict[str, Set[str]] = {}  # a ParDo's main input -> its side input tags
    for stage in stages:
        for transform in stage.transforms:
            if transform.spec.urn in PAR_DO_URNS:
                payload = proto_utils.parse_Bytes(transform.spec.payload,
                                                  beam_runner_api_pb2.ParDoPayload)
                for tag, pcollection_id in transform.inputs.items():
                    if tag not in payload.side_inputs:
                        side_tags.setdefault(pcollection_id, set()).update(
                            payload.side_inputs)
    for stage in stages:
        for transform in stage.transforms:
            if (transform.spec.urn == common_urns.composites.RESHUFFLE.urn
                    and len(transform.inputs) > 1):
                (output_id,) = transform.outputs.values()
                for tag in side_tags.get(output_id, ()):
                    if tag in transform.inputs:
                        del transform.inputs[tag]
        yield stage


def file_paths_named_by(transform: Any) -> List[Any]:
    """The file paths or patterns a transform of Beam's file IO was given, each a ``str`` or
    a ``ValueProvider``: a file-based source's or sink's (``ReadFromText``, ``WriteToText``,
    Avro, Parquet, TFRecord: through their ``Read`` and ``Write``), ``fileio.MatchFiles``'
    and ``fileio.WriteToFiles``', and the pandas-based reads and writes' (``ReadFromCsv``,
    ``WriteToJson``, ...); none for any other transform."""
    from apache_beam.io import fileio, iobase
    from apache_beam.io.filebasedsink import FileBasedSink
    from apache_beam.io.filebasedsource import FileBasedSource

    if isinstance(transform, iobase.Read) and isinstance(transform.source, FileBasedSource):
        return [transform.source._pattern]
    if (isinstance(transform, (iobase.Write, iobase.WriteImpl))
            and isinstance(transform.sink, FileBasedSink)):
        return [transform.sink.file_path_prefix]
    if isinstance(transform, fileio.MatchFiles):
        return [transform._file_pattern]
    if isinstance(transform, fileio.WriteToFiles):
        return [transform.path]
    try:
        from apache_beam.dataframe.io import _ReadFromPandas, _WriteToPandas
    except ImportError:  # Beam's dataframe extra (pandas) is not installed
        return []
    if isinstance(transform, (_ReadFromPandas, _WriteToPandas)):
        return [transform.path]
    return []


def window_mapping_fn(serialized: bytes) -> Any:
    """The Python window mapping function of a side input (its serialized FunctionSpec),
    or None for one this SDK does not read (another SDK's)."""
    spec = beam_runner_api_pb2.FunctionSpec.FromString(serialized)
    if spec.urn != python_urns.PICKLED_WINDOW_MAPPING_FN:
        return None
    return pickler.loads(spec.payload)


#: FnApiRunner's fusion phases, in its order (see ``FnApiRunner.create_stages``), plus
#: ``annotate_stateful_dofns_as_roots``: a stateful stage must start at a runner-visible
#: input so the runner can partition that input by key before the stage runs; and
#: ``reshuffle_only_the_restrictions`` (the runner executes the Reshuffle ``expand_sdf``
#: adds, which FnApiRunner does not).
FUSION_PHASES = (
    translations.annotate_downstream_side_inputs,
    translations.annotate_stateful_dofns_as_roots,
    translations.fix_side_input_pcoll_coders,
    translations.pack_combiners,
    translations.lift_combiners,
    translations.expand_sdf,
    reshuffle_only_the_restrictions,
    translations.expand_gbk,
    translations.sink_flattens,
    translations.greedily_fuse,
    translations.read_to_impulse,
    translations.impulse_to_input,
    translations.sort_stages,
    translations.add_impulse_to_dangling_transforms,
    translations.setup_timer_mapping,
    translations.populate_data_channel_coders,
)

#: In streaming, combines with ``OUTPUT_AT_EARLIEST`` stay unlifted (see
#: :func:`unlift_combines_output_at_earliest`) and ParDos with side inputs start their
#: stages (:func:`annotate_side_input_readers_as_roots`).
_STREAMING_BEFORE = {
    translations.lift_combiners: unlift_combines_output_at_earliest,
    translations.annotate_stateful_dofns_as_roots: annotate_side_input_readers_as_roots,
}
STREAMING_FUSION_PHASES = tuple(
    phase for original in FUSION_PHASES
    for phase in ((_STREAMING_BEFORE[original], original) if original in _STREAMING_BEFORE
                  else (original,)))

#: Transforms the runner executes itself rather than in the SDK harness. RESHUFFLE here
#: also makes ``expand_sdf`` redistribute split restrictions, so bounded sources spread
#: over partitions.
RUNNER_URNS = frozenset([
    common_urns.primitives.FLATTEN.urn,
    common_urns.primitives.GROUP_BY_KEY.urn,
    common_urns.composites.RESHUFFLE.urn,
])

#: The process step of a splittable DoFn after ``expand_sdf``: its main input is the sized
#: restrictions, each ``((element, (restriction, watermark estimator state)), size)``.
SPLITTABLE_PROCESS_URN = common_urns.sdf_components.PROCESS_SIZED_ELEMENTS_AND_RESTRICTIONS.urn

#: State the runner serves from materialized side inputs (everything else is user state).
SIDE_INPUT_STATE_TYPES = frozenset([
    "iterable_side_input",
    "multimap_side_input",
    "multimap_keys_side_input",
    "multimap_keys_values_side_input",
])

# Job server (runners/spark/job_server/): Beam's Job API
# services, reused rather than re-implemented.
from apache_beam.portability.api import (  # noqa: E402
    beam_artifact_api_pb2_grpc,
    beam_job_api_pb2,
    beam_job_api_pb2_grpc,
    endpoints_pb2,
)
from apache_beam.runners.job import utils as job_utils  # noqa: E402
from apache_beam.runners.portability import (  # noqa: E402
    abstract_job_service,
    artifact_service,
    local_job_service,
)


def environment_dependencies(environment_protos: Any) -> Any:
    """The artifacts each environment of a job depends on (what its client will stage), as
    Beam's local job service registers them with its artifact service."""
    return local_job_service._extract_dependency_sets(environment_protos)


def resolve_environment_dependencies(environment_protos: Any, resolved: Any) -> None:
    """Replace the environments' dependencies by the artifacts the client staged."""
    local_job_service._update_dependency_sets(environment_protos, resolved)


def known_jobs(servicer: Any) -> "dict[str, Any]":
    """Job id -> job of a servicer derived from Beam's ``AbstractJobServiceServicer``."""
    return servicer._jobs


def remove_job_log_handlers(log_queues: Any) -> None:
    """Take the ``JobLogHandler`` of ``log_queues`` off the root logger: Beam's handler stays
    there when closed, so a server would keep one per job it ever ran."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, local_job_service.JobLogHandler) and \
                handler._log_queues is log_queues:
            root.removeHandler(handler)


# Runner-native window assignment (runners/spark/chains/window_assignment.py): an ASSIGN_WINDOWS
# operation of the SDK harness, registered under a runner-private URN.
from apache_beam.runners.common import NameContext  # noqa: E402
from apache_beam.runners.worker import operation_specs, operations  # noqa: E402
from apache_beam.runners.worker.bundle_processor import (  # noqa: E402
    BeamTransformFactory,
    DataInputOperation,
)
from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN  # noqa: E402
from apache_beam.utils.windowed_value import create as create_windowed_value  # noqa: E402


# Chained simple steps (runners/spark/chains/planning.py, runners/spark/chains/operation.py): what a
# ParDo's DoFn asks of its runner, the shape of Beam's Map/Filter wrappers, and the pieces
# of Beam's operations a chain reports through.
from apache_beam.internal.util import ArgumentPlaceholder  # noqa: E402
from apache_beam.metrics.execution import MetricsContainer  # noqa: E402
from apache_beam.pvalue import TaggedOutput  # noqa: E402
from apache_beam.runners import common as _common  # noqa: E402
from apache_beam.runners.common import DoFnSignature  # noqa: E402
from apache_beam.runners.worker.opcounters import OperationCounters  # noqa: E402
from apache_beam.runners.worker.statesampler import StateSampler  # noqa: E402
from apache_beam.transforms import core as _core  # noqa: E402
from apache_beam.transforms.window import TimestampedValue, WindowFn  # noqa: E402
from apache_beam.utils.windowed_value import WindowedValue  # noqa: E402


def dofn_data(payload: "beam_runner_api_pb2.ParDoPayload") -> "tuple[Any, ...]":
    """A ParDo payload's ``(dofn, args, kwargs, side input tags and types, windowing)``, as
    the SDK harness unpickles it (windowing may be None: the main input's applies)."""
    return pickler.loads(
        _core.DoFnInfo.from_runner_api(payload.do_fn, None).serialized_dofn_data())


#: What a DoFn's ``process`` may ask the runner for besides the element: instances of
#: these (``DoFn.TimestampParam``, ``DoFn.StateParam(...)``, ...; also bundle and setup
#: contexts, which are classes).
_PROCESS_PARAMETER_TYPES = (_core._DoFnParam, _core._StateDoFnParam, _core._TimerDoFnParam,
                            _core._BundleContextParam, type)
#: The ``process`` parameters a chain binds from the element's ``WindowedValue``, by the
#: name :func:`process_arguments` gives them.
CHAINED_PARAMETERS = {
    "element": _core.DoFn.ElementParam,
    "timestamp": _core.DoFn.TimestampParam,
    "window": _core.DoFn.WindowParam,
    "pane": _core.DoFn.PaneInfoParam,
}


def why_not_chained_dofn(dofn: Any) -> "str | None":
    """Why a DoFn cannot run in a chain of steps (None: it can). Beam's own signature of the
    DoFn decides: state, timers, splitting, batches, a ``process`` parameter other than the
    element, its timestamp, window and pane (key, side input, windowed value, bundle
    finalizer, contexts, ...), parameters of its bundle or lifecycle methods, runtime type
    checks."""
    kind = type(dofn)
    if kind.__module__.startswith("apache_beam.typehints") or "TypeCheck" in kind.__name__:
        return "runtime type checking wraps it"
    if getattr(dofn, "_runtime_output_constraints", None):
        return "runtime type checking of its outputs"
    signature = DoFnSignature(dofn)
    if signature.is_stateful_dofn():
        return "it has state or timers"
    if signature.is_splittable_dofn():
        return "it is splittable"
    if dofn._process_batch_defined or getattr(
            signature.process_method.method_value, "_beam_yields_batches", False):
        return "it processes batches"
    for default in signature.process_method.defaults:
        if isinstance(default, _PROCESS_PARAMETER_TYPES) and not any(
                default == parameter for parameter in CHAINED_PARAMETERS.values()):
            return f"process asks for {default}"
    if (signature.setup_lifecycle_method.defaults
            or signature.teardown_lifecycle_method.defaults):
        return "its setup or teardown asks for parameters"
    if (signature.start_bundle_method.defaults
            or signature.finish_bundle_method.defaults):
        return "its start_bundle or finish_bundle asks for parameters"
    return None


def process_arguments(dofn: Any, args: Any, kwargs: Any) -> "tuple[list[Any], dict[str, Any]]":
    """The arguments Beam's invoker calls a DoFn's ``process`` with (Beam 2.77's
    ``_get_arg_placeholders``): positional ones, each ``(name, None)`` for a value taken from
    the element (a name of :data:`CHAINED_PARAMETERS`) or ``(None, value)`` for a
    constant; and the keyword arguments (constants). For a DoFn that
    :func:`why_not_chained_dofn` accepts, without side inputs."""
    signature = DoFnSignature(dofn)
    placeholders, with_placeholders, keywords = _common._get_arg_placeholders(
        signature.process_method, list(args), dict(kwargs))
    positional: "list[Any]" = [(None, value) for value in with_placeholders]
    for index, parameter in placeholders:
        names = [name for name, known in CHAINED_PARAMETERS.items() if parameter == known]
        if not names:
            raise ValueError(f"a chained DoFn's process asks for {parameter}")
        positional[index] = (names[0], None)
    return positional, dict(keywords or {})


def process_asks_for_window(dofn: Any) -> bool:
    """Whether Beam invokes ``process`` once per window of an element: when it asks for its
    window (``PerWindowInvoker.has_windowed_inputs``, without side inputs or state)."""
    return any(_core.DoFn.WindowParam == default
               for default in DoFnSignature(dofn).process_method.defaults)


def bundle_methods(dofn: Any) -> "tuple[Any, Any]":
    """A DoFn's own ``start_bundle`` and ``finish_bundle`` (bound), each None where it keeps
    ``DoFn``'s (which does nothing)."""
    kind = type(dofn)
    return tuple(getattr(dofn, name) if getattr(kind, name) is not getattr(_core.DoFn, name)
                 else None for name in ("start_bundle", "finish_bundle"))


def _wrapper_code(transform: Any) -> Any:
    return transform.fn._fn.__code__


def _plain(element):
    return element


#: Beam's wrappers around a user's function, by the transform that makes them: each
#: wrapper's code object, equal to that of every wrapper the transform makes (also once
#: pickled and unpickled: code objects compare by their bytecode, constants, names and line
#: numbers). ``Map`` has two: for a function of the element alone, and for one with more
#: parameters (extra arguments, ``DoFn.TimestampParam``, ...), which the wrapper passes on
#: as they are; ``Filter`` has one, which passes them on too.
_WRAPPERS = (
    ("Map", _wrapper_code(_core.Map(_plain))),
    ("Map", _wrapper_code(_core.Map(lambda element, extra=None: element))),
    ("Filter", _wrapper_code(_core.Filter(_plain))),
    ("MapTuple", _wrapper_code(_core.MapTuple(lambda key, value: key))),
    ("FlatMapTuple", _wrapper_code(_core.FlatMapTuple(lambda key, value: [key]))),
)


def unwrapped_function(dofn: Any) -> "tuple[str, Any] | None":
    """``(kind, the user's function)`` when ``dofn`` is Beam's wrapper for ``Map`` or
    ``Filter`` (the function takes what ``process`` is given: :func:`process_arguments`),
    or for ``MapTuple`` or ``FlatMapTuple`` of a function of the element's parts alone;
    None for any other DoFn (``FlatMap``'s function is the DoFn's ``process`` itself)."""
    if type(dofn) is not _core.CallableWrapperDoFn:
        return None
    code = getattr(dofn._fn, "__code__", None)
    for kind, wrapper_code in _WRAPPERS:
        if code == wrapper_code and code.co_filename == wrapper_code.co_filename and (
                "fn" in code.co_freevars):
            return kind, dofn._fn.__closure__[code.co_freevars.index("fn")].cell_contents
    return None


def is_callable_wrapper(dofn: Any) -> bool:
    """``Map``, ``FlatMap``, ``Filter`` and their kind: Beam does not check what their
    function returns (a ``str`` returned is iterated: that is how a ``FlatMap`` yields its
    characters)."""
    return isinstance(dofn, _core.CallableWrapperDoFn)


def process_is_generator(dofn: Any) -> bool:
    import inspect

    return inspect.isgeneratorfunction(DoFnSignature(dofn).process_method.method_value)


def combine_key_limit(combine_fn: Any) -> int:
    """How many keys Beam's precombine (``PGBKCVOperation``) holds before it flushes:
    more for the combiners whose accumulators are small."""
    from apache_beam.transforms import combiners

    small = isinstance(combine_fn, (combiners.CountCombineFn, combiners.MeanCombineFn)) or (
        isinstance(combine_fn, _core.CallableWrapperCombineFn)
        and combine_fn._fn in (min, max, sum))
    return 1000 * 1000 if small else 100 * 1000


# Runner names (runners/resolution.py): Beam resolves a --runner name with a table of its
# own, read at each create_runner (PipelineOptions, Pipeline(runner="...")).
from apache_beam.runners import runner as _runner  # noqa: E402


def resolve_runner_name(name: str, runner_path: str) -> None:
    """Make Beam resolve the runner name ``name`` (in any case, with or without its
    ``Runner`` suffix, as Beam matches names) to the class at ``runner_path``
    (``"package.module.Class"``), in this process; every other name stays Beam's."""
    _runner._RUNNER_MAP[name.lower()] = runner_path


# Runner-native text IO (runners/spark/text_io/): Beam's text source and sink recognized by
# their classes, their settings read off them, and Beam's ParDo operations built with the
# runner's operation class.
from apache_beam.io import filebasedsource as _filebasedsource  # noqa: E402
from apache_beam.io import iobase as _iobase  # noqa: E402
from apache_beam.io import textio as _textio  # noqa: E402
from apache_beam.io.range_trackers import OffsetRangeTracker as _OffsetRangeTracker  # noqa: E402
from apache_beam.runners.worker.bundle_processor import (  # noqa: E402
    _create_pardo_operation as create_pardo_operation,
)

_BOUNDED_SOURCE_DOFN = "SDFBoundedSourceReader._create_sdf_bounded_source_dofn.<locals>." \
    "SDFBoundedSourceDoFn"


def reads_bounded_sources(dofn: Any) -> bool:
    """Whether ``dofn`` is the splittable DoFn of Beam's ``Read`` of a ``BoundedSource``
    (``SDFBoundedSourceReader``'s, a class Beam defines anew for each ``Read``)."""
    kind = type(dofn)
    return kind.__module__ == _iobase.__name__ and kind.__qualname__ == _BOUNDED_SOURCE_DOFN


def text_range_reader(dofn: Any) -> "tuple[Any, bool] | None":
    """``(source_from_file, with_filename)`` of the ``_ReadRange`` DoFn of Beam's
    ``ReadAllFromText`` (its ``ReadAllFiles`` over text sources that Beam's own
    ``_create_text_source`` makes); None for any other DoFn."""
    import functools

    if type(dofn) is not _filebasedsource._ReadRange:
        return None
    source_from_file = dofn._source_from_file
    if not (isinstance(source_from_file, functools.partial)
            and source_from_file.func is _textio._create_text_source):
        return None
    return source_from_file, bool(dofn._with_filename)


def restriction_range(restriction: Any) -> "tuple[Any, int, int | None] | None":
    """``(source, start, stop)`` of the restriction of Beam's bounded-source SDF (``stop``
    None: unbounded, the whole of an unsplittable file); None for another restriction."""
    if type(restriction) is not _iobase._SDFBoundedSourceRestriction:
        return None
    bundle = restriction._source_bundle
    stop = bundle.stop_position
    return (bundle.source, bundle.start_position,
            None if stop == _OffsetRangeTracker.OFFSET_INFINITY else stop)


def text_file_of(source: Any) -> "tuple[Any, str] | None":
    """``(text source, file name)`` of one file's source (``_SingleFileSource``) over Beam's
    own ``_TextSource`` or ``_TextSourceWithFilename`` (not a subclass: a user's read
    records their own way); None for any other source."""
    if type(source) is not _filebasedsource._SingleFileSource:
        return None
    text_source = source._file_based_source
    if type(text_source) not in (_textio._TextSource, _textio._TextSourceWithFilename):
        return None
    return text_source, source._file_name


def text_source_settings(text_source: Any) -> "dict[str, Any] | None":
    """What Beam's ``_TextSource`` reads by: ``delimiter``, ``escapechar``,
    ``strip_trailing_newlines``, ``skip_header_lines``, ``coder`` and ``with_filename``;
    None when it matches header lines with functions (read by Beam's own path)."""
    if text_source._header_matcher is not None or text_source._header_processor is not None:
        return None
    return {
        "delimiter": text_source._delimiter,
        "escapechar": text_source._escapechar,
        "strip_trailing_newlines": bool(text_source._strip_trailing_newlines),
        "skip_header_lines": text_source._skip_header_lines,
        "coder": text_source._coder,
        "with_filename": type(text_source) is _textio._TextSourceWithFilename,
    }


def serialized_dofn_data(payload: "beam_runner_api_pb2.ParDoPayload") -> bytes:
    """A ParDo payload's pickled ``(dofn, args, kwargs, side inputs, windowing)``, as the SDK
    harness's ParDo factories hand it to ``create_pardo_operation``."""
    return _core.DoFnInfo.from_runner_api(payload.do_fn, None).serialized_dofn_data()


from apache_beam.io.iobase import _WriteBundleDoFn as WriteBundleDoFn  # noqa: E402
from apache_beam.io.iobase import _WriteKeyedBundleDoFn as WriteKeyedBundleDoFn  # noqa: E402


def text_sink_writer(dofn: Any) -> "str | None":
    """``"bundle"`` or ``"keyed"`` when ``dofn`` is the writing step of Beam's ``WriteImpl``
    (``_WriteBundleDoFn``: a file per bundle; ``_WriteKeyedBundleDoFn``: a file per shard,
    ``num_shards``) of Beam's own ``_TextSink`` (not a subclass: a user's sink writes its own
    way) with no limit of records or bytes per file; None for any other DoFn."""
    kind = type(dofn)
    if kind not in (WriteBundleDoFn, WriteKeyedBundleDoFn):
        return None
    sink = dofn.sink
    if (type(sink) is not _textio._TextSink or sink.max_records_per_shard
            or sink.max_bytes_per_shard or getattr(dofn, "_runtime_output_constraints", None)):
        return None
    return "bundle" if kind is WriteBundleDoFn else "keyed"


def appends_newlines(text_sink: Any) -> bool:
    """Whether Beam's ``_TextSink`` writes ``\\n`` after each record."""
    return bool(text_sink._append_trailing_newlines)


def write_impl_step(dofn: Any, args: Any) -> "str | None":
    """What a ParDo of Beam's ``WriteImpl`` (bounded) does, for a sink of Beam's own
    ``FileBasedSink`` classes (``_TextSink``, Avro's, Parquet's, ...) writing a local path
    given as a static value: ``"initialize"``, ``"pre_finalize"`` or ``"finalize"``; for
    the steps of Beam's ``Create`` (its ``FlatMap`` of the encoded values, its ``Map`` of a
    Beam coder's ``decode``, as ``WriteImpl``'s ``DoOnce`` has them): ``"create"``; None
    for anything else (a user's sink class, a remote or deferred path, a user's function)."""
    if not isinstance(dofn, _core.CallableWrapperDoFn):
        return None
    function = dofn._fn
    code = getattr(function, "__code__", None)
    if (getattr(function, "__qualname__", "") == "Map.<locals>.<lambda>"
            and function.__module__ == _core.__name__ and "fn" in code.co_freevars):
        # Map's wrapper (with or without extra arguments): the function it calls
        function = function.__closure__[code.co_freevars.index("fn")].cell_contents
        code = getattr(function, "__code__", None)
    owner = getattr(function, "__self__", None)
    if owner is not None:  # Create's Map(coder.decode)
        module = type(owner).__module__
        return ("create" if getattr(function, "__name__", "") == "decode"
                and module.startswith("apache_beam.coders.") else None)
    module = getattr(function, "__module__", "")
    qualified = getattr(function, "__qualname__", "")
    if module == _core.__name__ and qualified == "Create.expand.<locals>.<lambda>":
        return "create"
    if module != _iobase.__name__:
        return None
    if function is _iobase._pre_finalize:
        step = "pre_finalize"
    elif function is _iobase._finalize_write:
        step = "finalize"
    elif (qualified == "WriteImpl._expand_bounded.<locals>.<lambda>" and code is not None
          and "initialize_write" in code.co_names):
        step = "initialize"
    else:
        return None
    return step if args and _beams_local_file_sink(args[0]) else None


def _beams_local_file_sink(sink: Any) -> bool:
    from apache_beam.io.filebasedsink import FileBasedSink
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.value_provider import StaticValueProvider

    if not (isinstance(sink, FileBasedSink) and type(sink).__module__.startswith("apache_beam.")):
        return False
    prefix = sink.file_path_prefix
    return isinstance(prefix, StaticValueProvider) and FileSystems.get_scheme(prefix.get()) in (
        None, "file")
