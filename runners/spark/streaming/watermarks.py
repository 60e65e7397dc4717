"""Watermarks of a streaming run (driver side), as Beam's DirectRunner computes them.

A stage's input watermark is the minimum of its input buffers' watermarks; its output
watermark is its input watermark, except:

* a TestStream's: what its events set (:mod:`~runners.spark.streaming.test_stream`);
* a keyed step's (GroupByKey, stateful stage): ``min(input watermark, holds)``, kept by its
  :class:`~runners.spark.streaming.keyed_step.KeyedStep`, which moves its input watermark
  only when the step runs or is skipped in a batch;
* a splittable DoFn's: ``min(input watermark, its residuals' watermarks)``, never moving back
  (:mod:`~runners.spark.streaming.unbounded`);
* a stage holding main elements until their side inputs are ready: its input watermark is
  held at the earliest of them (pending input, as the DirectRunner holds a blocked bundle's),
  and its output never moves back (:mod:`~runners.spark.streaming.side_input_readiness`).

A buffer's watermark is the minimum over the stages that write it; the impulse is at the
beginning of time until the first batch has read it, then at the end.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from runners.spark.beam_internals import IMPULSE_BUFFER
from runners.spark.planning.execution_plan import TEST_STREAM_STAGE, ExecutionPlan, StageSpec
from runners.spark.streaming.keyed_step import KeyedStep
from runners.spark.streaming.side_input_readiness import HeldElementsStore
from runners.spark.streaming.unbounded import CarriedResiduals


class Watermarks:
    """Every buffer's and stage's watermark, recomputed by :meth:`refresh`.

    Args:
      plan: the run's stages, in topological order.
      steps: the keyed steps: a GroupByKey's by its ``group:`` buffer id, a stateful stage's
        by its index.
      residuals: the splittable DoFns' carried residuals.
      held: main elements held for their side inputs (None: none are).
    """

    def __init__(self, plan: ExecutionPlan, steps: Dict[Any, KeyedStep],
                 residuals: CarriedResiduals, held: Optional[HeldElementsStore] = None) -> None:
        self.plan = plan
        self.steps = steps
        self.residuals = residuals
        self.held = held or HeldElementsStore()
        self.sources: Dict[bytes, Timestamp] = {}  # TestStream buffers
        self.impulse_done = False
        self.stage_inputs: Dict[int, Timestamp] = {}
        self.stage_outputs: Dict[int, Timestamp] = {}
        self._writers: Dict[bytes, list] = {}
        for stage in plan.stages:
            for _, buffer_id in stage.outputs:
                self._writers.setdefault(buffer_id, []).append(stage.index)

    def buffer(self, buffer_id: bytes) -> Timestamp:
        if buffer_id == IMPULSE_BUFFER:
            return MAX_TIMESTAMP if self.impulse_done else MIN_TIMESTAMP
        if buffer_id in self.plan.groups:
            step = self.steps.get(buffer_id)
            return step.output_watermark if step is not None else MIN_TIMESTAMP
        if buffer_id in self.sources:
            return self.sources[buffer_id]
        return min((self.stage_outputs.get(index, MIN_TIMESTAMP)
                    for index in self._writers.get(buffer_id, [])), default=MAX_TIMESTAMP)

    def group_input(self, buffer_id: bytes) -> Timestamp:
        """The input watermark of a GroupByKey: what its buffer's writers output."""
        return min((self.stage_outputs.get(index, MIN_TIMESTAMP)
                    for index in self._writers.get(buffer_id, [])), default=MAX_TIMESTAMP)

    def stage_input(self, stage: StageSpec) -> Timestamp:
        """The minimum of the stage's input buffers' watermarks and of the main elements it
        holds for its side inputs."""
        buffers = min((self.buffer(spec.buffer_id) for spec in stage.inputs),
                      default=MAX_TIMESTAMP)
        return min(buffers, self.held.hold(stage.index)) if stage.side_inputs else buffers

    def refresh(self) -> None:
        """Recompute every stage's watermarks from the sources and the steps' state."""
        for stage in self.plan.stages:
            if stage.kind == TEST_STREAM_STAGE:
                output = min((self.sources.get(buffer_id, MIN_TIMESTAMP)
                              for _, buffer_id in stage.outputs), default=MAX_TIMESTAMP)
                self.stage_inputs[stage.index] = output
                self.stage_outputs[stage.index] = output
                continue
            input_watermark = self.stage_input(stage)
            self.stage_inputs[stage.index] = input_watermark
            step = self.steps.get(stage.index)
            if step is not None:
                output = step.output_watermark
            elif self.residuals.reads(stage):
                previous = self.stage_outputs.get(stage.index, MIN_TIMESTAMP)
                output = max(previous, min(input_watermark, self.residuals.hold(stage.index)))
            elif stage.side_inputs:  # a held element may be behind what already passed
                output = max(self.stage_outputs.get(stage.index, MIN_TIMESTAMP), input_watermark)
            else:
                output = input_watermark
            self.stage_outputs[stage.index] = output

    def final(self) -> bool:
        """Every stage's and every keyed step's output watermark at the end of time."""
        return (all(watermark >= MAX_TIMESTAMP for watermark in self.stage_outputs.values())
                and all(step.output_watermark >= MAX_TIMESTAMP for step in self.steps.values()))

    def splittable(self) -> Dict[str, "tuple[Timestamp, Timestamp]"]:
        """{splittable DoFn name: (input watermark, output watermark)}."""
        found = {}
        for stage in self.plan.stages:
            name: Optional[str] = (self.residuals.name_of(stage.index)
                                   if self.residuals.reads(stage) else None)
            if name is not None:
                found[name] = (self.stage_inputs.get(stage.index, MIN_TIMESTAMP),
                               self.stage_outputs.get(stage.index, MIN_TIMESTAMP))
        return found

    # ----- checkpoints
    def snapshot(self) -> Dict[str, Any]:
        names = {stage.index: stage.name for stage in self.plan.stages}
        return {"impulse_done": self.impulse_done,
                "sources": {buffer_id: watermark.micros
                            for buffer_id, watermark in self.sources.items()},
                "stage_outputs": {names[index]: watermark.micros
                                  for index, watermark in self.stage_outputs.items()}}

    def restore(self, snapshot: Dict[str, Any]) -> None:
        indexes = {stage.name: stage.index for stage in self.plan.stages}
        self.impulse_done = snapshot["impulse_done"]
        self.sources = {buffer_id: Timestamp(micros=micros)
                        for buffer_id, micros in snapshot["sources"].items()}
        self.stage_outputs = {indexes[name]: Timestamp(micros=micros)
                              for name, micros in snapshot["stage_outputs"].items()}
