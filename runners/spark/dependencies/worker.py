"""A submitted job's Python environment in Spark's Python workers: its packages, its session.

The job server (and the runner, for ``--setup_file`` and the like) installs a job's staged
packages into a folder of the job's own (its *site*), ships it zipped as a file for the
workers (classic Spark: ``SparkContext.addFile``; Spark Connect: an artifact), and names it,
with the job's pickled main session, in the job's :class:`JobEnvironment`, which every task
of the job carries. A Python worker calls :func:`prepare_python_worker` before it builds a
stage's processor (that is where user code is unpickled): the first time it meets a job, it
unpacks the job's site and puts it first on ``sys.path``, and loads the job's main session,
as Beam's SDK harness does at start-up (``pickler.load_session``: with cloudpickle the
coder, logical-type and schema registries of the submitting ``__main__``; with dill its
whole namespace).

Spark reuses a Python worker across jobs: the sites and modules of the jobs it ran before
stay (their pooled processors may still import from them), so a job could see another
job's packages there; jobs that need different versions of one package should not share a
server. A job that staged nothing has an empty environment: its workers are left as they
are.

>>> prepare_python_worker(JobEnvironment())  # nothing staged: nothing to do
>>> site_file_name("job-1")
'beam-job-site-job-1.zip'
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from typing import Optional, Set

from runners.spark.dependencies.working_directory import DriverDirectory

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


@dataclasses.dataclass(frozen=True)
class JobEnvironment:
    """What a job staged for its Python workers, by the names tasks find the files under
    (``SparkFiles.get``); None where it staged nothing of the kind. And where its tasks
    run: the driver's working directory when the run started.

    Attributes:
      site: the job's installed packages, zipped.
      main_session: its pickled main session.
      working_directory: the driver's directory and whether the workers see it (tasks run
        there: :func:`runners.spark.dependencies.working_directory.in_driver_directory`); None for a
        task of no run.
    """

    site: Optional[str] = None
    main_session: Optional[str] = None
    working_directory: Optional[DriverDirectory] = None


def prepare_python_worker(environment: JobEnvironment) -> None:
    """In a task: make the job's site importable and its main session loaded.

    Idempotent and cheap after the first call of a job in a worker process.
    """
    if environment.site is None and environment.main_session is None:
        return
    with _LOCK:
        _use_site(environment.site)
        session = environment.main_session
        if session and session not in _LOADED_SESSIONS:
            from pyspark import SparkFiles

            from runners.spark.beam_internals import pickler

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
