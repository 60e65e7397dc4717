"""A submitted job's Python environment in Spark's Python workers: its packages, its session.

The job server installs a job's staged packages into a folder of the job's own (its *site*),
ships it zipped with ``SparkContext.addFile``, and names it, with the job's pickled main
session, in two Spark local properties of the job's thread (Spark hands local properties to
every task the job starts). A Python worker calls :func:`prepare_python_worker` before it
builds a stage's processor (that is where user code is unpickled): the first time it meets
a job, it unpacks the job's site and puts it first on ``sys.path``, and loads the job's
main session, as Beam's SDK harness does at start-up (``pickler.load_session``: with
cloudpickle the coder, logical-type and schema registries of the submitting ``__main__``;
with dill its whole namespace).

Spark reuses a Python worker across jobs: the sites and modules of the jobs it ran before
stay (their pooled processors may still import from them), so a job could see another
job's packages there; jobs that need different versions of one package should not share a
server. Tasks outside a job server job (no properties) are left as they are.

>>> prepare_python_worker()  # on the driver, outside any task: nothing to do
>>> site_file_name("job-1")
'beam-job-site-job-1.zip'
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from typing import Any, Optional, Set

#: Local property naming the job's shipped site archive (``SparkFiles`` name).
SITE_PROPERTY = "beam.job.site"
#: Local property naming the job's shipped pickled main session (``SparkFiles`` name).
MAIN_SESSION_PROPERTY = "beam.job.main_session"

_LOCK = threading.Lock()
_LOADED_SESSIONS: Set[str] = set()
_SITES: Set[str] = set()


def site_file_name(job_id: str) -> str:
    """The name a job's site archive is shipped under (one per job: Spark refuses to ship
    two different files under one name)."""
    return f"beam-job-site-{job_id}.zip"


def main_session_file_name(path: str) -> str:
    """The name a pickled main session is shipped under: by content, so jobs with the same
    session share one file and jobs with different sessions never collide."""
    with open(path, "rb") as session:
        digest = hashlib.sha256(session.read()).hexdigest()[:20]
    return f"beam-main-session-{digest}"


def set_job_properties(spark_context: Any, site: Optional[str],
                       main_session: Optional[str]) -> None:
    """Name the job's site and main session for every task started from this thread (and
    from threads it starts with ``InheritableThread``, as the runner's result does)."""
    spark_context.setLocalProperty(SITE_PROPERTY, site)
    spark_context.setLocalProperty(MAIN_SESSION_PROPERTY, main_session)


def prepare_python_worker() -> None:
    """In a task: make the current job's site importable and its main session loaded.

    Idempotent and cheap after the first call of a job in a worker process.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return
    site = context.getLocalProperty(SITE_PROPERTY)
    session = context.getLocalProperty(MAIN_SESSION_PROPERTY)
    with _LOCK:
        _use_site(site)
        if session and session not in _LOADED_SESSIONS:
            from runners.spark.beam_internals import pickler
            from pyspark import SparkFiles

            pickler.load_session(SparkFiles.get(session))
            _LOADED_SESSIONS.add(session)


def _use_site(name: Optional[str]) -> None:
    """Put the job's site first on sys.path. Sites of jobs the worker ran before stay on it:
    their pooled processors may still import lazily from them."""
    from pyspark import SparkFiles

    if not name or name in _SITES:
        return
    folder = _unpacked(SparkFiles.get(name))
    sys.path.insert(0, folder)
    _SITES.add(name)
    importlib.invalidate_caches()


def _unpacked(archive: str) -> str:
    """The archive's contents in a folder beside it; unpacked once per machine (workers of
    one executor race for it: the first rename wins, the others use its folder)."""
    folder = archive[: -len(".zip")] if archive.endswith(".zip") else archive + ".d"
    if os.path.isdir(folder):
        return folder
    staging = tempfile.mkdtemp(prefix=".unpacking-", dir=os.path.dirname(archive))
    with zipfile.ZipFile(archive) as contents:
        contents.extractall(staging)
    try:
        os.rename(staging, folder)
    except OSError:  # another worker unpacked it first
        shutil.rmtree(staging, ignore_errors=True)
    return folder
