"""How the runner reaches Spark: one engine, a backend per kind of Spark session.

* :mod:`~runners.spark.backends.classic`: a SparkContext (``local[N]``, a standalone or YARN
  or Kubernetes cluster, ``spark-submit``): RDDs, broadcasts, accumulators.
* :mod:`~runners.spark.backends.connect`: a Spark Connect session (Spark 4's thin client,
  ``sc://host:port``; Databricks serverless and standard access mode): DataFrames of binary
  records through ``mapInArrow``, artifacts, job tags. No SparkContext, no RDD.

What both offer the engine is :mod:`~runners.spark.backends.base`. The backend is chosen
from the session the runner is given, or from the pipeline options:

>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> remote_url(PipelineOptions(["--spark_remote", "sc://127.0.0.1:15002"]))
'sc://127.0.0.1:15002'
"""

from __future__ import annotations

import os
from typing import Any, Optional

from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import options as spark_options
from runners.spark.backends.base import Backend

#: PySpark's own variable naming a Spark Connect server.
REMOTE_VARIABLE = "SPARK_REMOTE"


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect ``SparkSession`` (which has no SparkContext)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def remote_url(options: PipelineOptions) -> Optional[str]:
    """The Spark Connect server the options name (``--spark_remote``, else the
    ``SPARK_REMOTE`` environment variable, as PySpark reads it), or None.

    Raises ValueError when ``--spark_master_url`` names a classic master too.
    """
    view = options.view_as(spark_options.SparkRunnerOptions)
    url = view.spark_remote or os.environ.get(REMOTE_VARIABLE) or None
    if url and view.spark_remote and options.get_all_options(drop_default=True).get(
            "spark_master_url"):
        raise ValueError(
            f"--spark_remote={url} and --spark_master_url name two Sparks: give "
            "--spark_remote for Spark Connect, or --spark_master_url for classic Spark")
    return url


def open_backend(spark: Any, options: PipelineOptions) -> Backend:
    """The backend for ``spark`` (a classic or Spark Connect ``SparkSession``, a
    ``SparkContext``, or a backend already), or, when it is None, for the options: a Spark Connect session to
    :func:`remote_url`, else classic Spark (the process's running SparkContext, or one
    made from ``--spark_master_url`` and ``--spark_conf``)."""
    if isinstance(spark, Backend):
        return spark
    if spark is not None:
        if is_connect_session(spark):
            from runners.spark.backends.connect import ConnectBackend

            return ConnectBackend.of(spark)
        from runners.spark.backends.classic import ClassicBackend

        backend = ClassicBackend(getattr(spark, "sparkContext", spark))
        backend.ship_project()
        return backend
    url = remote_url(options)
    if url:
        from runners.spark.backends.connect import ConnectBackend

        return ConnectBackend.connect(url, options)
    from runners.spark.backends.classic import ClassicBackend

    return ClassicBackend.create(options)


__all__ = ["Backend", "is_connect_session", "open_backend", "remote_url"]
