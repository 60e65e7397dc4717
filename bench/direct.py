"""Beam's DirectRunner as its users run it: in a new Python process of its own.

Importing the SparkRunner installs its fast paths for Beam's timestamps and windows
(``runners/spark/fast_paths.py``) in the importing process, and the benchmark's process
imports it: a DirectRunner run there would be faster than Beam's own (measured: the keyed
windowed sum at 99,292 events/s there, 66,198 in a process of its own). So the
DirectRunner row runs in a process started with ``spawn`` (nothing inherited), one for the
whole benchmark (its warm-up runs warm it), which checks that the runner's module was not
imported, and reports its own time and peak memory (a lifetime peak: the largest run so
far).

>>> from bench.workloads import EventSet
>>> timing = {}
>>> run_direct_runner("global_sum", EventSet(100), timing) > 0  # doctest: +SKIP
True
"""

from __future__ import annotations

import atexit
import multiprocessing
import resource
import sys
from typing import Any, Dict, Optional, Tuple

from bench.workloads import EventSet

#: The module whose import patches Beam: it must not be in the DirectRunner's process.
PATCHING_MODULE = "runners.spark.fast_paths"


def _run_in_this_process(workload: str, event_set: EventSet,
                         inputs: Optional[str] = None) -> Tuple[Any, float, float]:
    from bench.beam_jobs import run_beam

    timing: Dict[str, float] = {}
    answer = run_beam(workload, event_set, "DirectRunner", timing=timing, inputs=inputs)
    if PATCHING_MODULE in sys.modules:
        raise RuntimeError(f"{PATCHING_MODULE} was imported in the DirectRunner's process: "
                           "its figures would not be Beam's own")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return answer, timing["seconds"], peak_mib


_process: Optional[Any] = None


def _the_process() -> Any:
    """One process for every DirectRunner run of this benchmark, so its warm-up runs warm
    it as the other engines' warm them (imports, Beam's caches); stopped at exit."""
    global _process
    if _process is None:
        _process = multiprocessing.get_context("spawn").Pool(1)
        atexit.register(_process.terminate)
    return _process


def run_direct_runner(workload: str, event_set: EventSet, timing: Dict[str, float],
                      inputs: Optional[str] = None) -> Any:
    """The DirectRunner's answer to ``workload``, run in the DirectRunner's own process;
    ``timing`` receives ``seconds`` (the run, without the read-back) and ``peak_mib`` (that
    process's peak RSS so far). ``inputs``: the pattern of ``parse_filter_project``'s bid
    files (None: that process writes them before its clock starts)."""
    answer, seconds, peak_mib = _the_process().apply(_run_in_this_process,
                                                     (workload, event_set, inputs))
    timing.update(seconds=seconds, peak_mib=peak_mib)
    return answer
