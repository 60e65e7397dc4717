"""SparkRunner: runs a Beam pipeline on the Spark that pyspark provides (batch, streaming).

``run_pipeline`` plans first (portable proto, checks, fusion): a pipeline the runner cannot
run fails there, naming the transform and the reason, before any Spark job starts. It then
starts the plan on Spark and returns a :class:`SparkPipelineResult` at once.

Spark is reached through a backend (:mod:`runners.spark.backends`): classic Spark (a
SparkContext: ``--spark_master_url``, or one that runs already) or Spark Connect
(``--spark_remote sc://host:port``, ``SPARK_REMOTE``, or a Connect session handed to
``SparkRunner(spark)``). The engine is the same on both.

On a cluster the executors need only Python and the project's third-party dependencies:
the project's own packages are shipped with the job (:mod:`~runners.spark.dependencies.
project`), and so is what the pipeline stages with Beam's ``--requirements_file``,
``--extra_package``, ``--setup_file`` and ``--save_main_session``
(:mod:`~runners.spark.dependencies.staging`). Relative file paths in a pipeline mean the
driver's working directory as it is when the pipeline runs, as on the DirectRunner: the
tasks run there, and where the workers do not see it a pipeline naming one is refused
before it starts (:mod:`~runners.spark.dependencies.working_directory`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import signal
import threading
from typing import Any, Optional, Sequence, Tuple

#: Why the runner cannot be imported in an environment without PySpark, and what to install.
NO_PYSPARK = (
    "the SparkRunner needs PySpark, which is not installed here. Install the project with "
    "the full PySpark, for classic Spark and Spark Connect: pip install "
    "'beam-spark-dataflow[spark]'; or with PySpark's thin Spark Connect client: pip install "
    "'beam-spark-dataflow[connect]' (pyspark-client); a Databricks Connect environment has "
    "its own pyspark already.")
if importlib.util.find_spec("pyspark") is None:  # before the engine, which imports pyspark
    raise ImportError(NO_PYSPARK, name="pyspark")

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineRunner

from runners.spark import backends
from runners.spark import options as spark_options
from runners.spark.backends.base import Backend
from runners.spark.dependencies import staging, working_directory
from runners.spark.dependencies.worker import JobEnvironment
from runners.spark.execution.batch import PlanExecution
from runners.spark.execution.result import ProgressListener, SparkPipelineResult
from runners.spark.planning import execution_plan, support
from runners.spark.state.storage.faults import take_retries
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.update import NameMapping
from runners.spark.streaming.loop import StreamingExecution

_LOGGER = logging.getLogger(__name__)

#: The Beam version whose Reshuffle keeps pane info (see ``execution_plan.plan``).
RESHUFFLE_KEEPS_PANES_SINCE = "2.65.0"

class SparkRunner(PipelineRunner):
    """Executes Beam pipelines on Apache Spark through PySpark, in batch and in streaming
    (``--streaming``: a micro-batch loop, see :mod:`runners.spark.streaming`).

    Args:
      spark: a SparkSession (classic or Spark Connect) or SparkContext to run on. Without
        one, the runner connects to ``--spark_remote`` (or ``SPARK_REMOTE``) with Spark
        Connect, or uses the process's running SparkContext, or creates one from the
        pipeline options (``--spark_master_url``, ``--spark_conf``; see
        :mod:`runners.spark.options`). A session of your own should set
        ``spark.python.daemon.module`` to ``runners.spark.daemon`` (workers start with Beam
        imported, seconds faster) and run executors on an interpreter that imports Beam and
        your pipeline's modules.
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
        self._spark = spark
        self._progress_listeners = list(progress_listeners)

    def run_pipeline(self, pipeline, options: PipelineOptions) -> SparkPipelineResult:
        return self._run(execution_plan.pipeline_proto(pipeline, options), options,
                         stage_dependencies=True,
                         relative_paths=working_directory.relative_paths(pipeline))

    def run_portable_pipeline(
        self, proto: Any, options: PipelineOptions,
        environment: JobEnvironment = JobEnvironment(),
    ) -> SparkPipelineResult:
        """Run a portable pipeline proto (``beam_runner_api_pb2.Pipeline``), e.g. one a job
        server received; its environments must already be ones this process can execute,
        and what it staged already shipped (the job server does both, and names the shipped
        files in ``environment``)."""
        return self._run(proto, options, stage_dependencies=False, environment=environment)

    def backend(self, options: PipelineOptions) -> Backend:
        """How this runner reaches Spark for a pipeline with ``options`` (the session given
        to the runner, or one the options name; see :mod:`runners.spark.backends`)."""
        return backends.open_backend(self._spark, options)

    def _run(self, proto: Any, options: PipelineOptions, stage_dependencies: bool,
             environment: JobEnvironment = JobEnvironment(),
             relative_paths: Sequence[Tuple[str, str]] = ()) -> SparkPipelineResult:
        view = spark_options.validated(options)
        streaming = support.runs_in_streaming(proto, options, log_mode=True)
        support.check_supported(proto, streaming)
        if view.checkpoint_dir and not streaming:
            raise ValueError(f"--checkpoint_dir={view.checkpoint_dir}: checkpoints are for "
                             "--streaming runs (a batch run restarts from its input)")
        take_retries()  # the storage retries of this process's earlier runs are not this one's
        checkpoint_storage = (DurableStorage.open(view.checkpoint_dir, options,
                                                  retry_seconds=view.storage_retry_seconds)
                              if view.checkpoint_dir else None)
        plan = execution_plan.plan(proto, streaming=streaming, native_reshuffle=not (
            options.is_compat_version_prior_to(RESHUFFLE_KEEPS_PANES_SINCE)),
            chain_steps=view.chain_simple_steps, text_io=view.bulk_text_io,
            driver_stages=view.write_stages_in_driver)
        backend = self.backend(options)
        # Relative paths mean the driver's working directory as it is now, at the start.
        directory = os.getcwd()
        driver_directory = working_directory.DriverDirectory(
            directory, backend.sees_directory(directory))
        working_directory.check_relative_paths(relative_paths, driver_directory,
                                               backend.describe())
        if stage_dependencies:
            shipped = staging.stage_for_executors(backend, options)
            if shipped is not None:
                environment = shipped.environment()
        environment = dataclasses.replace(environment, working_directory=driver_directory)
        metrics = backend.run_metrics()
        parallelism = view.spark_parallelism or backend.default_parallelism
        if streaming:
            execution = StreamingExecution(
                backend, plan, metrics, parallelism, view.bundle_size,
                batch_interval=view.batch_interval_seconds, max_batches=view.max_batches,
                timeout=view.streaming_timeout_seconds, report_path=view.streaming_report,
                checkpoint_storage=checkpoint_storage,
                checkpoint_interval=view.checkpoint_interval_batches,
                compact_rounds=view.streaming_compact_rounds,
                name_mapping=NameMapping.of(
                    options.get_all_options().get("transform_name_mapping")),
                environment=environment, requested_parallelism=view.spark_parallelism)
        else:
            execution = PlanExecution(
                backend, plan, metrics, parallelism=parallelism,
                bundle_size=view.bundle_size, environment=environment)
        result = SparkPipelineResult(backend, execution, metrics)
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
