"""PySpark's Python worker daemon, with Beam and the runner imported before it forks.

Spark starts Python workers by forking them from one daemon process per executor. With the
stock daemon every worker imports Apache Beam itself, which takes seconds; this daemon
imports the runner's worker-side modules (and so Beam) once, and each forked worker
inherits them. Select it with ``spark.python.daemon.module=runners.spark.daemon`` (the
runner sets it for the sessions it creates; a Spark Connect server you start takes it as a
``--conf``).

What it imported is then frozen out of Python's cyclic garbage collector (``gc.freeze``): a
reused worker runs a full collection after every task (PySpark's daemon does), which walked
Beam's ~150,000 objects each time, 0.12 s of CPU per task on this machine; frozen, they are
never walked, and forked workers share their pages with the daemon.
"""

import gc

from pyspark import daemon

import runners.spark.backends.connect_tasks  # noqa: F401  (imported for the forked workers)
import runners.spark.execution.shuffle  # noqa: F401
import runners.spark.worker.bundles  # noqa: F401

gc.collect()
gc.freeze()

if __name__ == "__main__":
    daemon.manager()
