"""Peak memory of the benchmark process and of the processes it started, during one run.

What is measured, by sampling Linux ``/proc`` every :data:`SAMPLE_SECONDS`:

- ``driver``: this Python process.
- ``jvm``: every Java process below this one (with a ``local[N]`` master that is Spark's
  driver *and* executor JVM; with a ``spark://`` master the executors run under the
  cluster's worker, not below us, and are not counted).
- ``python_workers``: every Python process below this one (PySpark's worker daemon and the
  workers it forks: where PySpark and SparkRunner code runs).

Each figure is PSS (proportional set size: shared pages divided among their sharers, so
forked workers are not counted twice), summed over the group's processes at one instant;
the peak is the largest such sum seen during the run. A JVM's heap does not shrink, so its
peak includes what earlier runs left. Short peaks between two samples are missed. Off Linux,
every figure is None. ``resource.getrusage`` (the driver's lifetime peak RSS) is reported
alongside, by the caller.

>>> with PeakMemory() as peak:
...     buffer = bytearray(50 * 1024 * 1024)
>>> peak.result()["driver"] is None or peak.result()["driver"] > 40
True
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Dict, List, Optional

SAMPLE_SECONDS = 0.2
PROC = Path("/proc")


def _children_table() -> Dict[int, List[int]]:
    table: Dict[int, List[int]] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        table.setdefault(parent, []).append(int(entry.name))
    return table


def _descendants(pid: int) -> List[int]:
    table = _children_table()
    found, frontier = [], [pid]
    while frontier:
        for child in table.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def _proportional_megabytes(pid: int) -> float:
    """PSS in MiB (RSS where the kernel has no smaps_rollup); 0 if the process is gone."""
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _kind(pid: int) -> str:
    try:
        command = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return "gone"
    name = os.path.basename(command.decode(errors="replace"))
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "python_workers"
    return "other"


class PeakMemory:
    """Context manager sampling peak memory (MiB) of the driver, its JVMs and Python workers."""

    def __init__(self, sample_seconds: float = SAMPLE_SECONDS) -> None:
        self.sample_seconds = sample_seconds
        self.available = (PROC / "self" / "stat").exists()
        self.peaks: Dict[str, float] = {"driver": 0.0, "jvm": 0.0, "python_workers": 0.0}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _sample(self) -> None:
        me = os.getpid()
        totals = {"driver": _proportional_megabytes(me), "jvm": 0.0, "python_workers": 0.0}
        for pid in _descendants(me):
            kind = _kind(pid)
            if kind in totals:
                totals[kind] += _proportional_megabytes(pid)
        for kind, total in totals.items():
            self.peaks[kind] = max(self.peaks[kind], total)

    def _loop(self) -> None:
        while not self._stop.wait(self.sample_seconds):
            self._sample()

    def __enter__(self) -> "PeakMemory":
        if self.available:
            self._sample()
            self._thread = threading.Thread(target=self._loop, name="peak-memory", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._sample()

    def result(self) -> Dict[str, Optional[float]]:
        """Peaks in MiB, rounded; None when not measurable here (or no such process ran)."""
        if not self.available:
            return {kind: None for kind in self.peaks}
        return {kind: (round(value, 1) if value else None) for kind, value in self.peaks.items()}
