"""Our Beam runner on the Spark that pyspark provides, in batch and in streaming.

Beam's own ``SparkRunner`` for Python is a client for a Java job server downloaded at run
time; this one executes Beam's portable pipeline itself, in Spark's Python workers. It plans,
then runs, as Beam's ``fn_api_runner`` does (``create_stages``, then ``run_stages``); each
package below is one idea:

1. :mod:`~runners.spark.planning`: the pipeline as its portable proto, checked against what
   the runner can run (what it refuses names the transform), fused into stages with Beam's
   own phases: an execution plan.
2. :mod:`~runners.spark.execution` (driver side): each stage a dataset of the run's backend,
   GroupByKey and Reshuffle as shuffles by the encoded key, side inputs collected per window,
   and the ``PipelineResult``.
3. :mod:`~runners.spark.worker` (in each task's Python worker): one partition is one bundle
   of Beam's SDK harness in process; the records, metrics and errors it hands back.
   :mod:`~runners.spark.chains` runs a fused stage's element-only steps as one loop.
4. :mod:`~runners.spark.backends`: classic Spark (RDDs) or Spark Connect (DataFrames) behind
   one contract (:mod:`~runners.spark.backends.base`); nothing else touches Spark's API.
5. In streaming (``--streaming``), :mod:`~runners.spark.streaming` runs the same stages in
   micro-batches, with watermarks carried from batch to batch, and keyed state in
   :mod:`~runners.spark.state`: stores on the executors, durable in ``--checkpoint_dir``,
   rescaled, updated and read as a table.
6. On a cluster, :mod:`~runners.spark.dependencies` ships the project's packages and what
   the pipeline stages (Beam's ``--requirements_file``, ``--setup_file``, ...).

Every Beam private API it uses is imported in :mod:`~runners.spark.beam_internals`; the
layers these packages form are stated and checked in ``tests/test_layers.py``.

Usage: ``--runner=SparkRunner`` on a project pipeline or on any pipeline run by the launcher
(``beam-spark run my_pipeline.py --runner SparkRunner``; see ``runners.resolution``), or

>>> import apache_beam as beam
>>> from runners.spark import SparkRunner
>>> with beam.Pipeline(runner=SparkRunner()) as p:  # doctest: +SKIP
...     _ = p | beam.Create([1, 2, 3]) | beam.Map(print)
"""

import importlib
from typing import Any

# Resolved on first use: a job imports runners.spark.options to accept the runner's options on
# its command line, and that must not import pyspark and the runner when it runs elsewhere.
_EXPORTS = {"SparkRunner": "runners.spark.runner", "SparkRunnerOptions": "runners.spark.options"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'runners.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
