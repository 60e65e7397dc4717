"""SparkRunner: runs a Beam pipeline on the Spark that pyspark provides (batch, streaming).

``run_pipeline`` plans first (portable proto, checks, fusion): a pipeline the runner cannot
run fails there, naming the transform and the reason, before any Spark job starts. It then
starts the plan on a SparkContext and returns a :class:`SparkPipelineResult` at once.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner
from pyspark import SparkConf, SparkContext

from runners.spark import options as spark_options
from runners.spark import planning, support
from runners.spark.execution import PlanExecution
from runners.spark.metrics import MonitoringInfoAccumulator
from runners.spark.result import SparkPipelineResult
from runners.spark.streaming.loop import StreamingExecution

#: The Beam version whose Reshuffle keeps pane info (see ``planning.plan``).
RESHUFFLE_KEEPS_PANES_SINCE = "2.65.0"

#: Loopback defaults for local masters: the driver never needs a routable address.
LOCAL_SETTINGS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}


class SparkRunner(PipelineRunner):
    """Executes Beam pipelines on Apache Spark through PySpark, in batch and in streaming
    (``--streaming``: a micro-batch loop, see :mod:`runners.spark.streaming`).

    Args:
      spark: a SparkSession or SparkContext to run on. Without one, the runner uses the
        process's running SparkContext, or creates one from the pipeline options
        (``--spark_master_url``, ``--spark_conf``; see :mod:`runners.spark.options`).
        A session of your own should set ``spark.python.daemon.module`` to
        ``runners.spark.daemon`` (workers start with Beam imported, seconds faster) and
        run executors on an interpreter that imports Beam and your pipeline's modules.

    >>> import apache_beam as beam
    >>> from apache_beam.testing.util import assert_that, equal_to
    >>> with beam.Pipeline(runner=SparkRunner()) as p:  # doctest: +SKIP
    ...     counts = p | beam.Create(["a", "b", "a"]) | beam.combiners.Count.PerElement()
    ...     assert_that(counts, equal_to([("a", 2), ("b", 1)]))
    """

    #: In streaming, a splittable DoFn that offers ``plan_micro_batch`` is asked for each
    #: batch's work by the driver (:mod:`runners.spark.streaming.planned_sources`); sources
    #: may check this when the pipeline is built.
    plans_micro_batches = True

    def __init__(self, spark: Optional[Any] = None) -> None:
        super().__init__()
        self._spark_context = getattr(spark, "sparkContext", spark)

    def run_pipeline(self, pipeline, options: PipelineOptions) -> SparkPipelineResult:
        return self.run_portable_pipeline(planning.pipeline_proto(pipeline, options), options)

    def run_portable_pipeline(
        self, proto: Any, options: PipelineOptions
    ) -> SparkPipelineResult:
        """Run a portable pipeline proto (``beam_runner_api_pb2.Pipeline``), e.g. one a job
        server received; its environments must already be ones this process can execute."""
        view = spark_options.validated(options)
        streaming = support.runs_in_streaming(proto, options, log_switch=True)
        support.check_supported(proto, streaming)
        if view.checkpoint_dir and not streaming:
            raise ValueError(f"--checkpoint_dir={view.checkpoint_dir}: checkpoints are for "
                             "--streaming runs (a batch run restarts from its input)")
        plan = planning.plan(proto, streaming=streaming, native_reshuffle=not (
            options.is_compat_version_prior_to(RESHUFFLE_KEEPS_PANES_SINCE)))
        spark_context = self._context(options)
        accumulator = spark_context.accumulator([], MonitoringInfoAccumulator())
        parallelism = view.spark_parallelism or spark_context.defaultParallelism
        if streaming:
            execution = StreamingExecution(
                spark_context, plan, accumulator, parallelism, view.bundle_size,
                batch_interval=view.batch_interval_seconds, max_batches=view.max_batches,
                timeout=view.streaming_timeout_seconds, report_path=view.streaming_report,
                checkpoint_dir=view.checkpoint_dir,
                checkpoint_interval=view.checkpoint_interval_batches)
        else:
            execution = PlanExecution(
                spark_context, plan, accumulator, parallelism=parallelism,
                bundle_size=view.bundle_size)
        return SparkPipelineResult(spark_context, execution, accumulator).start()

    def _context(self, options: PipelineOptions) -> Any:
        if self._spark_context is None:
            settings = spark_options.spark_settings(options)
            if settings["spark.master"].startswith("local"):
                settings = {**LOCAL_SETTINGS, **settings}
            # Executors must run this interpreter (Beam, the project) whatever the conf says.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._spark_context = SparkContext.getOrCreate(SparkConf().setAll(settings.items()))
        return self._spark_context
