"""Turn a ``--runner`` value into the runner a pipeline runs on.

Beam resolves ``--runner=SparkRunner`` to its own portable Spark runner, a client for a Java
job server jar downloaded at run time. The project's pipelines resolve that name to our runner
on PySpark instead (``runners.spark.SparkRunner``), and so does any pipeline run by the
launcher (``beam-spark run``: :func:`claim_spark_runner_name` changes Beam's own table of
names, so a name in code, ``PipelineOptions(runner="SparkRunner")`` or
``beam.Pipeline(runner="spark")``, means ours too); every other name is left to Beam.

>>> resolve_runner("DirectRunner")
'DirectRunner'
>>> is_spark_runner_name("sparkrunner"), is_spark_runner_name("PortableRunner")
(True, False)
"""

from __future__ import annotations

from typing import Any, Optional

#: Names that mean "the Spark runner" to a user of this project (in any case).
SPARK_RUNNER_NAMES = ("SparkRunner", "spark", "runners.spark.SparkRunner")
#: Where our runner's class is, as Beam's table of runner names spells a runner.
SPARK_RUNNER_PATH = "runners.spark.runner.SparkRunner"


def is_spark_runner_name(name: str) -> bool:
    """Whether ``name`` means our Spark runner (:data:`SPARK_RUNNER_NAMES`, any case)."""
    return name.lower() in {known.lower() for known in SPARK_RUNNER_NAMES}


def claim_spark_runner_name() -> None:
    """From now on, in this process, Beam resolves ``SparkRunner`` (``spark``,
    ``sparkrunner``, in any case) to our runner instead of its Java job-server runner.
    ``PortableRunner``, ``DirectRunner``, ``DataflowRunner``, ... stay Beam's."""
    from runners.spark.beam_internals import resolve_runner_name

    # Beam tries a name as given, then with "runner" appended: "spark" finds this entry.
    resolve_runner_name("SparkRunner", SPARK_RUNNER_PATH)


def resolve_runner(name: Optional[str]) -> Any:
    """Return a runner name or instance that ``beam.Pipeline(runner=...)`` accepts.

    ``None`` means Beam's default (the DirectRunner).
    """
    if name is None:
        return "DirectRunner"
    if is_spark_runner_name(name):
        try:
            from runners.spark import SparkRunner
        except ImportError as error:
            raise ValueError(
                f"--runner={name}: the project's Spark runner is not available ({error}). "
                "Use --runner=DirectRunner."
            ) from error
        return SparkRunner()
    return name
