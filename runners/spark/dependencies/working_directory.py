"""Relative paths in a pipeline mean the driver's working directory when the pipeline runs.

Beam's file IO opens a relative path (``ReadFromText("./*.txt")``, ``WriteToText("out/n")``)
in the working directory of the process that opens the file: on the DirectRunner, the
driver's, as it is while the pipeline runs. On Spark, Python workers open the files, and
their own working directory is another (the executor's, fixed when Spark started, on
classic Spark; the session's folder on a Spark Connect server): a driver that changed
directory (``os.chdir``) read nothing there, silently. So that a path means the same on
every runner:

* when a run starts, the runner takes the driver's working directory (``os.getcwd()``) and
  asks the backend whether its workers see it
  (:meth:`~runners.spark.backends.base.Backend.sees_directory`: on a local master they
  do; else a small Spark job looks there for a file the driver has just made, once per
  directory: :func:`probe_directory`);
* every task of the run runs in that directory (:func:`in_driver_directory`);
* where the workers do not see it, a pipeline that names a relative path in Beam's file IO
  (:func:`relative_paths`) fails before the run starts, naming the path and the directory
  (:func:`check_relative_paths`); a relative path that turns up only while the run goes on
  (a pattern read from the data, as ``ReadAllFromText`` takes) fails the task that hands it
  to Beam's ``FileSystems``, naming it.

>>> is_relative_local_path("./in*.txt"), is_relative_local_path("out/counts")
(True, True)
>>> is_relative_local_path("/data/in.txt"), is_relative_local_path("s3://bucket/in.txt")
(False, False)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import sys
import tempfile
from typing import Any, Iterable, Iterator, List, Optional, Tuple

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.value_provider import ValueProvider
from apache_beam.pipeline import PipelineVisitor

from runners.spark.beam_internals import file_paths_named_by

#: The name of the file :func:`probe_directory` makes in the driver's directory (a prefix).
PROBE_FILE_PREFIX = ".beam-spark-runner-probe-"


@dataclasses.dataclass(frozen=True)
class DriverDirectory:
    """The driver's working directory when a run started, and whether the backend's Python
    workers see it (the same files, not a directory of the same name of their own)."""

    path: str
    seen: bool


class RelativePathError(ValueError):
    """A relative path in a pipeline whose workers do not see the driver's directory."""


def is_relative_local_path(path: str) -> bool:
    """A path on the local file system (no ``scheme://``) that is not absolute."""
    return FileSystems.get_scheme(path) is None and not os.path.isabs(path)


def relative_paths(pipeline: Any) -> List[Tuple[str, str]]:
    """``(step, path)`` for every relative local path a pipeline's file IO was given (Beam's
    file-based sources and sinks, ``fileio``, the pandas-based CSV and JSON reads and
    writes), the outermost step only; a path given at run time (a ``ValueProvider`` not yet
    accessible) is not known here."""
    found: List[Tuple[str, str]] = []

    class Visitor(PipelineVisitor):
        def enter_composite_transform(self, applied: Any) -> None:
            self.visit_transform(applied)

        def visit_transform(self, applied: Any) -> None:
            label = applied.full_label
            if any(label.startswith(step + "/") for step, _ in found):
                return
            for value in file_paths_named_by(applied.transform):
                if isinstance(value, ValueProvider):
                    if not value.is_accessible():
                        continue
                    value = value.get()
                if isinstance(value, str) and is_relative_local_path(value):
                    found.append((label, value))

    pipeline.visit(Visitor())
    return found


def check_relative_paths(paths: Iterable[Tuple[str, str]], directory: DriverDirectory,
                         where: str) -> None:
    """Raise :class:`RelativePathError` naming ``paths`` (``(step, path)``) when the workers
    of ``where`` (a backend's description) do not see the driver's directory."""
    paths = list(paths)
    if directory.seen or not paths:
        return
    named = "; ".join(f"{step!r} names {path!r}" for step, path in paths)
    raise RelativePathError(
        f"{named}: a relative path means the driver's working directory "
        f"({directory.path}), which the Python workers of {where} do not see. Give paths "
        "the workers see (an absolute path on storage every worker shares, or a URL such "
        "as s3://...), or run the driver from a directory they share")


@contextlib.contextmanager
def in_driver_directory(directory: Optional[DriverDirectory]) -> Iterator[None]:
    """Run a task's work in the driver's directory (its working directory put back after);
    where the worker does not see it, with relative local paths refused by Beam's
    ``FileSystems`` (an error naming the path). Nothing changes for None (a task of no
    run: a unit test's)."""
    if directory is None:
        yield
        return
    if directory.seen and os.path.isdir(directory.path):
        try:
            previous: Optional[str] = os.getcwd()
        except OSError:  # the worker's own directory is gone: nothing to go back to
            previous = None
        else:
            _anchor_the_workers_own_paths(previous)
        os.chdir(directory.path)
        try:
            yield
        finally:
            if previous is not None:
                os.chdir(previous)
        return
    _refuse_relative_paths_in_file_systems()
    _REFUSING.append(directory.path)
    try:
        yield
    finally:
        _REFUSING.pop()


def _anchor_the_workers_own_paths(here: str) -> None:
    """Spark starts a Python worker in its executor's directory and names the files it
    ships relative to it (on a cluster's executors PySpark's ``SparkFiles`` root is ``.``,
    and the ``sys.path`` entries of ``addPyFile``'s files are under it): made absolute, at
    each task (PySpark sets them again), before the task leaves that directory, or the
    worker would look for its own files in the driver's directory."""
    anchored: List[str] = []
    for entry in sys.path:
        if not os.path.isabs(entry):
            entry = os.path.normpath(os.path.join(here, entry))
        if entry not in anchored:
            anchored.append(entry)
    sys.path[:] = anchored
    try:
        from pyspark import SparkFiles
    except ImportError:  # a PySpark without classic Spark's files (pyspark-client)
        return
    root = SparkFiles._root_directory
    if root is not None and not os.path.isabs(root):
        SparkFiles._root_directory = os.path.normpath(os.path.join(here, root))


#: The driver directories whose relative paths the running task refuses (innermost last):
#: one task at a time runs in a Python worker process.
_REFUSING: List[str] = []


def _refuse_relative_paths_in_file_systems() -> None:
    """Wrap ``FileSystems.get_filesystem`` (which every ``FileSystems`` operation calls with
    its path) once per process: it raises while :data:`_REFUSING` holds a directory."""
    if getattr(FileSystems, "refuses_relative_paths_for_spark_runner", False):
        return
    original = FileSystems.get_filesystem

    def get_filesystem(path):
        if _REFUSING and isinstance(path, str) and is_relative_local_path(path):
            raise RelativePathError(
                f"the relative path {path!r} means the driver's working directory "
                f"({_REFUSING[-1]}), which this Spark worker does not see: give paths every "
                "worker sees (an absolute path on shared storage, or a URL such as "
                "s3://...), or run the driver from a directory the workers share")
        return original(path)

    FileSystems.get_filesystem = staticmethod(get_filesystem)
    FileSystems.refuses_relative_paths_for_spark_runner = True


def probe_directory(backend: Any, path: str) -> bool:
    """Whether every Python worker of ``backend`` sees the driver's directory ``path``: one
    Spark job of a task per default partition looks there for a file the driver has just
    made (removed after). Where the driver cannot write, the workers must find the
    directory with the same entries."""
    try:
        handle, marker = tempfile.mkstemp(prefix=PROBE_FILE_PREFIX, dir=path)
        os.close(handle)
    except OSError:
        marker = None
    entries = None if marker else entries_digest(path)
    try:
        partitions = max(backend.default_parallelism, 1)
        probe = backend.source(list(range(partitions)), partitions).map_partitions(
            functools.partial(sees_here, path, marker and os.path.basename(marker), entries))
        answers = backend.collect(probe)
    finally:
        if marker:
            with contextlib.suppress(OSError):
                os.remove(marker)
    return bool(answers) and all(answers)


def sees_here(path: str, marker: Optional[str], entries: Optional[str],
              records: Iterable[Any]) -> Iterator[bool]:
    """A probe task: does this worker see the driver's ``path`` (its ``marker`` file, or
    the same ``entries``)?"""
    for _ in records:
        pass
    if not os.path.isdir(path):
        yield False
    elif marker is not None:
        yield os.path.exists(os.path.join(path, marker))
    else:
        yield entries is not None and entries_digest(path) == entries


def entries_digest(path: str) -> Optional[str]:
    """A digest of the names in directory ``path`` (None when it cannot be listed)."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    return hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()
