"""In batch, a splittable DoFn that defers its remainder with a delay is resumed once the
delay has passed, and the task sleeps meanwhile (``runners.spark.worker.bundles``).

The stages run in this process, as a Spark task runs them in its Python worker
(:func:`~runners.spark.worker.bundles.process_partition`), so the test sees the task's CPU time.
"""

from __future__ import annotations

import time
from typing import List, Tuple

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from runners.spark.beam_internals import ENCODED_IMPULSE_VALUE
from runners.spark.planning import execution_plan
from runners.spark.worker.bundles import StageTask, process_partition
from runners.spark.worker.records import Elements

TICKS = 3
TICK_SECONDS = 0.75
#: (tick, wall clock when the step after PeriodicImpulse got it): this process runs it.
RECEIVED: List[Tuple[float, float]] = []


def _received(tick):
    RECEIVED.append((float(tick), time.time()))


def _run_in_this_process(plan) -> None:
    """Run the plan's stages in order: Impulse -> pair and split -> Reshuffle -> process (the
    Reshuffle keeps its input's coder: its input is the process stage's input)."""
    records = [Elements(0, ENCODED_IMPULSE_VALUE)]
    for stage in plan.stages:
        if stage.kind == execution_plan.RESHUFFLE_STAGE:
            continue
        task = StageTask(stage, None, None, None, None)
        records = [Elements(0, record.data) for record in process_partition(task, iter(records))
                   if type(record) is Elements]


def test_periodic_impulse_ahead_of_the_clock_is_resumed_at_its_fire_times_without_spinning():
    """PeriodicImpulse defers its remainder to its next fire time; Beam's FnApiRunner
    re-runs it at once, again and again until then (a core spinning); the task here sleeps
    until the residual is due."""
    pipeline = beam.Pipeline()
    start = time.time() + 0.5
    _ = (pipeline
         | PeriodicImpulse(start_timestamp=start, stop_timestamp=start + TICKS * TICK_SECONDS,
                           fire_interval=TICK_SECONDS)
         | beam.Map(_received))
    plan = execution_plan.plan(execution_plan.pipeline_proto(pipeline, PipelineOptions()))
    assert [stage.kind for stage in plan.stages] == [
        execution_plan.SDK_STAGE, execution_plan.RESHUFFLE_STAGE, execution_plan.SDK_STAGE]
    RECEIVED.clear()
    cpu = time.process_time()
    _run_in_this_process(plan)
    cpu = time.process_time() - cpu
    assert [tick for tick, _ in RECEIVED] == [
        start + index * TICK_SECONDS for index in range(TICKS)]
    assert all(at >= tick for tick, at in RECEIVED), RECEIVED  # never before its time
    waited = RECEIVED[-1][1] - RECEIVED[0][1]
    assert waited >= (TICKS - 1) * TICK_SECONDS * 0.95, RECEIVED
    # Spinning through the waits takes a core as long as they last (a third of one when
    # measured on a loaded 2-core machine); sleeping, ~2% of them (the three bundles).
    assert cpu < waited / 10, (cpu, waited)
