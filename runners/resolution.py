"""Turn a ``--runner`` value into the runner a project pipeline runs on.

Beam resolves ``--runner=SparkRunner`` to its own portable Spark runner, a client for a Java
job server jar downloaded at run time. The project's pipelines resolve that name to our runner
on PySpark instead (``runners.spark.SparkRunner``); every other name is left to Beam.

>>> resolve_runner("DirectRunner")
'DirectRunner'
"""

from __future__ import annotations

from typing import Any, Optional

#: Names that mean "the Spark runner" to a user of this project.
SPARK_RUNNER_NAMES = ("SparkRunner", "spark", "runners.spark.SparkRunner")


def resolve_runner(name: Optional[str]) -> Any:
    """Return a runner name or instance that ``beam.Pipeline(runner=...)`` accepts.

    ``None`` means Beam's default (the DirectRunner).
    """
    if name is None:
        return "DirectRunner"
    if name in SPARK_RUNNER_NAMES:
        try:
            from runners.spark import SparkRunner
        except ImportError as error:
            raise ValueError(
                f"--runner={name}: the project's Spark runner is not available ({error}). "
                "Use --runner=DirectRunner."
            ) from error
        return SparkRunner()
    return name
