"""PySpark's Python worker daemon, with Beam and the runner imported before it forks.

Spark starts Python workers by forking them from one daemon process per executor. With the
stock daemon every worker imports Apache Beam itself, which takes seconds; this daemon
imports the runner's worker-side modules (and so Beam) once, and each forked worker
inherits them. Select it with ``spark.python.daemon.module=runners.spark.daemon`` (the
runner sets it for the sessions it creates).
"""

import runners.spark.bundles  # noqa: F401  (imported for the forked workers)
import runners.spark.shuffle  # noqa: F401
from pyspark import daemon

if __name__ == "__main__":
    daemon.manager()
