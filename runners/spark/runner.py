"""SparkRunner: runs a Beam pipeline on the Spark that pyspark provides (batch, streaming).

``run_pipeline`` plans first (portable proto, checks, fusion): a pipeline the runner cannot
run fails there, naming the transform and the reason, before any Spark job starts. It then
starts the plan on a SparkContext and returns a :class:`SparkPipelineResult` at once.

On a cluster master the executors need only Python and the project's third-party
dependencies: the project's own packages are shipped with the job
(:mod:`~runners.spark.dependencies.project`), and so is what the pipeline stages with Beam's
``--requirements_file``, ``--extra_package``, ``--setup_file`` and ``--save_main_session``
(:mod:`~runners.spark.dependencies.staging`). A SparkContext that already runs
(``spark-submit``, a session of the user's) is used as it is.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any, Optional, Sequence

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner
from pyspark import SparkConf, SparkContext

from runners.spark import options as spark_options
from runners.spark import planning, support
from runners.spark.dependencies import project, staging
from runners.spark.execution import PlanExecution
from runners.spark.metrics import MonitoringInfoAccumulator
from runners.spark.result import ProgressListener, SparkPipelineResult
from runners.spark.streaming.loop import StreamingExecution
from runners.spark.streaming.storage import DurableStorage
from runners.spark.streaming.update import NameMapping

_LOGGER = logging.getLogger(__name__)

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
      progress_listeners: streaming: called after every micro-batch with its progress
        (see :meth:`SparkPipelineResult.add_listener`).

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

    def __init__(self, spark: Optional[Any] = None,
                 progress_listeners: Sequence[ProgressListener] = ()) -> None:
        super().__init__()
        self._spark_context = getattr(spark, "sparkContext", spark)
        self._progress_listeners = list(progress_listeners)

    def run_pipeline(self, pipeline, options: PipelineOptions) -> SparkPipelineResult:
        return self._run(planning.pipeline_proto(pipeline, options), options,
                         stage_dependencies=True)

    def run_portable_pipeline(
        self, proto: Any, options: PipelineOptions
    ) -> SparkPipelineResult:
        """Run a portable pipeline proto (``beam_runner_api_pb2.Pipeline``), e.g. one a job
        server received; its environments must already be ones this process can execute,
        and what it staged already shipped (the job server does both)."""
        return self._run(proto, options, stage_dependencies=False)

    def _run(self, proto: Any, options: PipelineOptions,
             stage_dependencies: bool) -> SparkPipelineResult:
        view = spark_options.validated(options)
        streaming = support.runs_in_streaming(proto, options, log_switch=True)
        support.check_supported(proto, streaming)
        if view.checkpoint_dir and not streaming:
            raise ValueError(f"--checkpoint_dir={view.checkpoint_dir}: checkpoints are for "
                             "--streaming runs (a batch run restarts from its input)")
        checkpoint_storage = (DurableStorage.open(view.checkpoint_dir, options)
                              if view.checkpoint_dir else None)
        plan = planning.plan(proto, streaming=streaming, native_reshuffle=not (
            options.is_compat_version_prior_to(RESHUFFLE_KEEPS_PANES_SINCE)))
        spark_context = self._context(options)
        if stage_dependencies:
            staging.stage_for_executors(spark_context, options)
        accumulator = spark_context.accumulator([], MonitoringInfoAccumulator())
        parallelism = view.spark_parallelism or spark_context.defaultParallelism
        if streaming:
            execution = StreamingExecution(
                spark_context, plan, accumulator, parallelism, view.bundle_size,
                batch_interval=view.batch_interval_seconds, max_batches=view.max_batches,
                timeout=view.streaming_timeout_seconds, report_path=view.streaming_report,
                checkpoint_storage=checkpoint_storage,
                checkpoint_interval=view.checkpoint_interval_batches,
                compact_rounds=view.streaming_compact_rounds,
                name_mapping=NameMapping.of(
                    options.get_all_options().get("transform_name_mapping")))
        else:
            execution = PlanExecution(
                spark_context, plan, accumulator, parallelism=parallelism,
                bundle_size=view.bundle_size)
        result = SparkPipelineResult(spark_context, execution, accumulator)
        if streaming:
            for listener in self._progress_listeners:
                result.add_listener(listener)
            if view.on_signal == "drain":
                if threading.current_thread() is threading.main_thread():
                    result.drain_on_signal(signal.SIGTERM)
                else:
                    _LOGGER.warning("--on_signal=drain: the pipeline was not run from the "
                                    "main thread, where Python handles signals; drain it "
                                    "with result.drain()")
        return result.start()

    def _context(self, options: PipelineOptions) -> Any:
        """The SparkContext to run on: the one given, the one running, or a new one from the
        options; on a cluster, with the project's packages shipped to its executors."""
        if self._spark_context is None and SparkContext._active_spark_context is not None:
            self._spark_context = SparkContext.getOrCreate()
        if self._spark_context is not None:
            if not spark_options.is_local_master(self._spark_context.master):
                project.ship_project(self._spark_context, project.project_archive(),
                                     on_python_path=False)
            return self._spark_context
        settings = spark_options.spark_settings(options)
        archive = None
        if spark_options.is_local_master(settings["spark.master"]):
            settings = {**LOCAL_SETTINGS, **settings}
        else:
            archive = project.project_archive()
            settings["spark.executorEnv.PYTHONPATH"] = project.executor_python_path(
                archive, settings)
            # A streaming job's key partitions stay on the executors that first ran them:
            # the first job waits (up to Spark's 30 s) until every executor asked for is up.
            settings.setdefault("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        # PySpark takes the executors' Python from PYSPARK_PYTHON only: the one a
        # --spark_conf names, else the environment's, else this interpreter.
        named = spark_options.parse_spark_conf(
            options.view_as(spark_options.SparkRunnerOptions).spark_conf)
        python = (named.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
                  or sys.executable)
        settings["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"] = python
        self._spark_context = SparkContext.getOrCreate(SparkConf().setAll(settings.items()))
        if archive is not None:
            project.ship_project(self._spark_context, archive, on_python_path=True)
        return self._spark_context
