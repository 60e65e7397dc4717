"""The one SparkSession a benchmark run shares between hand-written PySpark and SparkRunner.

Executors must import ``bench`` (the shared event generator lives there) and the project.
The project is installed in the virtualenv; ``bench`` is not an installed package, so it is
shipped the way PySpark ships code: as a zip through ``addPyFile``, which also serves a
session someone else created (the test run's shared one). For a session created here, the
repository root also goes on the workers' ``PYTHONPATH`` (the JVM's environment and
``spark.executorEnv``), so a SparkContext the SparkRunner might create itself sees it too.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional, Set

#: PySpark worker daemon module of the SparkRunner (pre-imports Beam before forking).
WORKER_DAEMON = "runners.spark.daemon"
#: The repository root: the directory holding ``bench/``.
REPOSITORY_ROOT = str(Path(__file__).resolve().parent.parent)


def prepare_worker_environment() -> None:
    """Python workers run this interpreter and can import ``bench``; call before Spark starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    if REPOSITORY_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPOSITORY_ROOT, *paths])


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:  # the runner package fails to import: the bench reports it unavailable
        return False


def bench_session(master: str = "local[2]", parallelism: int = 2,
                  settings: Optional[Dict[str, str]] = None) -> Any:
    """A SparkSession on ``master`` (reused if one is already active), quiet and loopback-bound;
    ``settings``: more Spark settings (e.g. a cluster's driver settings).

    >>> session = bench_session("local[2]")  # doctest: +SKIP
    """
    from pyspark.sql import SparkSession

    prepare_worker_environment()
    builder = (
        SparkSession.builder.master(master)
        .appName("bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.default.parallelism", str(parallelism))
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    )
    for key, value in (settings or {}).items():
        builder = builder.config(key, value)
    if _has_module(WORKER_DAEMON):
        # What the SparkRunner sets on sessions it creates: Python workers fork from a daemon
        # that has imported Beam, instead of each worker importing it (seconds) on first use.
        builder = builder.config("spark.python.daemon.module", WORKER_DAEMON)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    ship_bench(session.sparkContext)
    return session


def bench_connect_server(master: str = "local[2]", parallelism: int = 2,
                         conf: Optional[Dict[str, str]] = None) -> Any:
    """A Spark Connect server on ``master`` for the ``connect`` engine (started here; stop
    it): its Python workers import ``bench`` from the repository, and fork from the runner's
    daemon as the classic session's workers do. ``conf``: more server settings (a cluster's
    driver settings)."""
    from services.connect_server import ConnectServer

    prepare_worker_environment()
    server = ConnectServer(state_dir=tempfile.mkdtemp(prefix="bench-connect-"), master=master,
                           conf={"spark.default.parallelism": str(parallelism),
                                 "spark.sql.shuffle.partitions": str(parallelism),
                                 "spark.ui.enabled": "false",
                                 "spark.ui.showConsoleProgress": "false", **(conf or {})},
                           python_path=os.environ["PYTHONPATH"],
                           daemon_module=WORKER_DAEMON if _has_module(WORKER_DAEMON) else None)
    return server.start()


_SHIPPED_TO: Set[int] = set()


def ship_bench(spark_context: Any) -> None:
    """Make ``bench`` importable in the Python workers of ``spark_context`` (once per context)."""
    if id(spark_context) in _SHIPPED_TO:
        return
    archive = Path(tempfile.mkdtemp(prefix="bench-py-")) / "bench.zip"
    with zipfile.ZipFile(archive, "w") as package:
        root = Path(__file__).resolve().parent
        for module in sorted(root.rglob("*.py")):  # with its packages (streaming, kafka, ...)
            package.write(module, f"bench/{module.relative_to(root).as_posix()}")
    spark_context.addPyFile(str(archive))
    _SHIPPED_TO.add(id(spark_context))
