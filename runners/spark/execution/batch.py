"""Executing an execution plan on Spark in batch (driver side).

A batch run is one pass over the plan's stages (:class:`~runners.spark.execution.stage_pass.
StageGraph`): every stage a dataset of the run's backend, and one Spark job at the end that
evaluates the stages nobody reads (sinks, ``assert_that``); jobs before it only collect side
inputs. What is
batch's own is how keyed steps run:

* a GroupByKey groups every element of a key at once and hands them to Beam's trigger driver
  (:func:`runners.spark.execution.shuffle.group_by_key`);
* a stateful stage's input is partitioned by key, and each task runs its keys' elements with
  a fresh state store (state lives as long as the task: the input is complete);
* WriteImpl's one-element stages of Beam's own file sinks run in the driver when the workers
  run beside it (:mod:`runners.spark.text_io.sink_stages`), a Spark job each saved.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Iterator, Optional

from runners.spark.backends.base import Backend, Dataset, RunMetrics
from runners.spark.dependencies.worker import JobEnvironment
from runners.spark.execution import shuffle
from runners.spark.execution.run_context import RunCancelled, RunContext
from runners.spark.execution.stage_pass import StageGraph
from runners.spark.planning.execution_plan import ExecutionPlan, GroupSpec, StageSpec
from runners.spark.worker.bundles import StageTask, process_partition

__all__ = ["PlanExecution", "RunCancelled"]


class BatchGraph(StageGraph):
    """The batch pass: keyed steps over all of their input at once."""

    def runs_in_driver(self, stage: StageSpec) -> bool:
        """A stage planned as ``driver_side``, where every task would run on the driver's
        host in its directory: a local master whose workers see the driver's directory."""
        directory = self.context.environment.working_directory
        return (stage.driver_side and self.backend.single_executor
                and directory is not None and directory.seen)

    def group_dataset(self, buffer_id: bytes, spec: GroupSpec, records: Dataset) -> Dataset:
        return shuffle.group_by_key(records, spec, self.components, self.context.parallelism)

    def keyed_stage_dataset(self, stage: StageSpec, records: Dataset) -> Dataset:
        keyed = shuffle.partition_by_key(records, [spec.coder_id for spec in stage.inputs],
                                         self.components, self.context.parallelism,
                                         stage.key_prefixed)
        task = self.context.stage_task(stage, self.side_input_table(stage))
        return keyed.map_partitions(functools.partial(_keyed_stage_partition, task))


def _keyed_stage_partition(task: StageTask, records: Iterable[Any]) -> Iterator[Any]:
    return process_partition(task, shuffle.without_keys(records))


class PlanExecution:
    """One batch run of an :class:`ExecutionPlan` on Spark.

    Args:
      backend: how the run reaches Spark.
      plan: the fused stages.
      metrics: the run's metrics.
      parallelism: partitions of every shuffle.
      bundle_size: at most this many elements per bundle, or None (a partition per bundle).
      environment: what the pipeline staged for its workers.
    """

    def __init__(self, backend: Backend, plan: ExecutionPlan, metrics: RunMetrics,
                 parallelism: int, bundle_size: Optional[int],
                 environment: JobEnvironment = JobEnvironment()) -> None:
        self.context = RunContext(backend, plan, metrics, parallelism, bundle_size, environment)

    @property
    def plan(self) -> ExecutionPlan:
        return self.context.plan

    def cancel(self) -> None:
        """Start no further Spark job (running ones are cancelled through the run's tag)."""
        self.context.cancelled.set()

    def run(self) -> None:
        """Build every stage's dataset and run the jobs; raises what a task raised."""
        self.context.start()
        BatchGraph(self.context).run_pass()

    def release(self) -> None:
        """Free broadcasts (call when the run has ended, either way)."""
        self.context.release()
