"""Input files a benchmark writes before any engine is timed: each event set's files
written once, into a scratch directory of their own, shared by every workload and engine,
and removed when done (:class:`ScratchFiles`; :mod:`bench.bids` and
:mod:`bench.nexmark.events` say what they write)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, Dict, Iterator, Optional, Type

from bench.workloads import EventSet


class ScratchFiles:
    """The files of each event set, written once (on the first :meth:`pattern`) by
    :meth:`write` into a scratch directory named after :attr:`prefix`; :meth:`close` removes
    them all. A subclass says what it writes."""

    #: The scratch directory's name starts with this.
    prefix = "bench-files-"

    def __init__(self, scratch_dir: Optional[str] = None) -> None:
        self._scratch_dir = scratch_dir
        self._directory: Optional[str] = None
        self._patterns: Dict[EventSet, str] = {}

    def write(self, event_set: EventSet, directory: str) -> str:
        """Write ``event_set``'s files into ``directory``; return their glob pattern."""
        raise NotImplementedError

    def pattern(self, event_set: EventSet) -> str:
        """The glob pattern of ``event_set``'s files, written now if they are not yet."""
        if event_set not in self._patterns:
            if self._directory is None:
                self._directory = tempfile.mkdtemp(prefix=self.prefix, dir=self._scratch_dir)
            name = f"{event_set.events}-{event_set.seed}-{event_set.shard_count}"
            self._patterns[event_set] = self.write(
                event_set, os.path.join(self._directory, name))
        return self._patterns[event_set]

    def close(self) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
        self._directory = None
        self._patterns.clear()

    def __enter__(self) -> "ScratchFiles":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


@contextlib.contextmanager
def files_for(kind: Type[ScratchFiles], event_set: EventSet, pattern: Optional[str] = None,
              scratch_dir: Optional[str] = None) -> Iterator[str]:
    """``pattern`` if given (files someone wrote for ``event_set``), else the pattern of
    files of ``kind`` written now for ``event_set`` and removed when the block ends: for a
    caller that runs a workload once (a test, the profiler). Write before starting a clock."""
    if pattern is not None:
        yield pattern
        return
    with kind(scratch_dir) as files:
        yield files.pattern(event_set)
