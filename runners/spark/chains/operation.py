"""A chain of element-only steps as one loop: the SDK harness operation that runs what
:mod:`runners.spark.chains.planning` planned.

Each element entering the chain is a ``WindowedValue``; its value goes through the
steps' functions, called directly by one function written for the chain
(:mod:`runners.spark.chains.code`), and each result leaves as one ``WindowedValue`` with
the entering element's timestamp, windows and pane, to the next Beam operation, as Beam's
own operations would hand it on. No step wraps its outputs: the loop carries each value
with the ``WindowedValue`` whose timestamp, windows and pane it has (its *carrier*). What
Beam's output handler does with a result that is a ``TimestampedValue``, a
``WindowedValue`` or a ``TaggedOutput`` is done the same way (:meth:`_Step.resolve`), and
a ``WindowInto`` step gives its outputs new carriers.

What a user can observe stays Beam's:

- an exception from a step's function (or raised further down, untagged) is re-raised as
  Beam's ``DoFnRunner`` re-raises it: the step's name appended to the message, the
  original chained, logged once;
- each intermediate PCollection's element count and sampled byte size are reported as
  Beam's consumer sets report them (the last one is counted by Beam's own receiver);
- a user's metric counts in the step whose function is running (the chain's metrics
  container routes it), so the metrics API shows it under that step;
- ``DoFn.setup`` and ``teardown`` run, once per operation, as Beam runs them.

The time the state sampler sees inside the chain is reported under the chain's first
step (it samples the chain as one state).
"""

from __future__ import annotations

import logging
import math
import random
import traceback
from typing import Any, Callable, Dict, List, Optional

from apache_beam.transforms.core import CombineFn, Windowing
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindows,
    SlidingWindows,
)

from runners.spark.beam_internals import (
    BeamTransformFactory,
    DistributionData,
    MetricsContainer,
    NameContext,
    TaggedOutput,
    TimestampedValue,
    WindowedValue,
    WindowFn,
    beam_runner_api_pb2,
    create_windowed_value,
    dofn_data,
    is_callable_wrapper,
    monitoring_infos,
    operation_specs,
    operations,
    process_is_generator,
    proto_utils,
    unwrapped_function,
)
from runners.spark.chains.code import chain_function
from runners.spark.chains.planning import (
    CHAINED_STEPS_URN,
    PAR_DO_URN,
    PRECOMBINE_URN,
    chain_order,
)
from runners.spark.chains.precombine import ChainedPrecombine
from runners.spark.chains.window_assignment import fixed_windows_parts, windows_at_function

_LOGGER = logging.getLogger(__name__)
_STANDARD_WINDOW_FNS = (GlobalWindows, FixedWindows, SlidingWindows)
_SPECIAL_RESULTS = (TaggedOutput, WindowedValue, TimestampedValue)
#: Beam samples the size of every element of the first ten of a PCollection, then fewer.
_ALWAYS_SAMPLED = 10


def with_step_name(error: BaseException, step_name: str) -> BaseException:
    """``error`` as Beam's ``DoFnRunner`` re-raises a step's exception (Beam 2.77): the same
    type with `` [while running 'step']`` appended to its first argument (a RuntimeError
    naming it when that cannot be built), marked so no enclosing step names itself too;
    raised from the ``except`` block that caught the original, which is chained."""
    annotation = f" [while running '{step_name}']"
    try:
        tagged = type(error)(error.args[0] + annotation, *error.args[1:])
        tagged._tagged_with_step = True
    except Exception:  # noqa: BLE001 - Beam falls back the same way for any failure
        tagged = RuntimeError(
            traceback.format_exception_only(type(error), error)[-1].strip() + annotation)
        tagged._tagged_with_step = True
    tagged = tagged.with_traceback(error.__traceback__)
    _LOGGER.exception(tagged)
    return tagged


class _Sizes:
    """One intermediate PCollection's sampled sizes, kept in a Beam ``OperationCounters``
    as Beam's consumer set keeps them, at its sampling rate (all of the first ten
    elements, then ~10/n of them)."""

    def __init__(self, counters: Any) -> None:
        self.counters = counters
        self.coder_impl = counters.coder_impl

    def sample(self, carrier: Any, value: Any, seen: int) -> int:
        """Record the size of the ``seen``-th element; the count at which to sample next."""
        element = carrier if value is carrier.value else carrier.with_value(value)
        self.counters.mean_byte_counter.update(self.coder_impl.estimate_size(element))
        if seen <= _ALWAYS_SAMPLED:
            return seen + 1
        gap = math.log(1.0 - random.random()) / math.log(1.0 - _ALWAYS_SAMPLED / seen)
        return seen + 1 + math.floor(gap)


class _FirstOutputCheck:
    """Beam refuses a ``str``, ``bytes`` or ``dict`` returned by a user DoFn's ``process``
    (not Map's, not a generator's), looking at the first call only."""

    def __init__(self) -> None:
        self.pending = True

    def __call__(self, results: Any) -> None:
        self.pending = False
        if isinstance(results, (str, bytes, dict)):
            raise TypeError(
                f"Returning a {type(results).__name__} from a ParDo or FlatMap is not "
                f"allowed. Please use list({results!r}) if you really want this behavior.")


class _Step:
    """One chained step as the loop needs it, from its ``PTransform`` proto."""

    def __init__(self, factory: Any, transform_id: str, transform: Any) -> None:
        self.transform_id = transform_id
        self.name = transform.unique_name
        self.output_tag, self.output = next(iter(transform.outputs.items()))
        self.metrics = MetricsContainer(NameContext(self.name, transform_id).metrics_name())
        self.dofn: Any = None
        if transform.spec.urn == PAR_DO_URN:
            self._par_do(factory, transform)
        elif transform.spec.urn == PRECOMBINE_URN:
            payload = proto_utils.parse_Bytes(transform.spec.payload,
                                              beam_runner_api_pb2.CombinePayload)
            self.kind = "precombine"
            self.combine_fn = CombineFn.from_runner_api(payload.combine_fn, factory.context)
            self.combiner = ChainedPrecombine(self.combine_fn,
                                              factory.get_input_windowing(transform))
        else:  # a WindowInto (the planning chains no other kind)
            windowing = Windowing.from_runner_api(
                beam_runner_api_pb2.WindowingStrategy.FromString(transform.spec.payload),
                factory.context)
            self.kind = "windows"
            self.windows_at = windows_at_function(windowing.windowfn)
            self.into_global = type(windowing.windowfn) is GlobalWindows
            self.fixed = fixed_windows_parts(windowing.windowfn)

    def _par_do(self, factory: Any, transform: Any) -> None:
        payload = proto_utils.parse_Bytes(transform.spec.payload,
                                          beam_runner_api_pb2.ParDoPayload)
        dofn, args, kwargs, _, windowing = dofn_data(payload)
        if windowing is None:  # as the SDK harness does: the main input's windowing
            input_pcollection = next(iter(transform.inputs.values()))
            windowing = factory.context.windowing_strategies.get_by_id(
                factory.descriptor.pcollections[input_pcollection].windowing_strategy_id)
        self.dofn = dofn
        self.window_fn = windowing.windowfn
        self.windows_at = (windows_at_function(self.window_fn)
                           if type(self.window_fn) in _STANDARD_WINDOW_FNS else None)
        self.args, self.kwargs = tuple(args), dict(kwargs)
        unwrapped = None if (args or kwargs) else unwrapped_function(dofn)
        if unwrapped is not None:
            self.kind, self.function = unwrapped
        else:
            self.kind, self.function = "process", dofn.process
        self.check_output = not (is_callable_wrapper(dofn) or process_is_generator(dofn))
        self.check_first_output = _FirstOutputCheck()

    def resolve(self, carrier: Any, result: Any) -> Optional[WindowedValue]:
        """What Beam's output handler makes of a ``TaggedOutput``, ``WindowedValue`` or
        ``TimestampedValue`` result: the new element (None: sent to an undeclared output,
        which Beam drops)."""
        tag = None
        if isinstance(result, TaggedOutput):
            tag = result.tag
            if not isinstance(tag, str):
                raise TypeError(f"In {self.name}, tag {tag} is not a string")
            result = result.value
        if isinstance(result, WindowedValue):
            element = result
            if len(carrier.windows) != 1:
                element.windows *= len(carrier.windows)
        elif isinstance(result, TimestampedValue):
            if self.windows_at is not None:  # a standard WindowFn: what assign gives
                micros = result.timestamp.micros
                element = create_windowed_value(result.value, micros, self.windows_at(micros))
            else:
                element = WindowedValue(result.value, result.timestamp, self.window_fn.assign(
                    WindowFn.AssignContext(result.timestamp, result.value)))
            if len(carrier.windows) != 1:
                element.windows *= len(carrier.windows)
        else:
            element = carrier.with_value(result)
        if tag is not None and tag != self.output_tag:
            return None
        return element


class ChainedStepsOperation(operations.Operation):
    """The steps of a chain, run as one loop over each element (see the module's docstring).

    Built by the factory of :data:`CHAINED_STEPS_URN`; ``steps`` and ``sizes`` (one per
    intermediate PCollection) are set right after construction.
    """

    steps: List[_Step]
    sizes: List[_Sizes]

    def setup(self, data_sampler=None) -> None:
        super().setup(data_sampler)
        self.chain, (self._counts, self._running), self.source = chain_function(
            self.steps, self.sizes, self.receivers[0].receive, _SPECIAL_RESULTS,
            self._raise_with_step)
        self._routing = _RoutingMetrics(self.name_context.metrics_name(),
                                        [step.metrics for step in self.steps], self._running)
        self._chain_state = self.state_sampler.scoped_state(
            self.name_context, "process-chained", metrics_container=self._routing)
        self._flushed = [0] * len(self.sizes)
        for step in self.steps:
            if step.dofn is not None:
                self._lifecycle(step, step.dofn.setup)
            elif step.kind == "precombine":
                step.combine_fn.setup()

    def _raise_with_step(self, error: BaseException, index: int) -> None:
        """Name the step as Beam does: the nearest ParDo at or before the one that raised
        (a WindowInto and a precombine are not DoFns of Beam's: their errors are named by
        the DoFn that handed them the element)."""
        index = self._nearest_par_do(index)
        if index is None or getattr(error, "_tagged_with_step", False):
            raise error
        raise with_step_name(error, self.steps[index].name)

    def _nearest_par_do(self, index: int) -> Optional[int]:
        while index >= 0 and self.steps[index].kind in ("windows", "precombine"):
            index -= 1
        return index if index >= 0 else None

    def _lifecycle(self, step: _Step, method: Callable[[], Any]) -> None:
        try:
            method()
        except BaseException as error:
            if getattr(error, "_tagged_with_step", False):
                raise
            raise with_step_name(error, step.name)

    def process(self, windowed_value) -> None:
        with self._chain_state:
            self.chain(windowed_value, windowed_value.value)

    def finish(self) -> None:
        last = self.steps[-1]
        if last.kind == "precombine":
            # The flush's metrics (a CombineFn's compact) count where Beam counts them: in
            # the DoFn that handed the precombine its elements.
            self._routing.pinned = self._nearest_par_do(len(self.steps) - 1) or 0
            try:
                with self._chain_state:
                    last.combiner.flush(self.receivers[0].receive)
            finally:
                self._routing.pinned = None
        self._flush_counts()
        super().finish()

    def teardown(self) -> None:
        for step in self.steps:
            if step.dofn is not None:
                self._lifecycle(step, step.dofn.teardown)
            elif step.kind == "precombine":
                step.combine_fn.teardown()

    def reset(self) -> None:
        super().reset()
        for step in self.steps:
            step.metrics.reset()
        self._flushed = list(self._counts())

    def _flush_counts(self) -> None:
        for index, seen in enumerate(self._counts()):
            if seen > self._flushed[index]:
                self.sizes[index].counters.element_counter.update(seen - self._flushed[index])
                self._flushed[index] = seen

    def monitoring_infos(self, transform_id, tag_to_pcollection_id) -> Dict[Any, Any]:
        """Every chained step's infos, as its own operation would report them: user
        metrics under the step, element counts and sampled sizes under its output
        PCollection; the chain's sampled time under its first step."""
        self._flush_counts()
        start = self.scoped_start_state.sampled_msecs_int()
        process = (self.scoped_process_state.sampled_msecs_int()
                   + self._chain_state.sampled_msecs_int())
        finish = self.scoped_finish_state.sampled_msecs_int()
        found = [
            monitoring_infos.int64_counter(urn, msecs, ptransform=transform_id)
            for urn, msecs in ((monitoring_infos.START_BUNDLE_MSECS_URN, start),
                               (monitoring_infos.PROCESS_BUNDLE_MSECS_URN, process),
                               (monitoring_infos.FINISH_BUNDLE_MSECS_URN, finish),
                               (monitoring_infos.TOTAL_MSECS_URN, start + process + finish))]
        for step, sizes in zip(self.steps, self.sizes):
            (_, total, count, smallest, largest) = sizes.counters.mean_byte_counter.value()
            found.append(monitoring_infos.int64_counter(
                monitoring_infos.ELEMENT_COUNT_URN, sizes.counters.element_counter.value(),
                pcollection=step.output))
            found.append(monitoring_infos.int64_distribution(
                monitoring_infos.SAMPLED_BYTE_SIZE_URN,
                DistributionData(total, count, smallest, largest), pcollection=step.output))
        infos = {monitoring_infos.to_key(info): info for info in found}
        infos.update(self.pcollection_count_monitoring_infos(tag_to_pcollection_id))
        for step in self.steps:
            infos.update(step.metrics.to_runner_api_monitoring_infos(step.transform_id))
        return infos


class _RoutingMetrics(MetricsContainer):
    """The chain's metrics container: each metric a user's function reports goes to the
    container of the step whose function is running."""

    def __init__(self, step_name: str, containers: List[Any],
                 running: Callable[[], int]) -> None:
        super().__init__(step_name)
        self._containers = containers
        self._running = running
        self.pinned: Optional[int] = None  # a step that reports whatever runs

    def get_metric_cell(self, typed_metric_name):
        index = self._running() if self.pinned is None else self.pinned
        return self._containers[index].get_metric_cell(typed_metric_name)


@BeamTransformFactory.register_urn(CHAINED_STEPS_URN, beam_runner_api_pb2.Components)
def _create_chained_steps(factory, transform_id, transform_proto, steps_payload, consumers):
    ordered = chain_order(steps_payload, transform_proto)
    steps = [_Step(factory, step.unique_name, step) for step in ordered]
    operation = ChainedStepsOperation(
        NameContext(transform_proto.unique_name, transform_id),
        operation_specs.WorkerFlatten(None, [factory.get_only_output_coder(transform_proto)]),
        factory.counter_factory,
        factory.state_sampler,
    )
    operation.steps = steps
    operation.sizes = [
        # A suffix of its own: the factory hands out one counter per name, and the chain's
        # own receiver is counted as "<first step>-out0".
        _Sizes(operations.opcounters.OperationCounters(
            factory.counter_factory, step.unique_name,
            factory.get_windowed_coder(next(iter(step.outputs.values()))), 0,
            suffix="chained-out"))
        for step in ordered[:-1]
    ]
    return factory.augment_oldstyle_op(operation, transform_proto.unique_name, consumers)
