"""Splittable DoFns that plan their own micro-batches (``ReadFromKafka``): planned reads.

A splittable DoFn may offer the driver three methods (duck-typed; the runner imports nothing
of the source):

* ``plan_micro_batch(work) -> elements``: at the start of a batch, given ``[(element,
  restriction)]`` of the residuals it deferred, return the elements to read them with (the
  Kafka reader sets each partition's ``planned_end``: the offset range of this batch);
* ``micro_batch_done(elements)``: the batch's output is written (the Kafka reader commits
  the read offsets to its consumer group, for monitoring);
* ``close_micro_batches()``: the run is over (its driver-side clients close);
* ``planned_records() -> int``: how many records the last plan reads (a batch that reads
  little may run in one task: :mod:`~runners.spark.streaming.compact_round`).

The driver holds one instance of such a DoFn (unpickled from the stage), decodes each due
residual with the stage input's coder, asks the DoFn for the plan and re-encodes the
residuals with the planned elements; the loop logs the plan before the batch runs
(:class:`~runners.spark.state.checkpoint.Checkpoints`), so a batch replayed after a
crash reads the same ranges. Restrictions and watermark estimator states are untouched.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

from runners.spark.beam_internals import (
    SPLITTABLE_PROCESS_URN,
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    unpickle_dofn,
)
from runners.spark.planning.execution_plan import SDK_STAGE, ExecutionPlan
from runners.spark.streaming.unbounded import CarriedResidual, CarriedResiduals
from runners.spark.worker.components import SharedComponents

_LOGGER = logging.getLogger(__name__)


class PlannedSources:
    """The splittable DoFns of a run that plan their micro-batches, on the driver.

    Args:
      plan: the run's stages.
      components: the pipeline's components (for the residuals' coders).
    """

    def __init__(self, plan: ExecutionPlan, components: SharedComponents) -> None:
        self._components = components
        self._dofns: Dict[int, Any] = {}  # stage index -> the DoFn that plans
        self._coders: Dict[int, Dict[int, Any]] = {}  # stage index -> input port -> coder
        self._planned: Dict[int, List[Any]] = {}  # stage index -> this batch's elements
        #: records this batch's plan reads (None: a DoFn does not say)
        self.planned_records: Optional[int] = 0
        for stage in plan.stages:
            if stage.kind != SDK_STAGE or not stage.descriptor:  # TestStream: its payload
                continue
            descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
            for transform in descriptor.transforms.values():
                if transform.spec.urn != SPLITTABLE_PROCESS_URN:
                    continue
                payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
                try:
                    dofn = unpickle_dofn(payload)
                except Exception as error:  # its code is not importable here: no planning
                    _LOGGER.info("splittable DoFn %s is not planned by the driver (%s: %s)",
                                 transform.unique_name, type(error).__name__, error)
                    continue
                if callable(getattr(dofn, "plan_micro_batch", None)):
                    self._dofns[stage.index] = dofn
                    self._coders[stage.index] = {
                        port: components.coder_impl(beam_fn_api_pb2.RemoteGrpcPort.FromString(
                            descriptor.transforms[spec.transform_id].spec.payload).coder_id)
                        for port, spec in enumerate(stage.inputs)}

    def __bool__(self) -> bool:
        return bool(self._dofns)

    def stage_indexes(self) -> List[int]:
        return sorted(self._dofns)

    def plan(self, residuals: CarriedResiduals, clock: float) -> None:
        """Plan this batch: every due residual of a planning DoFn gets the element the DoFn
        plans for it (in place, in ``residuals``)."""
        self._planned = {}
        self.planned_records = 0
        for index, dofn in self._dofns.items():
            carried = residuals.residuals.get(index, [])
            due = [residual for residual in carried if residual.resume_at <= clock]
            if not due:
                continue
            decoded = [self._coders[index][residual.input_index].decode_nested(residual.element)
                       for residual in due]
            work = [(value.value[0][0], value.value[0][1][0]) for value in decoded]
            elements = list(dofn.plan_micro_batch(work))
            if len(elements) != len(work):
                raise RuntimeError(f"{type(dofn).__name__}.plan_micro_batch returned "
                                   f"{len(elements)} elements for {len(work)}")
            planned = []
            for residual, value, element in zip(due, decoded, elements):
                (_, rest), size = value.value
                replanned = value.with_value(((element, rest), size))
                planned.append(CarriedResidual(
                    residual.input_index,
                    self._coders[index][residual.input_index].encode_nested(replanned),
                    residual.watermark_micros, residual.resume_at))
            residuals.residuals[index] = planned + [residual for residual in carried
                                                    if residual.resume_at > clock]
            self._planned[index] = elements
            count = getattr(dofn, "planned_records", None)
            if not callable(count) or self.planned_records is None:
                self.planned_records = None
            else:
                self.planned_records += count()

    def planned_residuals(self, residuals: CarriedResiduals) -> Dict[int, List[CarriedResidual]]:
        """The residuals of the planning stages (what a batch's plan is, to log)."""
        return {index: list(residuals.residuals.get(index, [])) for index in self._dofns}

    def done(self) -> None:
        """The batch's output is written: tell the DoFns what they read."""
        for index, elements in self._planned.items():
            try:
                self._dofns[index].micro_batch_done(elements)
            except Exception as error:  # monitoring only: never fail the run for it
                _LOGGER.warning("%s.micro_batch_done failed: %s",
                                type(self._dofns[index]).__name__, error)
        self._planned = {}

    def close(self) -> None:
        for dofn in self._dofns.values():
            close = getattr(dofn, "close_micro_batches", None)
            if callable(close):
                try:
                    close()
                except Exception as error:
                    _LOGGER.warning("%s.close_micro_batches failed: %s", type(dofn).__name__,
                                    error)
