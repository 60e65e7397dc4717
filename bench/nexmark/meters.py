"""Meters on every function the SparkRunner runs over a partition, in Spark's Python workers:
the CPU each spends on its own, without the time of its input, and optionally a cProfile.

A meter wraps a partition function (a fused stage's ``process_partition``, a shuffle's map
or reduce side) as the driver hands it to Spark (:func:`metering` wraps the classic
backend's ``map_partitions``). In the worker, time is charged to the innermost function
at work: a stage's time stops while it pulls its input (its upstream stage, when Spark
pipelines the two into one task, has its own meter; PySpark reading records from the JVM
has none). What no meter covers is charged to :data:`OUTSIDE`: PySpark's worker around the
functions, reading and pickling records to and from the JVM, and the Python side of
Spark's shuffles (``partitionBy``, ``groupByKey``'s merge), and the time a worker waits
for its next task.

Each charged interval is measured as thread CPU time (``time.thread_time``) and wall time,
and Python's garbage collections as the part of it spent collecting (``gc.callbacks``);
with ``profile`` each label also has its own ``cProfile.Profile``, enabled exactly while
the label is charged (cProfile measures wall time, and its hooks inflate code that calls
many functions: the report scales its times to the CPU measured, see
:mod:`bench.nexmark.attribution`).

A worker writes what it measured into ``directory`` (one file per process, rewritten with
its totals so far whenever a metered function ends, and by :func:`flush_workers`, which
the driver runs after the pipeline so that the time after each worker's last function
is included).

>>> meter = PartitionMeter(lambda records: (2 * record for record in records), "double",
...                        directory=None, run_id="doctest")
>>> list(meter(iter([1, 2, 3])))
[2, 4, 6]
>>> totals()["double"].cpu >= 0.0
True
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import gc
import os
import pickle
import pstats
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

#: The label of what no meter covers (PySpark's worker, the JVM's records, waiting).
OUTSIDE = "outside the runner's functions"


@dataclass
class LabelTotals:
    """What one label was charged in one worker process."""

    cpu: float = 0.0
    wall: float = 0.0
    resumes: int = 0
    tasks: int = 0  # calls of the function: the partitions it ran over
    gc_cpu: float = 0.0  # of ``cpu``: Python's garbage collections while charged
    collections: int = 0
    stats: Optional[Dict[Any, Any]] = None  # pstats' table, when profiled
    profile: Optional[cProfile.Profile] = field(default=None, repr=False)


class _Worker:
    """This process's meters: the labels charged, innermost last (:data:`OUTSIDE` at the
    bottom), and what each was charged."""

    def __init__(self, run_id: str, profile: bool) -> None:
        self.run_id = run_id
        self.profile = profile
        self.labels: Dict[str, LabelTotals] = {}
        self.stack: List[str] = []
        self.started_cpu = self.started_wall = 0.0
        self._collection_began = 0.0
        self._push(OUTSIDE)
        gc.callbacks.append(self._on_collection)

    def _on_collection(self, phase: str, info: Dict[str, Any]) -> None:
        """Charge a garbage collection to the label it interrupted (its CPU stays in the
        label's; this says how much of it was collecting)."""
        if phase == "start":
            self._collection_began = time.thread_time()
        elif self.stack:
            totals = self.labels[self.stack[-1]]
            totals.gc_cpu += time.thread_time() - self._collection_began
            totals.collections += 1

    def _totals(self, label: str) -> LabelTotals:
        totals = self.labels.get(label)
        if totals is None:
            totals = self.labels[label] = LabelTotals()
            if self.profile:
                totals.profile = cProfile.Profile()
        return totals

    def _pause(self) -> None:
        totals = self.labels[self.stack[-1]]
        if totals.profile is not None:
            totals.profile.disable()
        totals.cpu += time.thread_time() - self.started_cpu
        totals.wall += time.perf_counter() - self.started_wall

    def _resume(self) -> None:
        totals = self.labels[self.stack[-1]]
        totals.resumes += 1
        self.started_cpu, self.started_wall = time.thread_time(), time.perf_counter()
        if totals.profile is not None:
            totals.profile.enable()

    def _push(self, label: str) -> None:
        if self.stack:
            self._pause()
        self._totals(label)
        self.stack.append(label)
        self._resume()

    def push(self, label: str) -> None:
        self._push(label)

    def pop(self) -> None:
        self._pause()
        self.stack.pop()
        self._resume()

    def close(self) -> None:
        """Stop measuring (every profiler disabled)."""
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        self._pause()
        for totals in self.labels.values():
            if totals.profile is not None:
                totals.profile.disable()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Within the block, time is charged to no one (the meters' own work)."""
        self._pause()
        try:
            yield
        finally:
            self._resume()

    def snapshot(self) -> Dict[str, LabelTotals]:
        """The totals so far, each profile's table taken (call it paused)."""
        taken = {}
        for label, totals in self.labels.items():
            stats = None
            if totals.profile is not None:
                totals.profile.create_stats()
                stats = dict(pstats.Stats(totals.profile).stats)  # type: ignore[attr-defined]
            taken[label] = LabelTotals(totals.cpu, totals.wall, totals.resumes, totals.tasks,
                                       totals.gc_cpu, totals.collections, stats)
        return taken


_WORKER: Optional[_Worker] = None


def _worker(run_id: str, profile: bool) -> _Worker:
    """This process's meters for run ``run_id`` (a new run starts from nothing)."""
    global _WORKER
    if _WORKER is None or _WORKER.run_id != run_id:
        if _WORKER is not None:
            _WORKER.close()
        _WORKER = _Worker(run_id, profile)
    return _WORKER


def totals() -> Dict[str, LabelTotals]:
    """What this process's meters were charged so far (per label)."""
    if _WORKER is None:
        return {}
    with _WORKER.paused():
        return _WORKER.snapshot()


def _write(directory: Optional[str], flushed: bool) -> None:
    if directory is None or _WORKER is None:
        return
    with _WORKER.paused():
        record = {"pid": os.getpid(), "run_id": _WORKER.run_id, "flushed": flushed,
                  "labels": _WORKER.snapshot()}
        path = os.path.join(directory, f"worker-{os.getpid()}.pickle")
        with tempfile.NamedTemporaryFile("wb", dir=directory, delete=False) as output:
            pickle.dump(record, output)
        os.replace(output.name, path)


class PartitionMeter:
    """A partition function (``function(records)``, or ``function(index, records)`` with
    ``indexed``) charged to ``label`` in the worker; picklable as the function is."""

    def __init__(self, function: Callable[..., Iterable[Any]], label: str,
                 directory: Optional[str], run_id: str, profile: bool = False,
                 indexed: bool = False) -> None:
        self.function = function
        self.label = label
        self.directory = directory
        self.run_id = run_id
        self.profile = profile
        self.indexed = indexed

    def __call__(self, *arguments: Any) -> Iterator[Any]:
        worker = _worker(self.run_id, self.profile)
        *leading, records = arguments
        worker.push(self.label)
        worker.labels[self.label].tasks += 1
        try:
            outputs = iter(self.function(*leading, _input(worker, records)))
        finally:
            worker.pop()
        return self._metered(worker, outputs)

    def _metered(self, worker: _Worker, outputs: Iterator[Any]) -> Iterator[Any]:
        try:
            while True:
                worker.push(self.label)
                try:
                    output = next(outputs)
                except StopIteration:
                    return
                finally:
                    worker.pop()
                yield output
        finally:
            _write(self.directory, flushed=False)


def _input(worker: _Worker, records: Iterable[Any]) -> Iterator[Any]:
    """A metered function's input: pulling it is charged to whoever produces it."""
    iterator = iter(records)
    while True:
        worker.push(OUTSIDE)
        try:
            record = next(iterator)
        except StopIteration:
            return
        finally:
            worker.pop()
        yield record


def _flush_partition(directory: str, run_id: str, records: Iterable[Any]) -> Iterator[Any]:
    for _ in records:
        pass
    if _WORKER is not None and _WORKER.run_id == run_id:
        _write(directory, flushed=True)
        yield os.getpid()


def flush_workers(spark_context: Any, directory: str, run_id: str, rounds: int = 3,
                  tasks: int = 8) -> None:
    """Have the Python workers that metered ``run_id`` write their totals now (a few
    small jobs: Spark hands their tasks to idle workers in turn)."""
    flush = functools.partial(_flush_partition, directory, run_id)
    for _ in range(rounds):
        spark_context.parallelize(range(tasks), tasks).mapPartitions(flush).collect()


def read_workers(directory: str, run_id: str) -> List[Dict[str, Any]]:
    """Every worker's last record of ``run_id``."""
    records = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("worker-") and name.endswith(".pickle"):
            with open(os.path.join(directory, name), "rb") as written:
                record = pickle.load(written)
            if record["run_id"] == run_id:
                records.append(record)
    return records


def label_of(function: Any) -> str:
    """A partition function's label: a fused stage's first and last steps (its index
    and name may differ from run to run of the same pipeline), or the runner's function
    and the GroupByKey it serves."""
    if isinstance(function, functools.partial):
        stage = stage_steps(function)
        if stage is not None:
            steps = stage.steps or (stage.name,)
            shown = steps[0] if len(steps) == 1 else f"{steps[0]} .. {steps[-1]}"
            return f"stage [{shown}] ({len(steps)} steps)"
        spec = next((argument for argument in function.args
                     if hasattr(argument, "transform_name")), None)
        name = getattr(function.func, "__name__", repr(function.func))
        return f"{name} ({spec.transform_name})" if spec is not None else name
    return getattr(function, "__qualname__", repr(function))


def stage_steps(function: Any) -> Optional[Any]:
    """The fused stage's steps when ``function`` runs a stage (None otherwise)."""
    if isinstance(function, functools.partial):
        for argument in function.args:
            stage = getattr(argument, "stage", None)
            if stage is not None and hasattr(stage, "steps"):
                return stage
    return None


@contextlib.contextmanager
def metering(directory: str, run_id: str, profile: bool,
             stages: Dict[str, Any]) -> Iterator[None]:
    """Within the block, every partition function the classic backend gets is metered
    (``stages`` receives each metered stage's ``StageSpec`` by label)."""
    from runners.spark.backends.classic_dataset import ClassicDataset

    originals = ClassicDataset.map_partitions, ClassicDataset.map_partitions_with_index

    def meter(function: Any, indexed: bool) -> PartitionMeter:
        label = label_of(function)
        stage = stage_steps(function)
        if stage is not None:
            stages[label] = stage
        return PartitionMeter(function, label, directory, run_id, profile, indexed)

    def map_partitions(self, function):
        return originals[0](self, meter(function, indexed=False))

    def map_partitions_with_index(self, function):
        return originals[1](self, meter(function, indexed=True))

    ClassicDataset.map_partitions = map_partitions  # type: ignore[method-assign]
    ClassicDataset.map_partitions_with_index = map_partitions_with_index  # type: ignore
    try:
        yield
    finally:
        ClassicDataset.map_partitions, ClassicDataset.map_partitions_with_index = originals
