"""A Spark Connect session, checked once before the runner uses it.

What the runner needs of the driver's Spark Connect client: ``DataFrame.repartitionById``
(PySpark 4.1's; Databricks Connect up to 16.x is built on Spark 3.5 and lacks it). What it
needs of the server and of its Python workers, asked with one small query:

* Spark 4.1 or newer (``DataFrame.repartitionById``, which sends a row to the partition a
  column names: the runner's shuffles);
* workers that run this driver's Python (major.minor: PySpark refuses a UDF from another
  Python), with ``pyarrow`` and the same Apache Beam minor version (coders and pickled DoFns
  cross between them), and that import the project's packages (shipped as an artifact just
  before; Beam and the project's other third-party dependencies must be installed there).

The same query asks whether the workers see the driver's working directory (a server on
this host, or a folder they share): whether they find a file the driver has just made
there. A run started in that directory knows it without another query
(:mod:`runners.spark.dependencies.working_directory`: tasks run there, and a relative path in a
pipeline, ``--output counts``, means what it means to the driver; where the workers do
not see it, such a pipeline is refused before it starts).

A session that fails is refused with :class:`ConnectSessionError`, naming what is missing
and what to do. The facts the runner uses later come back as :class:`SessionFacts`.

>>> server_version("4.3.0"), server_version("4.1.0-SNAPSHOT") >= MINIMUM_SERVER
((4, 3), True)
>>> splits_of("*(1) Range (0, 1, step=1, splits=8)")
8
>>> print(client_problem(object()))  # doctest: +ELLIPSIS
This driver's Spark Connect client (object, from builtins) lacks DataFrame.repartitionById ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import re
import sys
import tempfile
from typing import Any, Dict, Optional, Tuple

import apache_beam

from runners.spark.dependencies.working_directory import PROBE_FILE_PREFIX

#: Spark Connect servers older than this lack an API the runner uses (repartitionById).
MINIMUM_SERVER = (4, 1)
_SPLITS = re.compile(r"splits=(\d+)")
_ARROW_LARGE_TYPES = "spark.sql.execution.arrow.useLargeVarTypes"
#: Adaptive query execution: on by default in Spark, off in the sessions the runner makes.
ADAPTIVE_EXECUTION = "spark.sql.adaptive.enabled"


class ConnectSessionError(RuntimeError):
    """The Spark Connect session cannot run the runner; the message says what to do."""


@dataclasses.dataclass
class SessionFacts:
    """What the runner learnt of a session."""

    server: str = ""  # Spark's version on the server
    default_parallelism: int = 2  # partitions of a leaf DataFrame: the server's cores
    single_executor: bool = False  # a local master: every task on one executor
    large_binary: bool = False  # Arrow batches carry binary columns as large_binary
    adaptive: bool = False  # the session re-plans queries as they run (spark.sql.adaptive)
    workers: Dict[str, str] = dataclasses.field(default_factory=dict)  # the probe's answer
    #: directory of the driver -> whether the workers see it (the working directory the
    #: session was checked in; the backend adds the directories its runs start in)
    seen_directories: Dict[str, bool] = dataclasses.field(default_factory=dict)


def server_version(text: str) -> Tuple[int, int]:
    numbers = re.findall(r"\d+", text)
    return (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else (0, 0)


def splits_of(plan: str) -> Optional[int]:
    """The partitions a physical plan's ``Range`` has, or None."""
    found = _SPLITS.search(plan)
    return int(found.group(1)) if found else None


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def client_problem(frame: Any) -> str:
    """Why the Spark Connect client that made the DataFrame ``frame`` cannot run the runner
    ('' when it can)."""
    if hasattr(frame, "repartitionById"):
        return ""
    kind = type(frame)
    return (f"This driver's Spark Connect client ({kind.__name__}, from {kind.__module__}) "
            "lacks DataFrame.repartitionById (PySpark 4.1 and newer), which the runner "
            "shuffles with. Databricks Connect up to 16.x is built on Spark 3.5: not supported "
            "until a Databricks Connect built on Spark 4.1 or newer. Elsewhere use PySpark's "
            "own client, 4.1 or newer: pip install 'beam-spark-dataflow[connect]'")


def check_session(session: Any, where: str) -> SessionFacts:
    """Check ``session`` (see the module docstring); returns its facts or raises
    :class:`ConnectSessionError`."""
    problem = client_problem(session.range(0, 1))  # a plan only: nothing is sent
    if problem:
        raise ConnectSessionError(problem)
    facts = SessionFacts(server=session.version)
    if server_version(facts.server) < MINIMUM_SERVER:
        raise ConnectSessionError(
            f"{where} runs Spark {facts.server}; the runner needs a Spark Connect server of "
            f"Spark {'.'.join(map(str, MINIMUM_SERVER))} or newer (it shuffles with "
            "DataFrame.repartitionById). Upgrade the server (on Databricks: a runtime or "
            "serverless environment with Spark 4.1+), or run on classic Spark "
            "(--spark_master_url)")
    facts.large_binary = str(session.conf.get(_ARROW_LARGE_TYPES, "false")).lower() == "true"
    facts.adaptive = str(session.conf.get(ADAPTIVE_EXECUTION, "true")).lower() == "true"
    master = str(session.conf.get("spark.master", "") or "")
    facts.single_executor = master == "local" or master.startswith("local[")
    facts.default_parallelism = splits_of(
        session.range(0, 1)._explain_string(extended=False)) or 2
    directory = os.getcwd()
    try:  # a file of the driver's that the workers look for (removed after)
        handle, marker = tempfile.mkstemp(prefix=PROBE_FILE_PREFIX, dir=directory)
        os.close(handle)
    except OSError:  # the driver cannot write there: its runs will probe the directory
        marker = None
    try:
        facts.workers = _probe(session, facts.large_binary, where, directory,
                               marker and os.path.basename(marker))
    finally:
        if marker is not None:
            with contextlib.suppress(OSError):
                os.remove(marker)
    _check_workers(facts.workers, where)
    if marker is not None:
        facts.seen_directories[directory] = facts.workers.get("sees_directory") == "yes"
    return facts


def _probe(session: Any, large_binary: bool, where: str, directory: str,
           marker: Optional[str]) -> Dict[str, str]:
    """One task that reports what its Python worker has (pickled by value: it must run
    where the project is not importable, to say so)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    def probe(batches: Any) -> Any:
        import importlib
        import os
        import pickle
        import sys

        import pyarrow

        for _ in batches:
            pass
        found = {"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
                 "sees_directory": "yes" if os.path.isdir(directory) and (
                     marker is None or os.path.exists(os.path.join(directory, marker)))
                 else "no"}
        for module in ("apache_beam", "pyspark", "runners.spark.worker.bundles"):
            try:
                found[module] = getattr(importlib.import_module(module), "__version__", "yes")
            except Exception as error:  # reported to the driver, which says what to do
                found[module + " error"] = f"{type(error).__name__}: {error}"
        kind = pyarrow.large_binary() if large_binary else pyarrow.binary()
        yield pyarrow.record_batch([pyarrow.array([pickle.dumps(found)], kind)],
                                   names=["record"])

    schema = StructType([StructField("record", BinaryType())])
    try:
        table = session.range(0, 1, 1, 1).mapInArrow(probe, schema).toArrow()
    except Exception as error:
        text = str(error).strip().splitlines()
        raise ConnectSessionError(
            f"{where}: a Python task failed before it could run anything of the runner's "
            f"({text[0] if text else type(error).__name__}). The server's Python workers "
            f"need Python {sys.version_info[0]}.{sys.version_info[1]} (this driver's) with "
            "pyarrow; on a server you start, name it with --conf spark.pyspark.python=...") \
            from error
    return pickle.loads(table.column(0)[0].as_py())


def _check_workers(found: Dict[str, str], where: str) -> None:
    driver_python = "%d.%d" % sys.version_info[:2]
    install = (f"install apache-beam=={apache_beam.__version__} and this project's other "
               "third-party dependencies (setup.py's install_requires) in the server's Python "
               "environment (on Databricks serverless: the notebook's or job's environment "
               "dependencies; in standard access mode: cluster libraries)")
    if _minor(found.get("python", "")) != driver_python:
        raise ConnectSessionError(
            f"{where}: its Python workers run Python {found.get('python')} "
            f"({found.get('executable')}), this driver {driver_python}: Beam's pickled "
            "functions need the same Python on both sides; run the driver on the server's "
            "Python version, or point the server's workers at the driver's "
            "(spark.pyspark.python)")
    if "apache_beam error" in found:
        raise ConnectSessionError(
            f"{where}: its Python workers cannot import Apache Beam "
            f"({found['apache_beam error']}): {install}")
    if _minor(found["apache_beam"]) != _minor(apache_beam.__version__):
        raise ConnectSessionError(
            f"{where}: its Python workers have apache-beam {found['apache_beam']}, this "
            f"driver {apache_beam.__version__}: the runner hands Beam's coders and pickled "
            f"functions between them; {install}")
    if "runners.spark.worker.bundles error" in found:
        raise ConnectSessionError(
            f"{where}: its Python workers cannot import the runner's own code, shipped to "
            f"them as an artifact ({found['runners.spark.worker.bundles error']}): {install}")
