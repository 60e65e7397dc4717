"""Every bundle the Spark runner runs has a name a replay reproduces: for exactly-once sinks.

A name is the run (stable across a restart from the run's checkpoint), the micro-batch (0 in
batch), the fused stage, the Spark partition and the bundle's number in its task. A
deterministic replay (Spark retrying a task, a batch replayed from the checkpoint with its
logged plan and clock) runs the same bundles, with the same input, under the same names; so a
sink can recognise a bundle it has already committed and not write it again
(``transforms/kafka/write.py``'s exactly-once mode does, with Kafka transactions).

While a bundle runs, its name is in the worker's environment variable
:data:`ENVIRONMENT_VARIABLE`, as JSON, so a DoFn reads it without importing the runner:

>>> with BundleNamer(run="run-1", batch=4, stage="Write").bundle(partition=1):
...     json.loads(os.environ[ENVIRONMENT_VARIABLE])
{'run': 'run-1', 'batch': 4, 'stage': 'Write', 'partition': 1, 'bundle': 0}
>>> ENVIRONMENT_VARIABLE in os.environ
False
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Iterator, Optional

#: The environment variable that names the running bundle.
ENVIRONMENT_VARIABLE = "BEAM_SPARK_BUNDLE"


class BundleNamer:
    """Names the bundles of one stage in one micro-batch (picklable: tasks get it).

    Args:
      run: the run's name (the checkpoint's, when the run checkpoints).
      batch: the micro-batch (0 in batch).
      stage: the fused stage's name.
    """

    def __init__(self, run: str, batch: int, stage: str) -> None:
        self.run = run
        self.batch = batch
        self.stage = stage
        self._next = 0

    @contextlib.contextmanager
    def bundle(self, partition: Optional[int] = None) -> Iterator[None]:
        """Name the next bundle of this task while it runs (``partition``: the task's Spark
        partition; by default, Spark's task context says)."""
        if partition is None:
            partition = _task_partition()
        name = {"run": self.run, "batch": self.batch, "stage": self.stage,
                "partition": partition, "bundle": self._next}
        self._next += 1
        previous = os.environ.get(ENVIRONMENT_VARIABLE)
        os.environ[ENVIRONMENT_VARIABLE] = json.dumps(name)
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(ENVIRONMENT_VARIABLE, None)
            else:
                os.environ[ENVIRONMENT_VARIABLE] = previous


def _task_partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0
