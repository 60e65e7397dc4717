"""Our Beam runner on the Spark that pyspark provides, in batch and in streaming.

Beam's own ``SparkRunner`` for Python is a client for a Java job server downloaded at run
time; this one executes Beam's portable pipeline itself, in Spark's Python workers:

1. :mod:`~runners.spark.planning.execution_plan` turns the pipeline into its portable proto, refuses what
   it cannot run (naming the transform), and fuses it into stages with Beam's own phases.
2. :mod:`~runners.spark.execution.batch` makes each stage a dataset of the run's backend
   (:mod:`~runners.spark.backends`: an RDD on classic Spark, a DataFrame on Spark Connect):
   one partition is one bundle, processed by Beam's SDK harness in process
   (:mod:`~runners.spark.worker.bundles`).
3. :mod:`~runners.spark.execution.shuffle` groups by the encoded key (GroupByKey with Beam's trigger
   driver, Reshuffle, key partitioning for stateful DoFns); :mod:`~runners.spark.worker.side_inputs`
   materializes side inputs per window and broadcasts them.
4. :mod:`~runners.spark.execution.result` reports state, errors (the user's own exception) and metrics
   (:mod:`~runners.spark.worker.metrics`), merged across tasks.
5. In streaming (``--streaming``), :mod:`~runners.spark.streaming` runs the same stages in
   micro-batches, with keyed state and watermarks carried from batch to batch.
6. On a cluster, :mod:`~runners.spark.dependencies` ships the project's packages and what
   the pipeline stages (Beam's ``--requirements_file``, ``--setup_file``, ...).

Every Beam private API it uses is imported in :mod:`~runners.spark.beam_internals`.

Usage: ``--runner=SparkRunner`` on a project pipeline (see ``runners.resolution``), or

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
