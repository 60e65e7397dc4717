"""What every pass of one run shares: Spark, the plan, the run's name, cancellation, and
per-run caches (the broadcast components and large stage descriptors)."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from typing import Any, Dict, Optional

from runners.spark.bundle_names import BundleNamer
from runners.spark.bundles import StageTask
from runners.spark.components import SharedComponents
from runners.spark.planning import ExecutionPlan, StageSpec
from runners.spark.spark_names import SparkNames

#: Stage descriptors larger than this are broadcast instead of shipped with every task
#: (they carry the stage's pickled DoFns, which can hold large objects).
BROADCAST_DESCRIPTOR_BYTES = 256 << 10


class RunCancelled(RuntimeError):
    """The run was cancelled before it could start its next Spark job."""


@dataclasses.dataclass
class RunContext:
    """What every pass of one run shares: Spark, the plan, and per-run caches.

    Args:
      spark_context: the SparkContext to run on.
      plan: the fused stages.
      metrics: accumulator receiving each task's serialized MonitoringInfos.
      parallelism: partitions of every shuffle (key partitions of keyed steps).
      bundle_size: at most this many elements per bundle, or None (a partition per bundle).
    """

    spark_context: Any
    plan: ExecutionPlan
    metrics: Any
    parallelism: int
    bundle_size: Optional[int]
    components: Optional[SharedComponents] = None
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)
    jobs: int = 0  # Spark jobs this run started
    #: the run's name in its bundles' names (stable across a restart from a checkpoint)
    run_name: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:16])
    batch: int = 0  # the micro-batch being built (0 in batch)
    #: what Spark's UI and event log call the run's jobs and stages
    names: Optional[SparkNames] = None
    _descriptors: Dict[int, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.names is None:
            self.names = SparkNames(self.spark_context, f"beam-{uuid.uuid4().hex}")

    def start(self) -> None:
        self.components = SharedComponents.create(self.spark_context, self.plan.components)

    def check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise RunCancelled("the pipeline was cancelled")

    def before_job(self) -> None:
        """Call before each Spark job: refuses once cancelled, and counts the job."""
        self.check_cancelled()
        self.jobs += 1

    def stage_task(self, stage: StageSpec, side_inputs: Any = None) -> StageTask:
        """What a task needs to run ``stage``; a large descriptor is broadcast once a run."""
        descriptor = None
        if len(stage.descriptor) > BROADCAST_DESCRIPTOR_BYTES:
            if stage.index not in self._descriptors:
                self._descriptors[stage.index] = self.spark_context.broadcast(stage.descriptor)
            descriptor = self._descriptors[stage.index]
        return StageTask(stage, self.components, side_inputs, self.metrics, self.bundle_size,
                         descriptor, BundleNamer(self.run_name, self.batch, stage.name))

    def release(self) -> None:
        for broadcast in self._descriptors.values():
            broadcast.unpersist()
        self._descriptors = {}
        if self.components is not None:
            self.components.release()
