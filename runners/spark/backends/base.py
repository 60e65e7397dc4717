"""What the engine asks of Spark: one interface, a backend per way of reaching Spark.

The engine (planning, fusion, the stage graph, bundles, coders, shuffle rules, the streaming
loop) is one code. It touches Spark only through a :class:`Backend` and the
:class:`Dataset` values it makes: how a stage's partitions run, how a shuffle moves records
to key partitions, how values reach the tasks (:meth:`Backend.broadcast`) and code reaches
the workers, how counters come back (:class:`RunMetrics`), how jobs are named and
cancelled (:class:`JobNames`), and where a keyed partition's task runs
(:class:`PartitionAffinity`). Classic Spark does these with RDDs, broadcasts, accumulators
and job descriptions (:mod:`~runners.spark.backends.classic`); Spark Connect with
DataFrames, Arrow batches, artifacts and job tags (:mod:`~runners.spark.backends.connect`).

A dataset holds the runner's records (:mod:`runners.spark.worker.records`); functions given to it
run in Spark's Python workers, one call per partition, and must pickle. Datasets are lazy:
nothing runs until :meth:`Backend.collect`.

>>> issubclass(Dataset, abc.ABC), sorted(Backend.KINDS)
(True, ['classic', 'connect'])
"""

from __future__ import annotations

import abc
import contextlib
import functools
import threading
from typing import Any, Callable, Iterable, Iterator, List, Mapping, Optional, Sequence

#: A function over one partition's records.
PartitionFunction = Callable[[Iterator[Any]], Iterable[Any]]
#: The same, given the partition's index first.
IndexedPartitionFunction = Callable[[int, Iterator[Any]], Iterable[Any]]


class Dataset(abc.ABC):
    """A lazy, partitioned collection of the runner's records on Spark."""

    @abc.abstractmethod
    def map_partitions(self, function: PartitionFunction) -> "Dataset":
        """``function`` over each partition (narrow: partitions stay as they are)."""

    @abc.abstractmethod
    def map_partitions_with_index(self, function: IndexedPartitionFunction) -> "Dataset":
        """``function(partition index, records)`` over each partition: the index of the Spark
        task's partition, a hint (e.g. where to start dealing elements round-robin): once
        datasets are unioned or coalesced, Spark Connect's tasks number partitions of the
        result, not of this dataset."""

    def filter(self, predicate: Callable[[Any], bool]) -> "Dataset":
        return self.map_partitions(functools.partial(_filtered, predicate))

    def map(self, function: Callable[[Any], Any]) -> "Dataset":
        return self.map_partitions(functools.partial(_mapped, function))

    @abc.abstractmethod
    def partition_by(self, partitions: int) -> "Dataset":
        """``(partition, record)`` pairs -> the records, each in partition ``partition %
        partitions`` (a shuffle)."""

    @abc.abstractmethod
    def group_by_key(self, partitions: int, partition_of: Callable[[Any], int]) -> "Dataset":
        """``(key, value)`` pairs -> ``(key, values)``, one per key, the key in partition
        ``partition_of(key) % partitions`` (a shuffle). Keys are ``bytes`` or tuples of
        ``bytes`` (compared by content); values are ``bytes``."""

    @abc.abstractmethod
    def coalesce(self, partitions: int) -> "Dataset":
        """The same records in at most ``partitions`` partitions (no shuffle)."""

    def unpersist(self) -> None:
        """Free what :meth:`Backend.compute_once` kept for this dataset (nothing by default)."""


def _filtered(predicate: Callable[[Any], bool], records: Iterable[Any]) -> Iterator[Any]:
    return (record for record in records if predicate(record))


def _mapped(function: Callable[[Any], Any], records: Iterable[Any]) -> Iterator[Any]:
    return (function(record) for record in records)


class Broadcast(abc.ABC):
    """A value every task of a run may read (picklable: tasks get the handle)."""

    @property
    @abc.abstractmethod
    def value(self) -> Any:
        """The value (in a task: fetched once per worker process)."""

    def unpersist(self) -> None:
        """Free the value where it was kept (call once no job needs it)."""


class MetricsSink(abc.ABC):
    """What a task hands its MonitoringInfos to (picklable)."""

    @abc.abstractmethod
    def report(self, packed: List[bytes]) -> Iterable[Any]:
        """Take a task's packed MonitoringInfos (:func:`runners.spark.worker.metrics.pack`); returns
        records the task must emit with its reports (empty where the backend gathers the
        metrics itself)."""


class RunMetrics(abc.ABC):
    """The MonitoringInfos of one run, gathered on the driver."""

    @property
    @abc.abstractmethod
    def sink(self) -> MetricsSink:
        """What the run's tasks report to."""

    @abc.abstractmethod
    def add(self, packed: List[bytes]) -> None:
        """Add updates made on the driver (the streaming loop's own metrics)."""

    @property
    @abc.abstractmethod
    def value(self) -> List[bytes]:
        """Every packed update so far."""

    def take(self, records: List[Any]) -> List[Any]:
        """``records`` collected from the run's jobs, without the metric updates among them
        (which this takes)."""
        return records


class JobNames(abc.ABC):
    """Names the jobs of one run in Spark's tools, and marks them for cancelling.

    Args:
      run_tag: the run's tag: what cancelling the run cancels.
    """

    def __init__(self, run_tag: str) -> None:
        self.run_tag = run_tag
        self.scope = "Beam pipeline"

    @abc.abstractmethod
    def start_run(self) -> None:
        """Tag every job the calling thread starts with the run's tag (call in the run's
        thread)."""

    def start_batch(self, batch: int) -> None:
        """The jobs that follow belong to micro-batch ``batch``."""
        self.scope = f"Beam micro-batch {batch}"

    def job(self, what: str, steps: Sequence[str] = ()) -> "contextlib.AbstractContextManager":
        """Name the Spark job started inside: the scope and ``what``, and the Beam steps its
        last stage runs."""
        return contextlib.nullcontext()

    def call_site(self, short: str, long: Optional[str] = None
                  ) -> "contextlib.AbstractContextManager":
        """Name the Spark stages whose data is made inside (where Spark has such names)."""
        return contextlib.nullcontext()


class PartitionAffinity(abc.ABC):
    """Runs a keyed step's partition ``i`` where the step's partition ``i`` ran before (the
    executor holding its state store), as far as the backend can ask Spark for that."""

    #: False where every partition runs where Spark puts it (a local master: one executor).
    enabled: bool = False
    #: key partitions of every keyed step (the streaming loop sets it when it resumes)
    partitions: int = 1

    @abc.abstractmethod
    def run(self, place: str, dataset: Dataset, function: IndexedPartitionFunction) -> Dataset:
        """``dataset.map_partitions_with_index(function)``, each partition's task placed by
        ``place`` (one place per keyed step)."""

    @abc.abstractmethod
    def run_at_every_place(self, function: IndexedPartitionFunction) -> List[Any]:
        """Run ``function`` once where each place's partitions are (once anywhere when
        there is no place yet); returns what the calls yielded."""

    def spread(self, batch: int, holders: Mapping[str, Mapping[int, str]],
               names: Optional[JobNames] = None) -> None:
        """Between batches: when executors joined since the last look, move some places'
        partitions onto them (:mod:`~runners.spark.backends.spreading`). ``holders`` is
        place -> partition -> the executor its last task reported
        (:func:`~runners.spark.executor_identity.executor_name`); ``names`` names a job the
        look may run. Nothing by default."""

    def release(self) -> None:
        """Forget every place."""


class Backend(abc.ABC):
    """One way of reaching Spark (see the module docstring)."""

    KINDS = ("classic", "connect")
    #: "classic" or "connect"
    kind: str = ""

    @property
    @abc.abstractmethod
    def default_parallelism(self) -> int:
        """Partitions of a shuffle when the pipeline does not say."""

    @property
    @abc.abstractmethod
    def single_executor(self) -> bool:
        """True when every task runs on one executor (a local master)."""

    @abc.abstractmethod
    def source(self, records: Sequence[Any], partitions: int = 1) -> Dataset:
        """``records`` from the driver, dealt over ``partitions`` partitions."""

    def empty(self) -> Dataset:
        return self.source([], 1)

    @abc.abstractmethod
    def union(self, datasets: Sequence[Dataset]) -> Dataset:
        """The records of every dataset, their partitions side by side."""

    @abc.abstractmethod
    def compute_once(self, dataset: Dataset) -> Dataset:
        """The same records, computed once however many readers (and jobs) read them; call
        ``unpersist()`` on the result when the pass is over."""

    @abc.abstractmethod
    def collect(self, dataset: Dataset) -> List[Any]:
        """Run a job: every record of ``dataset``, on the driver."""

    @abc.abstractmethod
    def broadcast(self, value: Any) -> Broadcast:
        """``value`` for every task (see :class:`Broadcast`)."""

    @abc.abstractmethod
    def run_metrics(self) -> RunMetrics:
        """A new run's metrics."""

    @abc.abstractmethod
    def job_names(self, run_tag: str) -> JobNames:
        """The job names of a new run tagged ``run_tag``."""

    @abc.abstractmethod
    def cancel(self, run_tag: str) -> None:
        """Cancel every running job of the run tagged ``run_tag``."""

    @abc.abstractmethod
    def partition_affinity(self, partitions: int) -> PartitionAffinity:
        """Placement of a streaming run's keyed partitions."""

    def sees_directory(self, path: str) -> bool:
        """Whether this Spark's Python workers see the driver's directory ``path``: the
        same files, so that a relative path means there what it means to the driver
        (:mod:`runners.spark.dependencies.working_directory`). This default asks with one small Spark
        job each time."""
        from runners.spark.dependencies.working_directory import probe_directory

        return probe_directory(self, path)

    # ----- code and files for the workers
    @abc.abstractmethod
    def ship_project(self) -> None:
        """Make the project's own packages importable in every Python worker of this Spark
        (once per content)."""

    @abc.abstractmethod
    def add_python_file(self, path: str) -> None:
        """A ``.py``, ``.zip`` or ``.egg`` on every Python worker's path."""

    @abc.abstractmethod
    def add_file(self, path: str) -> None:
        """A file tasks find with ``SparkFiles.get(basename)``."""

    def stop(self) -> None:
        """Stop this Spark (what the runner made and owns: a job server's)."""

    def thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        """A daemon thread to run a pipeline in: it starts jobs as the calling thread would
        (with what Spark keeps per thread: local properties, session tags)."""
        return threading.Thread(target=target, name=name, daemon=True)

    def describe(self) -> str:
        """What this backend runs on, for messages."""
        return self.kind

