"""Durable storage of a streaming run: ``--checkpoint_dir`` on any filesystem Beam knows.

The checkpoint location holds what outlives an executor or a driver: each keyed step's state
files (written by the tasks on the executors at every commit) and the driver's checkpoint
manifests. It is named as Beam names storage, through ``apache_beam.io.filesystems``: a
local path (on a cluster, one every executor mounts), ``gs://`` (``apache-beam[gcp]``),
``s3://`` (``apache-beam[aws]``; ``--s3_endpoint_url`` and the other S3 options reach the
executors), ``hdfs://`` (``apache-beam[hadoop]``) or ``azfs://``.

Object stores have no atomic rename, so nothing here relies on one: an object appears whole
when its write is closed, and a local file is written under a temporary name and renamed
(POSIX rename is atomic). A checkpoint is complete once its manifest is written, and the
manifest is written last (:mod:`~runners.spark.streaming.checkpoint`).

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
from typing import Any, Dict, Iterable, List, Optional, Tuple

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

#: Pipeline options Beam's filesystems read (they travel to the executors with the tasks).
_FILESYSTEM_OPTION_CLASSES = (S3Options, GoogleCloudOptions, AzureOptions,
                              HadoopFileSystemOptions)
#: Bytes copied at a time when a large file (a state snapshot) moves to or from storage.
_COPY_BYTES = 8 << 20
_UNCOMPRESSED = CompressionTypes.UNCOMPRESSED


class StorageError(ValueError):
    """``--checkpoint_dir`` names storage this process cannot use (the message says why)."""


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
    """

    root: str
    options: Tuple[Tuple[str, Any], ...] = ()

    @classmethod
    def open(cls, location: str, options: Optional[PipelineOptions] = None,
             flag: str = "--checkpoint_dir") -> "DurableStorage":
        """Storage at ``location``, checked now: a scheme no installed filesystem serves, or
        a local path that is a file, raises :class:`StorageError` naming ``flag``."""
        location = location.strip()
        if not location:
            raise StorageError(f"{flag} is empty: give a directory or a URL (s3://bucket/x)")
        storage = cls(location if FileSystems.get_scheme(location) else
                      os.path.abspath(location), filesystem_options(options))
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
        return storage

    @property
    def is_local(self) -> bool:
        return FileSystems.get_scheme(self.root) is None

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
        self.use()
        if self.is_local:
            _write_local(path, lambda file: file.write(data))
            return
        with FileSystems.create(path, compression_type=_UNCOMPRESSED) as file:
            file.write(data)

    def read(self, path: str) -> bytes:
        self.use()
        with FileSystems.open(path, compression_type=_UNCOMPRESSED) as file:
            return file.read()

    def exists(self, path: str) -> bool:
        self.use()
        return FileSystems.exists(path)

    def list(self, directory: str) -> List[str]:
        """Paths of every object under ``directory`` (recursively), sorted."""
        self.use()
        if self.is_local:
            found = []
            for parent, _, names in os.walk(directory):
                found.extend(os.path.join(parent, name) for name in names)
            return sorted(found)
        prefix = directory.rstrip("/") + "/"
        matched = FileSystems.match([prefix + "**"])[0]
        return sorted(metadata.path for metadata in matched.metadata_list)

    def match(self, pattern: str) -> List[str]:
        """Paths matching a glob ``pattern`` (``*`` within one path segment), sorted."""
        self.use()
        matched = FileSystems.match([pattern])[0]
        return sorted(metadata.path for metadata in matched.metadata_list)

    def delete(self, paths: Iterable[str]) -> None:
        """Delete these objects (those already gone are ignored)."""
        self.use()
        paths = list(paths)
        if self.is_local:
            for path in paths:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                elif os.path.exists(path):
                    os.remove(path)
            return
        existing = [path for path in paths if FileSystems.exists(path)]
        if existing:
            FileSystems.delete(existing)

    # ----- large files
    def upload(self, local_path: str, path: str) -> int:
        """Copy the local file ``local_path`` to the object ``path``; returns its size."""
        self.use()
        with open(local_path, "rb") as source:
            if self.is_local:
                _write_local(path, lambda target: shutil.copyfileobj(source, target,
                                                                     _COPY_BYTES))
            else:
                with FileSystems.create(path, compression_type=_UNCOMPRESSED) as target:
                    shutil.copyfileobj(source, target, _COPY_BYTES)
        return os.path.getsize(local_path)

    def download(self, path: str, local_path: str) -> None:
        """Copy the object ``path`` to the local file ``local_path``."""
        self.use()
        with FileSystems.open(path, compression_type=_UNCOMPRESSED) as source, \
                open(local_path, "wb") as target:
            shutil.copyfileobj(source, target, _COPY_BYTES)


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
