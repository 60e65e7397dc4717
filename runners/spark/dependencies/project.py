"""The project's own packages, shipped to a cluster's executors.

The runner's worker-side code (bundles, shuffles, keyed state) runs in every task, and a
pipeline's DoFns may come from the project's library (``transforms``, ``triggers``) or jobs
(``pipelines``): on a cluster the executors must import them. :func:`project_archive` zips
the packages as the driver has them (its Python files and package data), named by content,
so the executors run exactly the driver's code; :func:`ship_project` puts it on the
executors' Python path. Nothing needs installing on a node but Python and the project's
third-party dependencies.

Two ways to ship, by who made the SparkContext:

* the runner makes it (``--spark_master_url``): the archive is shipped with
  ``SparkContext.addFile`` and named in ``spark.executorEnv.PYTHONPATH`` (:func:`
  executor_python_path`), so even the Python worker *daemon*, which imports the runner
  before any task, finds it (files land in the executor's working directory);
* a SparkContext that exists already (``spark-submit``, a session of the user's): with
  ``SparkContext.addPyFile``, which every task puts on its path. Such a session should keep
  PySpark's own daemon (``spark.python.daemon.module``) or ship the project itself.

>>> name = project_archive_name(b"contents")
>>> name.startswith("beam-spark-project-") and name.endswith(".zip")
True
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import io
import logging
import os
import shutil
import tempfile
import threading
import zipfile
from typing import Any, Dict, List, Tuple

_LOGGER = logging.getLogger(__name__)

#: The project's top-level packages (setup.py's find_packages).
PROJECT_PACKAGES = ("runners", "transforms", "triggers", "pipelines", "services", "pictures")
#: File names not shipped (caches, compiled files).
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
_LOCK = threading.Lock()
_ARCHIVES: Dict[str, str] = {}  # content digest -> archive path
_FOLDER: List[str] = []  # this process's folder of archives, removed when it exits
_SHIPPED: Dict[int, str] = {}  # id(SparkContext) -> archive name shipped to it


def project_archive_name(content: bytes) -> str:
    return f"beam-spark-project-{hashlib.sha256(content).hexdigest()[:16]}.zip"


def _project_files() -> List[Tuple[str, str]]:
    """(path in the archive, local path) of every file of the project's packages."""
    files = []
    for package in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for directory in spec.submodule_search_locations:
            base = os.path.dirname(os.path.abspath(directory))
            for parent, folders, names in os.walk(directory):
                folders[:] = sorted(folder for folder in folders
                                    if folder != "__pycache__" and not folder.startswith("."))
                for name in sorted(names):
                    if name.endswith(_SKIPPED_SUFFIXES) or name.startswith("."):
                        continue
                    path = os.path.join(parent, name)
                    files.append((os.path.relpath(path, base), path))
    return files


def _archive_folder() -> str:
    """This process's folder for archives: a SparkContext serves an added file from its path
    for as long as it runs, so the folder lives until the process exits."""
    if not _FOLDER or not os.path.isdir(_FOLDER[0]):
        _FOLDER[:] = [tempfile.mkdtemp(prefix="beam-spark-project-")]
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]


def project_archive() -> str:
    """The path of a zip of the project's packages as this process has them (made once per
    content)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in _project_files():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # same bytes, same name
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as file:
                archive.writestr(info, file.read())
    content = buffer.getvalue()
    name = project_archive_name(content)
    with _LOCK:
        path = _ARCHIVES.get(name)
        if path is None or not os.path.exists(path):
            path = os.path.join(_archive_folder(), name)
            with open(path, "wb") as file:
                file.write(content)
            _ARCHIVES[name] = path
    return path


def executor_python_path(archive: str, settings: Dict[str, str]) -> str:
    """``spark.executorEnv.PYTHONPATH`` for a SparkContext the runner makes: the shipped
    archive (relative: executors fetch files to their working directory) before what the
    settings already name."""
    existing = settings.get("spark.executorEnv.PYTHONPATH", "")
    return os.pathsep.join([os.path.basename(archive)] + ([existing] if existing else []))


def ship_project(spark_context: Any, archive: str, on_python_path: bool) -> None:
    """Ship ``archive`` to the executors of ``spark_context`` (once per context):
    ``on_python_path`` when :func:`executor_python_path` named it in the context's settings,
    else as a Python file every task puts on its path."""
    name = os.path.basename(archive)
    with _LOCK:
        if _SHIPPED.get(id(spark_context)) == name:
            return
        _SHIPPED[id(spark_context)] = name
    if on_python_path:
        spark_context.addFile(archive)
    else:
        spark_context.addPyFile(archive)
    _LOGGER.info("shipping the project's packages to the executors (%s, %d KiB)", name,
                 os.path.getsize(archive) // 1024)
