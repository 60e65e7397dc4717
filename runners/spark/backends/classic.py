"""Classic Spark: the engine's datasets as RDDs, on a SparkContext.

Stages are ``mapPartitions`` over RDDs of pickled records (PySpark pipelines successive
ones into one Python pass); shuffles are ``partitionBy`` and ``groupByKey``; values reach
tasks as broadcast variables; task metrics as an accumulator; jobs are named by job
descriptions and call sites (:mod:`~runners.spark.backends.classic_names`) and cancelled
by job tag; a keyed partition's task is placed by a persisted anchor RDD it is zipped with
(:mod:`~runners.spark.backends.classic_affinity`).

The runner makes its own SparkContext from the pipeline options (:meth:`ClassicBackend.
create`), or uses one that runs already (``spark-submit``, a session of the user's).

>>> ClassicBackend.kind
'classic'
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple

from apache_beam.options.pipeline_options import PipelineOptions
from py4j.clientserver import ClientServer
from pyspark import Broadcast as SparkBroadcast
from pyspark import SparkConf, SparkContext
from pyspark.accumulators import AccumulatorParam

from runners.spark import options as spark_options
from runners.spark.backends.base import (
    Backend,
    Broadcast,
    Dataset,
    JobNames,
    MetricsSink,
    PartitionAffinity,
    RunMetrics,
)
from runners.spark.backends.classic_affinity import AnchoredAffinity
from runners.spark.backends.classic_dataset import ClassicDataset, identity, keyed_by_partition
from runners.spark.backends.classic_names import ClassicJobNames
from runners.spark.dependencies import project
from runners.spark.worker.metrics import pack, unpack

#: Loopback defaults for local masters: the driver never needs a routable address.
LOCAL_SETTINGS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}

Broadcast.register(SparkBroadcast)

#: (application id, directory) -> whether the application's workers see the directory.
_SEEN_DIRECTORIES: Dict[Tuple[str, str], bool] = {}


class MonitoringInfoAccumulator(AccumulatorParam):
    """Accumulates serialized MonitoringInfos; merged into one list per run on the driver."""

    def zero(self, value: List[bytes]) -> List[bytes]:
        return []

    def addInPlace(self, value1: List[bytes], value2: List[bytes]) -> List[bytes]:
        value1.extend(value2)
        # Keep the driver-side list short: consolidate once it grows.
        if len(value1) > 4096:
            value1[:] = pack(unpack(value1))
        return value1


class AccumulatorSink(MetricsSink):
    """Tasks add their metrics to the run's accumulator (Spark counts successful tasks)."""

    def __init__(self, accumulator: Any) -> None:
        self.accumulator = accumulator

    def report(self, packed: List[bytes]) -> Iterable[Any]:
        self.accumulator.add(packed)
        return ()


class AccumulatedMetrics(RunMetrics):
    """A run's metrics in a Spark accumulator: readable while the run goes on."""

    def __init__(self, spark_context: Any) -> None:
        self._accumulator = spark_context.accumulator([], MonitoringInfoAccumulator())
        self._sink = AccumulatorSink(self._accumulator)

    @property
    def sink(self) -> MetricsSink:
        return self._sink

    def add(self, packed: List[bytes]) -> None:
        self._accumulator.add(packed)

    @property
    def value(self) -> List[bytes]:
        return list(self._accumulator.value)


def _spark_submits_driver() -> bool:
    """Whether this process is a driver spark-submit started: spark-submit hands it its JVM
    through ``PYSPARK_GATEWAY_PORT``."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


class ClassicBackend(Backend):
    """The engine on a SparkContext (see the module docstring).

    Args:
      spark_context: the SparkContext to run on.
    """

    kind = "classic"

    def __init__(self, spark_context: Any) -> None:
        self.spark_context = spark_context

    @classmethod
    def create(cls, options: PipelineOptions) -> "ClassicBackend":
        """The process's running SparkContext, or a new one from the pipeline options
        (``--spark_master_url``, ``--spark_conf``); on a cluster, with the project's packages
        on the executors' Python path."""
        if SparkContext._active_spark_context is not None:
            backend = cls(SparkContext.getOrCreate())
            backend.ship_project()
            return backend
        if _spark_submits_driver() and not spark_options.explicit_master_url(options):
            # spark-submit's --master, --name and --conf are the session's (Spark reads them
            # from the JVM spark-submit started): the pipeline's --spark_conf only adds to
            # them, and the project ships as to a session of the user's.
            named = spark_options.parse_spark_conf(
                options.view_as(spark_options.SparkRunnerOptions).spark_conf)
            backend = cls(SparkContext.getOrCreate(SparkConf().setAll(named.items())))
            backend.ship_project()
            return backend
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
        spark_context = SparkContext.getOrCreate(SparkConf().setAll(settings.items()))
        if archive is not None:
            project.ship_project(spark_context, archive, on_python_path=True)
        return cls(spark_context)

    @property
    def default_parallelism(self) -> int:
        return self.spark_context.defaultParallelism

    @property
    def single_executor(self) -> bool:
        return spark_options.is_local_master(self.spark_context.master)

    def source(self, records: Sequence[Any], partitions: int = 1) -> ClassicDataset:
        return ClassicDataset(self.spark_context.parallelize(list(records), partitions))

    def empty(self) -> ClassicDataset:
        return ClassicDataset(self.spark_context.emptyRDD())

    def union(self, datasets: Sequence[Dataset]) -> ClassicDataset:
        if len(datasets) == 1:
            return datasets[0]
        return ClassicDataset(self.spark_context.union([dataset.rdd for dataset in datasets]))

    def compute_once(self, dataset: Dataset) -> ClassicDataset:
        """Written once to shuffle files that every reader reads (each partition becomes the
        same partition of a shuffle): a persisted RDD would be computed once too, but its
        readers, sibling stages of one job, race for its blocks (Spark then logs "Block ...
        already exists" as a second task waits for the first to store it)."""
        rdd = dataset.rdd
        partitions = rdd.getNumPartitions()
        if not partitions:
            return dataset
        return ClassicDataset(rdd.mapPartitionsWithIndex(keyed_by_partition)
                              .partitionBy(partitions, identity).values())

    def collect(self, dataset: Dataset) -> List[Any]:
        return dataset.rdd.collect()

    def broadcast(self, value: Any) -> Broadcast:
        return self.spark_context.broadcast(value)

    def run_metrics(self) -> RunMetrics:
        return AccumulatedMetrics(self.spark_context)

    def job_names(self, run_tag: str) -> JobNames:
        return ClassicJobNames(self.spark_context, run_tag)

    def cancel(self, run_tag: str) -> None:
        self.spark_context.cancelJobsWithTag(run_tag)

    def partition_affinity(self, partitions: int) -> PartitionAffinity:
        return AnchoredAffinity(self.spark_context, partitions, enabled=not self.single_executor)

    def sees_directory(self, path: str) -> bool:
        """On a local master the workers are this host's processes: yes. On a cluster, one
        probe job per directory and application (a backend is made per run)."""
        if self.single_executor:
            return True
        key = (self.spark_context.applicationId, path)
        if key not in _SEEN_DIRECTORIES:
            _SEEN_DIRECTORIES[key] = super().sees_directory(path)
        return _SEEN_DIRECTORIES[key]

    def ship_project(self) -> None:
        """On a cluster, the project's packages as a Python file every task puts on its path
        (a context the runner made has them on the executors' path already)."""
        if not self.single_executor:
            project.ship_project(self.spark_context, project.project_archive(),
                                 on_python_path=False)

    def add_python_file(self, path: str) -> None:
        self.spark_context.addPyFile(path)

    def add_file(self, path: str) -> None:
        self.spark_context.addFile(path)

    def stop(self) -> None:
        self.spark_context.stop()

    def thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        return _InheritingThread(self.spark_context, target, name)

    def describe(self) -> str:
        return f"classic Spark ({self.spark_context.master})"


class _InheritingThread(threading.Thread):
    """A thread whose Spark jobs see the local properties its starter had (a scheduler pool,
    a job group of the caller's), as PySpark's ``InheritableThread`` gives in pinned-thread
    mode; that class takes the process for a Spark Connect one as soon as any Connect
    session exists in it, so it cannot serve a classic run beside one."""

    def __init__(self, spark_context: Any, target: Callable[[], None], name: str) -> None:
        super().__init__(target=target, name=name, daemon=True)
        self._spark_context = spark_context
        self._properties = None

    def start(self) -> None:
        # Without pinned threads (PYSPARK_PIN_THREAD=false) a Python thread has no JVM thread
        # of its own to keep properties in: it starts as a plain thread.
        if isinstance(SparkContext._gateway, ClientServer):
            self._properties = self._spark_context._jsc.sc().getLocalProperties().clone()
        super().start()

    def run(self) -> None:
        if self._properties is not None:
            self._spark_context._jsc.sc().setLocalProperties(self._properties)
        super().run()

