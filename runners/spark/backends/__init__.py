"""How the runner reaches Spark: one engine, a backend per kind of Spark session.

* :mod:`~runners.spark.backends.classic`: a SparkContext (``local[N]``, a standalone or YARN
  or Kubernetes cluster, ``spark-submit``): RDDs, broadcasts, accumulators.
* :mod:`~runners.spark.backends.connect`: a Spark Connect session (Spark 4's thin client,
  ``sc://host:port``; Databricks serverless and standard access mode): DataFrames of binary
  records through ``mapInArrow``, artifacts, job tags. No SparkContext, no RDD.

What both offer the engine is :mod:`~runners.spark.backends.base`. The backend is chosen
from the session the runner is given, else from the pipeline options, else from the
process (:func:`open_backend`): a notebook's ``spark``, classic or Connect, runs a pipeline
that names no Spark.

>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> remote_url(PipelineOptions(["--spark_remote", "sc://127.0.0.1:15002"]))
'sc://127.0.0.1:15002'
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Optional

from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark import options as spark_options
from runners.spark.backends.base import Backend

#: PySpark's own variable naming a Spark Connect server.
REMOTE_VARIABLE = "SPARK_REMOTE"
#: PySpark's Spark Connect session module: loaded by any process that made a Connect session.
CONNECT_SESSION_MODULE = "pyspark.sql.connect.session"

#: What to do on PySpark's thin client when nothing names a Spark Connect server.
NO_CONNECT_SESSION = (
    "PySpark here is its Spark Connect client only (pyspark-client: no classic Spark, no "
    "SparkContext), and the pipeline names no Spark Connect server: give --spark_remote "
    "sc://HOST:PORT (or set SPARK_REMOTE), make a session first in this thread "
    "(SparkSession.builder.remote('sc://HOST:PORT').getOrCreate(): the runner uses the active "
    "one), or hand one to SparkRunner(spark). For classic Spark (local[N], spark://, YARN) "
    "install the full PySpark instead: pip install 'beam-spark-dataflow[spark]' in an "
    "environment without pyspark-client.")


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


def active_connect_session() -> Optional[Any]:
    """The calling thread's active Spark Connect session (what a notebook or a script made
    with ``SparkSession.builder.remote(...).getOrCreate()``), or None. Looked up only in a
    process that has loaded PySpark's Connect session module, as any that made a Connect
    session has: a classic process loads nothing for it."""
    module = sys.modules.get(CONNECT_SESSION_MODULE)
    if module is None:
        return None
    return module.SparkSession.getActiveSession()


def has_classic_spark() -> bool:
    """Whether the installed PySpark is the full one (False for the thin client,
    ``pyspark-client``, which lacks ``pyspark.core``: no SparkContext, no RDD)."""
    return importlib.util.find_spec("pyspark.core") is not None


def open_backend(spark: Any, options: PipelineOptions) -> Backend:
    """The backend for ``spark`` (a classic or Spark Connect ``SparkSession``, a
    ``SparkContext``, or a backend already), or, when it is None, in this order:

    1. a Spark Connect session to ``--spark_remote``;
    2. classic Spark from ``--spark_master_url`` (and ``--spark_conf``);
    3. with neither option, the calling thread's active Spark Connect session
       (:func:`active_connect_session`);
    4. a Spark Connect session to ``SPARK_REMOTE`` (PySpark's variable);
    5. classic Spark: the process's running SparkContext, or one of the runner's own on
       ``local[*]``. On PySpark's thin client there is none: a ValueError says what to give.
    """
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
    explicit_remote = options.view_as(spark_options.SparkRunnerOptions).spark_remote
    url = remote_url(options)
    if not explicit_remote and not spark_options.explicit_master_url(options):
        session = active_connect_session()
        if session is not None:
            from runners.spark.backends.connect import ConnectBackend

            return ConnectBackend.of(session)
    if url:
        from runners.spark.backends.connect import ConnectBackend

        return ConnectBackend.connect(url, options)
    if not has_classic_spark():
        raise ValueError(NO_CONNECT_SESSION)
    from runners.spark.backends.classic import ClassicBackend

    return ClassicBackend.create(options)


__all__ = ["Backend", "active_connect_session", "has_classic_spark", "is_connect_session",
           "open_backend", "remote_url"]
