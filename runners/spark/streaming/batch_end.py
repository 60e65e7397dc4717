"""The end of a micro-batch: one Spark job writes the sinks and reports the deferred steps.

After a keyed step (a GroupByKey or a stateful stage) has run over a batch, the driver needs
its report: the keys' watermark holds, the state's size, how many panes it emitted. A
report costs a Spark job (0.1 to 0.5 s on a small machine, most of a small batch), so it is
collected at once only when a later stage of the *same* batch needs the step's output
watermark: a GroupByKey whose panes reach another GroupByKey, a stateful stage or a
splittable DoFn. Every other step is *deferred*, and reported by the batch's last job, the
one that writes the sinks:

* a stateful stage: it holds no watermark (its output watermark is its input watermark),
  so nothing downstream waits for its report;
* a GroupByKey whose panes only reach sinks (files, Kafka, a test's assertion): its output
  watermark is wanted only once the batch is over.

Each step's result is persisted and locally checkpointed before any job reads it, so the
sinks' writing and the report read one computation (Spark computes a persisted partition
once), and a step's user code runs once per batch, as before.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Dict, List, Set, Tuple

from runners.spark.planning import ExecutionPlan, StageSpec


@dataclasses.dataclass
class DeferredStep:
    """A keyed step that ran this batch and is reported at its end."""

    step: Any  # stages.KeyedStep
    result: Any  # its persisted result RDD
    input_watermark: Any
    holds: bool
    clock: float


class BatchEnd:
    """The sinks to write and the steps to report at the end of one batch.

    >>> end = BatchEnd()
    >>> end.pending()
    False
    """

    def __init__(self) -> None:
        self.sinks: List[Any] = []
        self.steps: List[DeferredStep] = []

    def pending(self) -> bool:
        return bool(self.sinks or self.steps)

    def finish(self, spark_context: Any, report_of: Callable[[Any], Any],
               is_report: Callable[[Any], bool], parallelism: int
               ) -> List[Tuple[DeferredStep, List[Any]]]:
        """Run the batch's last Spark job; returns each deferred step with its reports.

        ``is_report`` picks a step's report records out of its result, ``report_of``
        shrinks each to what the driver needs. The job's partitions are coalesced to
        ``parallelism`` tasks: a Python task costs ~0.1 s however little it does, and the
        union of every sink and step has many small partitions.
        """
        parts = [sink.mapPartitions(_write) for sink in self.sinks]
        parts += [deferred.result.filter(is_report).map(report_of).map(
            functools.partial(_tag, position)) for position, deferred in enumerate(self.steps)]
        reports: Dict[int, List[Any]] = {position: [] for position in range(len(self.steps))}
        if parts:
            union = parts[0] if len(parts) == 1 else spark_context.union(parts)
            if union.getNumPartitions() > parallelism:
                union = union.coalesce(parallelism)
            for position, report in union.collect():
                reports[position].append(report)
        done = [(deferred, reports[position]) for position, deferred in enumerate(self.steps)]
        self.sinks, self.steps = [], []
        return done


def urgent_groups(plan: ExecutionPlan, is_splittable: Callable[[StageSpec], bool]) -> Set[bytes]:
    """The ``group:`` buffers whose GroupByKey must be reported at once: a stage downstream
    of its panes (in the same batch) needs its output watermark."""
    readers: Dict[bytes, List[StageSpec]] = {}
    for stage in plan.stages:
        for spec in stage.inputs:
            readers.setdefault(spec.buffer_id, []).append(stage)

    @functools.lru_cache(maxsize=None)
    def needs_watermark(index: int) -> bool:
        stage = stages[index]
        if stage.keyed or is_splittable(stage):
            return True
        for _, buffer_id in stage.outputs:
            if buffer_id in plan.groups:
                return True
            if any(needs_watermark(reader.index) for reader in readers.get(buffer_id, [])):
                return True
        return False

    stages = {stage.index: stage for stage in plan.stages}
    return {buffer_id for buffer_id in plan.groups
            if any(needs_watermark(reader.index) for reader in readers.get(buffer_id, []))}


def _write(records) -> List[Any]:
    for _ in records:
        pass
    return []


def _tag(position: int, report: Any) -> Tuple[int, Any]:
    return position, report
