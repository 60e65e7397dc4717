"""Job and stage names on classic Spark: job descriptions, job groups and call sites.

Spark's UI, its event log and the history server show a job by its description
(``spark.job.description``, else the call site of its action) and a stage by a call site:
a result stage by its job's, a shuffle map stage by the one where its shuffle's input RDD
was created. PySpark takes call sites from the Python stack, which inside the runner's
thread gives every job and stage the same name, ``copy_local_properties at threading.py``.
:class:`ClassicJobNames` names them instead:

* every job of a streaming run is in the job group of its micro-batch
  (``<run>-batch-000012``), and every job of a run carries the run's job tag, which is what
  cancelling the run cancels;
* a job's description names the micro-batch and what the job does (``Beam micro-batch 12:
  round 40: run Parse, Sum/GroupByKey, ...``: rounds are numbered across the run);
* a stage's name lists the fused Beam steps it runs (a shuffle map stage also the step it
  shuffles for: ``Beam: Parse + Sum/GroupByKey/Write -> Sum/GroupByKey``; see
  :func:`runners.spark.backends.stage_labels.stage_label`).

Call sites are Spark local properties of the calling thread (``callSite.short``,
``callSite.long``), so runs in several threads keep their own. PySpark's actions set their
own call site only when no other PySpark call is under way in the process
(``SCCallSiteSync``'s depth), so :meth:`ClassicJobNames.call_site` counts as one.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Sequence

from pyspark.traceback_utils import SCCallSiteSync

from runners.spark.backends.base import JobNames
from runners.spark.backends.stage_labels import MAX_SHORT_NAME, stage_label

#: Spark's local properties for a call site (``org.apache.spark.util.CallSite``).
SHORT_CALL_SITE = "callSite.short"
LONG_CALL_SITE = "callSite.long"


class ClassicJobNames(JobNames):
    """Names the jobs and stages one run starts (see the module docstring).

    Args:
      spark_context: the run's SparkContext (used from the run's thread).
      run_tag: the run's job tag (also the prefix of its micro-batches' job groups).
    """

    def __init__(self, spark_context: Any, run_tag: str) -> None:
        super().__init__(run_tag)
        self.sc = spark_context

    def start_run(self) -> None:
        """Tag every job the calling thread starts with the run's tag, and put them in the
        run's job group until a micro-batch starts."""
        self.sc.addJobTag(self.run_tag)
        self.sc.setJobGroup(self.run_tag, self.scope, interruptOnCancel=True)

    def start_batch(self, batch: int) -> None:
        """Put the jobs that follow in micro-batch ``batch``'s job group."""
        super().start_batch(batch)
        self.sc.setJobGroup(f"{self.run_tag}-batch-{batch:06d}", self.scope,
                            interruptOnCancel=True)

    @contextlib.contextmanager
    def job(self, what: str, steps: Sequence[str] = ()) -> Iterator[None]:
        description = f"{self.scope}: {what}"
        label = stage_label(steps) if steps else f"Beam: {what}"[:MAX_SHORT_NAME]
        previous = self.sc.getLocalProperty("spark.job.description")
        self.sc.setJobDescription(description)
        try:
            with self.call_site(label, "\n".join([description, *steps])):
                yield
        finally:
            self.sc.setJobDescription(previous)

    @contextlib.contextmanager
    def call_site(self, short: str, long: Optional[str] = None) -> Iterator[None]:
        """The call site of every RDD created, and every action run, inside."""
        previous = (self.sc.getLocalProperty(SHORT_CALL_SITE),
                    self.sc.getLocalProperty(LONG_CALL_SITE))
        with SCCallSiteSync(self.sc):
            self.sc.setLocalProperty(SHORT_CALL_SITE, short)
            self.sc.setLocalProperty(LONG_CALL_SITE, long or short)
            try:
                yield
            finally:
                self.sc.setLocalProperty(SHORT_CALL_SITE, previous[0])
                self.sc.setLocalProperty(LONG_CALL_SITE, previous[1])
