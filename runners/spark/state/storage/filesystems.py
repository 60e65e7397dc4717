"""Durable storage of a streaming run: ``--checkpoint_dir`` on any filesystem Beam knows.

The checkpoint location holds what outlives an executor or a driver: each keyed step's state
files (written by the tasks on the executors at every commit) and the driver's checkpoint
manifests. It is named as Beam names storage, through ``apache_beam.io.filesystems``: a
local path (on a cluster, one every executor mounts), ``gs://`` (``apache-beam[gcp]``),
``s3://`` (``apache-beam[aws]``; ``--s3_endpoint_url`` and the other S3 options reach the
executors), ``hdfs://`` (``apache-beam[hadoop]``) or ``azfs://``. ``s3://`` is reached
through the runner's own boto3 client (:mod:`~runners.spark.state.storage.s3`: one
request per object, retries the runner's own), the other schemes through Beam's.

Every operation retries transient errors (throttling, server errors, resets, timeouts) for
up to ``--storage_retry_seconds``, fails at once on a permanent one (a missing bucket, bad
credentials: the message names the setting) and says so when a disk is full
(:mod:`~runners.spark.state.storage.faults`). A storage whose root is not local is probed
with a small write when opened, so permanent errors show before the job starts.

Object stores have no atomic rename, so nothing here relies on one: an object appears whole
when its write is closed, and a local file is written under a temporary name and renamed
(POSIX rename is atomic). A checkpoint is complete once its manifest is written, and the
manifest is written last (:mod:`~runners.spark.state.checkpoint`).

A :class:`DurableStorage` is plain data (the root and the filesystem options), so it is
shipped to the executors with the tasks that write state files.

>>> import tempfile
>>> storage = DurableStorage.open(tempfile.mkdtemp())
>>> storage.write(storage.join("a", "b.bin"), b"data")
>>> storage.read(storage.join("a", "b.bin")), storage.exists(storage.join("a", "c.bin"))
(b'data', False)
>>> [path.rsplit("/", 1)[-1] for path in storage.list(storage.join("a"))]
['b.bin']
>>> storage.join(storage.join("a"), "c.bin") == storage.join("a", "c.bin")
True
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, TypeVar

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    AzureOptions,
    GoogleCloudOptions,
    HadoopFileSystemOptions,
    PipelineOptions,
    S3Options,
)

from runners.spark.beam_internals import share_s3_clients
from runners.spark.state.storage.faults import (  # noqa: F401 (StorageError: its home was here)
    DEFAULT_RETRY_SECONDS,
    RetryPolicy,
    StorageError,
    StorageFullError,
    full_disk,
    retried,
)
from runners.spark.state.storage.s3 import S3Objects

#: Pipeline options Beam's filesystems read (they travel to the executors with the tasks).
_FILESYSTEM_OPTION_CLASSES = (S3Options, GoogleCloudOptions, AzureOptions,
                              HadoopFileSystemOptions)
#: Bytes copied at a time when a large file (a state snapshot) moves to or from storage.
_COPY_BYTES = 8 << 20
_UNCOMPRESSED = CompressionTypes.UNCOMPRESSED
_T = TypeVar("_T")
#: Seconds the probe of a new checkpoint location retries transient errors.
_PROBE_RETRY_SECONDS = 30.0


def _filesystem_option_names() -> frozenset:
    names = set()
    for options_class in _FILESYSTEM_OPTION_CLASSES:
        parser = argparse.ArgumentParser(add_help=False)
        options_class._add_argparse_args(parser)  # Beam's own way to list a class's options
        names.update(action.dest for action in parser._actions)
    return frozenset(names)


def filesystem_options(options: Optional[PipelineOptions]) -> Tuple[Tuple[str, Any], ...]:
    """The options Beam's filesystems read that ``options`` sets (e.g. ``s3_endpoint_url``),
    as plain data.

    >>> filesystem_options(PipelineOptions(["--s3_endpoint_url", "http://127.0.0.1:9000",
    ...                                     "--streaming"]))
    (('s3_endpoint_url', 'http://127.0.0.1:9000'),)
    """
    if options is None:
        return ()
    names = _filesystem_option_names()
    given = options.get_all_options(drop_default=True, retain_unknown_options=False)
    return tuple(sorted((name, value) for name, value in given.items()
                        if name in names and value is not None))


@dataclasses.dataclass(frozen=True)
class DurableStorage:
    """A directory of durable storage (see the module docstring).

    Args:
      root: the directory: an absolute local path or a URL (``s3://bucket/prefix``).
      options: the filesystem options as plain ``(name, value)`` pairs.
      retry_seconds: how long one operation may retry transient errors
        (``--storage_retry_seconds``; :mod:`~runners.spark.state.storage.faults`).
    """

    root: str
    options: Tuple[Tuple[str, Any], ...] = ()
    retry_seconds: float = DEFAULT_RETRY_SECONDS

    @classmethod
    def open(cls, location: str, options: Optional[PipelineOptions] = None,
             flag: str = "--checkpoint_dir", retry_seconds: float = DEFAULT_RETRY_SECONDS,
             probe: bool = True) -> "DurableStorage":
        """Storage at ``location``, checked now: a scheme no installed filesystem serves, a
        local path that is a file, or (``probe``: a job about to write there) an object
        store that refuses a first write (a missing bucket, bad credentials) raises
        :class:`StorageError` naming the setting."""
        location = location.strip()
        if not location:
            raise StorageError(f"{flag} is empty: give a directory or a URL (s3://bucket/x)")
        if retry_seconds <= 0:
            raise StorageError(f"--storage_retry_seconds={retry_seconds}: give a positive "
                               "number of seconds")
        storage = cls(location if FileSystems.get_scheme(location) else
                      os.path.abspath(location), filesystem_options(options), retry_seconds)
        scheme = FileSystems.get_scheme(storage.root)
        storage.use()
        try:
            FileSystems.get_filesystem(storage.root)
        except ValueError as error:
            raise StorageError(
                f"{flag}={location}: no filesystem for '{scheme}://' is installed here "
                "(Beam's filesystems: local paths, gs:// with apache-beam[gcp], s3:// with "
                "apache-beam[aws], hdfs:// with apache-beam[hadoop], azfs:// with "
                f"apache-beam[azure]); install the matching extra ({error})") from None
        if storage.is_local and os.path.exists(storage.root) and not os.path.isdir(storage.root):
            raise StorageError(f"{flag}={location}: not a directory")
        if probe and not storage.is_local:
            storage._probe(flag, location)
        return storage

    def _probe(self, flag: str, location: str) -> None:
        """Write and delete a small object: permanent errors (a missing bucket, bad
        credentials) show now, naming the setting, not at the first checkpoint."""
        probe = self.join(f".probe-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        # A short budget: an endpoint that does not answer at start is more likely wrong
        # than busy.
        quick = dataclasses.replace(self, retry_seconds=min(self.retry_seconds,
                                                            _PROBE_RETRY_SECONDS))
        try:
            quick.write(probe, b"probe")
            quick.delete([probe])
        except StorageError as error:
            raise StorageError(f"{flag}={location}: {error}") from None

    @property
    def is_local(self) -> bool:
        return FileSystems.get_scheme(self.root) is None

    @property
    def _retry_policy(self) -> RetryPolicy:
        return RetryPolicy(budget_seconds=self.retry_seconds)

    def _files(self) -> Any:
        """Who reaches this storage: the runner's own S3 client for ``s3://`` (see
        :mod:`~runners.spark.state.storage.s3`), the local filesystem, or Beam's
        filesystems for the other schemes; each with the same whole-object operations."""
        self.use()
        if self.root.startswith("s3://"):
            return S3Objects(self.options)
        return _LOCAL_FILES if self.is_local else _BEAM_FILES

    def _retried(self, operation: str, path: str, call: Callable[[], _T],
                 needed: Optional[int] = None) -> _T:
        return retried(operation, path, call, self._retry_policy, needed)

    def use(self) -> None:
        """Give Beam's filesystems this storage's options (once per process and options)."""
        if self.root.startswith("s3://"):
            share_s3_clients()
        if self.options and _OPTIONS_IN_USE.get("options") != self.options:
            FileSystems.set_options(PipelineOptions.from_dictionary(dict(self.options)))
            _OPTIONS_IN_USE["options"] = self.options

    def join(self, *parts: str) -> str:
        """A path in this storage: ``parts`` under the root, or under ``parts[0]`` when that
        is a path of this storage already."""
        if parts and parts[0].startswith(self.root):
            return FileSystems.join(parts[0], *parts[1:]) if len(parts) > 1 else parts[0]
        return FileSystems.join(self.root, *parts) if parts else self.root

    # ----- whole objects
    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` as the object ``path``; a reader sees all of it or nothing."""
        files = self._files()
        self._retried("writing", path, lambda: files.write(path, data), len(data))

    def read(self, path: str) -> bytes:
        files = self._files()
        return self._retried("reading", path, lambda: files.read(path))

    def exists(self, path: str) -> bool:
        files = self._files()
        return self._retried("looking up", path, lambda: files.exists(path))

    def list(self, directory: str) -> List[str]:
        """Paths of every object under ``directory`` (recursively), sorted."""
        files, prefix = self._files(), directory.rstrip("/") + "/"
        return self._retried("listing", directory, lambda: files.list(prefix))

    def match(self, pattern: str) -> List[str]:
        """Paths matching a glob ``pattern`` (``*`` within one path segment), sorted."""
        files = self._files()
        return self._retried("listing", pattern, lambda: files.match(pattern))

    def delete(self, paths: Iterable[str]) -> None:
        """Delete these objects (those already gone are ignored)."""
        paths = list(paths)
        if paths:
            files = self._files()
            self._retried("deleting", f"{len(paths)} objects under {self.root}",
                          lambda: files.delete(paths))

    # ----- large files
    def upload(self, local_path: str, path: str) -> int:
        """Copy the local file ``local_path`` to the object ``path``; returns its size."""
        size = os.path.getsize(local_path)
        files = self._files()
        self._retried("writing", path, lambda: files.upload(local_path, path), size)
        return size

    def download(self, path: str, local_path: str) -> None:
        """Copy the object ``path`` to the local file ``local_path``."""
        files = self._files()
        try:
            self._retried("reading", path, lambda: files.download(path, local_path))
        except StorageFullError as error:
            raise full_disk(f"copying {path} to {local_path}", local_path,
                            self._size_or_none(path)) from error

    def _size_or_none(self, path: str) -> Optional[int]:
        try:
            return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
        except Exception:  # only for a message: the size is a courtesy
            return None


class _BeamFiles:
    """Whole-object operations through Beam's filesystems (any scheme they serve; the
    storage's options given to them by :meth:`DurableStorage.use`)."""

    def write(self, path: str, data: bytes) -> None:
        self._create(path, lambda file: file.write(data))

    def read(self, path: str) -> bytes:
        with FileSystems.open(path, compression_type=_UNCOMPRESSED) as file:
            return file.read()

    def exists(self, path: str) -> bool:
        return FileSystems.exists(path)

    def list(self, prefix: str) -> List[str]:
        return self.match(prefix + "**")

    def match(self, pattern: str) -> List[str]:
        matched = FileSystems.match([pattern])[0]
        return sorted(metadata.path for metadata in matched.metadata_list)

    def delete(self, paths: List[str]) -> None:
        existing = [path for path in paths if FileSystems.exists(path)]
        if existing:
            FileSystems.delete(existing)

    def upload(self, local_path: str, path: str) -> None:
        with open(local_path, "rb") as source:
            self._create(path, lambda target: shutil.copyfileobj(source, target, _COPY_BYTES))

    def download(self, path: str, local_path: str) -> None:
        with FileSystems.open(path, compression_type=_UNCOMPRESSED) as source, \
                open(local_path, "wb") as target:
            shutil.copyfileobj(source, target, _COPY_BYTES)

    def _create(self, path: str, write: Callable[[Any], Any]) -> None:
        with FileSystems.create(path, compression_type=_UNCOMPRESSED) as file:
            write(file)


class _LocalFiles(_BeamFiles):
    """A local directory: a file is written under a temporary name and renamed into place
    (a reader sees all of it or nothing), and listings walk the directory."""

    def list(self, prefix: str) -> List[str]:
        found = []
        for parent, _, names in os.walk(prefix):
            found.extend(os.path.join(parent, name) for name in names)
        return sorted(found)

    def delete(self, paths: List[str]) -> None:
        for path in paths:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)

    def _create(self, path: str, write: Callable[[Any], Any]) -> None:
        _write_local(path, write)


_BEAM_FILES, _LOCAL_FILES = _BeamFiles(), _LocalFiles()


#: The filesystem options this process gave Beam last (FileSystems keeps one set).
_OPTIONS_IN_USE: Dict[str, Any] = {}


def _write_local(path: str, write: Any) -> None:
    """Write a local file under a temporary name, sync it, then rename it into place."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".incomplete-", dir=directory)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
