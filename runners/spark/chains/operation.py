"""A chain of steps as one loop: the SDK harness operation that runs what
:mod:`runners.spark.chains.planning` planned.

Each element entering the chain is a ``WindowedValue``; its value goes through the
steps' functions, called directly by one function written for the chain
(:mod:`runners.spark.chains.code`) with the arguments Beam's invoker would give them
(:mod:`runners.spark.chains.steps`), and each result leaves as one ``WindowedValue`` to the
next Beam operation, as Beam's own operations would hand it on. No step wraps its outputs:
the loop carries each value with the ``WindowedValue`` whose timestamp, windows and pane
it has (its *carrier*). What Beam's output handler does with a result that is a
``TimestampedValue``, a ``WindowedValue`` or a ``TaggedOutput`` is done the same way
(:meth:`~runners.spark.chains.steps.ChainedStep.resolve`), and a ``WindowInto`` step or an
invocation per window gives its outputs new carriers.

What a user can observe stays Beam's:

- an exception from a step's function (or raised further down, untagged), from its
  ``setup``, ``start_bundle`` or ``finish_bundle``, is re-raised as Beam's ``DoFnRunner``
  re-raises it: the step's name appended to the message, the original chained, logged
  once;
- each intermediate PCollection's element count and sampled byte size are reported as
  Beam's consumer sets report them (the last one is counted by Beam's own receiver);
- a user's metric counts in the step whose code is running (the chain's metrics container
  routes it), so the metrics API shows it under that step;
- ``DoFn.setup`` and ``teardown`` run once per operation, ``start_bundle`` and
  ``finish_bundle`` once per bundle, in the order Beam's bundle processor runs its
  operations' (set up and started from the last step to the first, finished and torn
  down from the first to the last); what ``finish_bundle`` outputs (``WindowedValue`` s,
  as Beam requires) goes through the steps after it, which are not finished yet.

The time the state sampler sees inside the chain is reported under the chain's first
step (it samples the chain as one state).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

from runners.spark.beam_internals import (
    BeamTransformFactory,
    DistributionData,
    MetricsContainer,
    NameContext,
    beam_runner_api_pb2,
    monitoring_infos,
    operation_specs,
    operations,
)
from runners.spark.chains.blocks import (
    BlockSink,
    SampledSizes,
    only_consumer,
    takes_value_blocks,
)
from runners.spark.chains.code import chain_function
from runners.spark.chains.planning import CHAINED_STEPS_URN, chain_order
from runners.spark.chains.steps import SPECIAL_RESULTS, ChainedStep, with_step_name


class ChainedStepsOperation(operations.Operation):
    """The steps of a chain, run as one loop over each element (see the module's docstring).

    Built by the factory of :data:`CHAINED_STEPS_URN`; ``steps``, ``sizes`` (one per
    intermediate PCollection) and ``block_sink`` (the one consumer, when it takes blocks of
    values: :class:`~runners.spark.chains.blocks.BlockSink`) are set right after
    construction.
    """

    steps: List[ChainedStep]
    sizes: List[SampledSizes]
    block_sink: Optional[BlockSink] = None

    def setup(self, data_sampler=None) -> None:
        super().setup(data_sampler)
        last = len(self.steps) - 1
        entries = [index for index, step in enumerate(self.steps)
                   if step.finish_bundle is not None and index < last]
        sink = self.block_sink
        if (sink is not None and self.steps[-1].kind == "windows"
                and self.steps[-1].into_global and takes_value_blocks(self.receivers[0])):
            # The chain's output is counted by the chain, as each intermediate one.
            self.sizes = self.sizes + [SampledSizes(self.receivers[0].opcounter)]
        else:
            sink = None
        functions = chain_function(self.steps, self.sizes, self.receivers[0].receive,
                                   SPECIAL_RESULTS, self._raise_with_step, entries, sink)
        self.chain, self.chain_values = functions.chain, functions.chain_values
        self.source = functions.source
        self._counts, self._enter, self._running = (
            functions.counts, functions.enter, functions.running)
        # Where what a step's finish_bundle outputs goes: the rest of the chain, or on.
        self._after = dict(functions.after)
        self._after[last] = lambda carrier, value: self.receivers[0].receive(carrier)
        self._routing = _RoutingMetrics(self.name_context.metrics_name(),
                                        [step.metrics for step in self.steps],
                                        functions.running_cell)
        sampler = self.state_sampler
        self._chain_state = sampler.scoped_state(
            self.name_context, "process-chained", metrics_container=self._routing)
        self._start_state = sampler.scoped_state(
            self.name_context, "start-chained", metrics_container=self._routing)
        self._finish_state = sampler.scoped_state(
            self.name_context, "finish-chained", metrics_container=self._routing)
        self._flushed = [0] * len(self.sizes)
        # As Beam's bundle processor sets its operations up: the last first.
        with self._start_state:
            for index in reversed(range(len(self.steps))):
                step = self.steps[index]
                if step.dofn is not None:
                    self._lifecycle(index, step.dofn.setup)
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

    def _lifecycle(self, index: int, method: Callable[[], Any]) -> Any:
        """Call a DoFn's setup, teardown or bundle method as the step running (its metrics
        count under it), its errors named as Beam's ``DoFnRunner`` names them."""
        self._enter(index)
        try:
            return method()
        except BaseException as error:
            if getattr(error, "_tagged_with_step", False):
                raise
            raise with_step_name(error, self.steps[index].name)

    def start(self) -> None:
        super().start()
        # As Beam's bundle processor starts its operations: the last first.
        with self._start_state:
            for index in reversed(range(len(self.steps))):
                if self.steps[index].start_bundle is not None:
                    self._lifecycle(index, self._start_bundle)

    def _start_bundle(self) -> None:
        results = self.steps[self._running()].start_bundle()
        if results is not None:
            raise RuntimeError(
                f"Start Bundle should not output any elements but got {results}")

    def process(self, windowed_value) -> None:
        with self._chain_state:
            self.chain(windowed_value, windowed_value.value)

    def process_values(self, carrier: Any, values: Sequence[Any]) -> None:
        """Run each of ``values``, in order, as the value of an element with ``carrier``'s
        timestamp, windows and pane (the producer counted them:
        :class:`~runners.spark.chains.blocks.ValueBlocks`)."""
        with self._chain_state:
            self.chain_values(carrier, values)

    def finish(self) -> None:
        # As Beam's bundle processor finishes its operations: the first first, each DoFn's
        # outputs going on through the steps after it (not finished yet).
        with self._finish_state:
            for index, step in enumerate(self.steps):
                if step.finish_bundle is not None:
                    self._lifecycle(index, self._finish_bundle)
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

    def _finish_bundle(self) -> None:
        index = self._running()
        step, after = self.steps[index], self._after[index]
        results = step.finish_bundle()
        if results is None:
            return
        for result in results:
            element = step.finish_bundle_output(result)
            if element is not None:
                after(element, element.value)
            self._enter(index)  # its generator resumes

    def teardown(self) -> None:
        with self._finish_state:
            for index, step in enumerate(self.steps):
                if step.dofn is not None:
                    self._lifecycle(index, step.dofn.teardown)
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
        start = (self.scoped_start_state.sampled_msecs_int()
                 + self._start_state.sampled_msecs_int())
        process = (self.scoped_process_state.sampled_msecs_int()
                   + self._chain_state.sampled_msecs_int())
        finish = (self.scoped_finish_state.sampled_msecs_int()
                  + self._finish_state.sampled_msecs_int())
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
    container of the step whose function is running.

    ``running`` is the cell of the chain's ``current`` (the index of the step running):
    read in place, it costs no call per metric update (a chained ``Monitor`` updates two
    metrics an element)."""

    def __init__(self, step_name: str, containers: List[Any], running: Any) -> None:
        super().__init__(step_name)
        self._containers = containers
        self._running = running
        self.pinned: Optional[int] = None  # a step that reports whatever runs

    def get_metric_cell(self, typed_metric_name):
        pinned = self.pinned
        index = self._running.cell_contents if pinned is None else pinned
        return self._containers[index].get_metric_cell(typed_metric_name)


@BeamTransformFactory.register_urn(CHAINED_STEPS_URN, beam_runner_api_pb2.Components)
def _create_chained_steps(factory, transform_id, transform_proto, steps_payload, consumers):
    ordered = chain_order(steps_payload, transform_proto)
    steps = [ChainedStep(factory, step.unique_name, step) for step in ordered]
    operation = ChainedStepsOperation(
        NameContext(transform_proto.unique_name, transform_id),
        operation_specs.WorkerFlatten(None, [factory.get_only_output_coder(transform_proto)]),
        factory.counter_factory,
        factory.state_sampler,
    )
    operation.steps = steps
    operation.block_sink = only_consumer(consumers, BlockSink)
    operation.sizes = [
        # A suffix of its own: the factory hands out one counter per name, and the chain's
        # own receiver is counted as "<first step>-out0".
        SampledSizes(operations.opcounters.OperationCounters(
            factory.counter_factory, step.unique_name,
            factory.get_windowed_coder(next(iter(step.outputs.values()))), 0,
            suffix="chained-out"))
        for step in ordered[:-1]
    ]
    return factory.augment_oldstyle_op(operation, transform_proto.unique_name, consumers)
