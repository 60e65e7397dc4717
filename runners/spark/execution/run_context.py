"""What every pass of one run shares: the backend, the plan, the run's name, cancellation, and
per-run caches (the broadcast components and large stage descriptors)."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from typing import Any, Dict, List, Optional

from runners.spark.backends.base import Backend, Dataset, JobNames, RunMetrics
from runners.spark.dependencies.worker import JobEnvironment
from runners.spark.planning.execution_plan import ExecutionPlan, StageSpec
from runners.spark.worker.bundles import StageTask
from runners.spark.worker.components import SharedComponents
from runners.spark.worker.replay_names import BundleNamer

#: Stage descriptors larger than this are broadcast instead of shipped with every task
#: (they carry the stage's pickled DoFns, which can hold large objects).
BROADCAST_DESCRIPTOR_BYTES = 256 << 10


class RunCancelled(RuntimeError):
    """The run was cancelled before it could start its next Spark job."""


@dataclasses.dataclass
class RunContext:
    """What every pass of one run shares: Spark, the plan, and per-run caches.

    Args:
      backend: how the run reaches Spark (:mod:`runners.spark.backends`).
      plan: the fused stages.
      metrics: the run's metrics (its tasks report to ``metrics.sink``).
      parallelism: partitions of every shuffle (key partitions of keyed steps).
      bundle_size: at most this many elements per bundle, or None (a partition per bundle).
      environment: what the pipeline staged for its workers (packages, main session).
    """

    backend: Backend
    plan: ExecutionPlan
    metrics: RunMetrics
    parallelism: int
    bundle_size: Optional[int]
    environment: JobEnvironment = dataclasses.field(default_factory=JobEnvironment)
    components: Optional[SharedComponents] = None
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)
    jobs: int = 0  # Spark jobs this run started
    #: the run's name in its bundles' names (stable across a restart from a checkpoint)
    run_name: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:16])
    #: this execution's own identity (never restored, unlike ``run_name``): the workers reuse
    #: a processor only for tasks of the run it was built for (:mod:`runners.spark.worker.bundles`)
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)
    batch: int = 0  # the micro-batch being built (0 in batch)
    #: what Spark's tools call the run's jobs and stages, and the tag cancelling it cancels
    names: Optional[JobNames] = None
    _descriptors: Dict[int, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.names is None:
            self.names = self.backend.job_names(f"beam-{uuid.uuid4().hex}")

    def start(self) -> None:
        self.components = SharedComponents.create(self.backend, self.plan.components)

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise RunCancelled("the pipeline was cancelled")

    def before_job(self) -> None:
        """Call before each Spark job: refuses once cancelled, and counts the job."""
        self.check_cancelled()
        self.jobs += 1

    def collect(self, dataset: Dataset) -> List[Any]:
        """Run a Spark job: the records of ``dataset`` on the driver (the metric updates
        among them go to the run's metrics)."""
        self.before_job()
        return self.metrics.take(self.backend.collect(dataset))

    def stage_task(self, stage: StageSpec, side_inputs: Any = None) -> StageTask:
        """What a task needs to run ``stage``; a large descriptor is broadcast once a run."""
        descriptor = None
        if len(stage.descriptor) > BROADCAST_DESCRIPTOR_BYTES:
            if stage.index not in self._descriptors:
                self._descriptors[stage.index] = self.backend.broadcast(stage.descriptor)
            descriptor = self._descriptors[stage.index]
        return StageTask(stage, self.components, side_inputs, self.metrics.sink,
                         self.bundle_size, descriptor,
                         BundleNamer(self.run_name, self.batch, stage.name), self.environment,
                         run=self.run_id)

    def release(self) -> None:
        for broadcast in self._descriptors.values():
            broadcast.unpersist()
        self._descriptors = {}
        if self.components is not None:
            self.components.release()
