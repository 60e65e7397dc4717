"""Spark Connect: the engine's datasets as DataFrames, on a session with no SparkContext.

Spark Connect (Spark 4's thin client, ``sc://host:port``; Databricks serverless and standard
access mode) offers DataFrames and no RDD, broadcast, accumulator or job description. The
engine runs there unchanged; only this backend differs:

* **stages**: a dataset is a DataFrame of pickled records (:mod:`~runners.spark.backends.
  connect_rows`) plus the Python functions still to apply to each partition
  (:mod:`~runners.spark.backends.connect_dataset`); successive
  functions run in one ``mapInArrow`` pass, as PySpark pipelines an RDD's, so a fused stage
  costs one trip through a Python worker;
* **shuffles**: ``repartitionById`` on the target partition (``crc32(key) % n`` stays the
  partitioner), and for a GroupByKey ``sortWithinPartitions`` on the group key, whose rows
  the reduce side then reads group by group (Spark's sort spills, as its groupByKey does);
* **computed once**: a dataset read by several readers is persisted (memory and disk);
* **values for tasks**: in the pickled function (small), or as an artifact file tasks read
  once per worker process (:class:`ConnectBroadcast`);
* **metrics**: each task emits its MonitoringInfos as a report record, which the run's job
  collects with its other reports (:class:`ReportedMetrics`);
* **names and cancelling**: job tags (:mod:`~runners.spark.backends.connect_names`);
* **keyed streaming steps**: each cogrouped with a persisted pointer DataFrame, so that its
  key partitions run where their stores are; on one executor, shuffled with a marker row per
  key partition instead (:mod:`~runners.spark.backends.connect_affinity`);
* **code**: the project's packages and what a pipeline stages are session artifacts.

A session is checked once, at first use (:mod:`~runners.spark.backends.connect_checks`):
a server older than 4.1, or workers that cannot run the runner, are refused with what to do.

>>> ConnectBackend.kind
'connect'
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import tempfile
import threading
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions
from pyspark.storagelevel import StorageLevel

from runners.spark import options as spark_options
from runners.spark.backends import connect_rows as rows
from runners.spark.backends.base import (
    Backend,
    Dataset,
    JobNames,
    MetricsSink,
    PartitionAffinity,
    RunMetrics,
)
from runners.spark.backends.connect_affinity import PointerAffinity
from runners.spark.backends.connect_checks import SessionFacts, check_session
from runners.spark.backends.connect_dataset import (
    PARTITIONED_SCHEMA,
    RECORDS_SCHEMA,
    ConnectDataset,
    result_table,
)
from runners.spark.backends.connect_names import ConnectJobNames, TaggedThread
from runners.spark.backends.connect_tasks import ConnectBroadcast, ReportSink, SourceRecords, Step
from runners.spark.dependencies import project
from runners.spark.worker.metrics import pack, unpack
from runners.spark.worker.records import MetricUpdates

_LOGGER = logging.getLogger(__name__)

#: Records a source pickles into its task function (larger ones go as a DataFrame).
SOURCE_INLINE_BYTES = 1 << 20
#: Broadcast values larger than this go to the workers as an artifact file (read once per
#: worker process); smaller ones ride in the task function, which every query's plan and
#: every task carry (a pipeline's components, ~240 KB for the aggregation model tests, made
#: each plan megabytes when they rode along: 0.66 s per query).
BROADCAST_INLINE_BYTES = 64 << 10


#: Said once per session: a user's session (the runner's own have it off) with adaptive query
#: execution on. The runner's shuffles have fixed partition counts and no joins: re-planning
#: gains nothing, and a keyed step's placement does not depend on it (a new pointer is
#: cached at once, see connect_affinity).
ADAPTIVE_WARNING = (
    "%s has adaptive query execution on (spark.sql.adaptive.enabled=true, Spark's default): "
    "every query of the runner is re-planned after its shuffle, in a Spark job of its own "
    "(a streaming micro-batch runs two Spark jobs instead of one: 13-23 ms more a batch of "
    "200-280 ms measured on local[2]; a batch pipeline 10-25%% slower). The runner keeps to "
    "the session's settings; for its speed, set "
    "spark.conf.set('spark.sql.adaptive.enabled', 'false') before the run, or give "
    "--spark_remote sc://... (a session of the runner's own, with it off)")


class ReportedMetrics(RunMetrics):
    """A run's metrics as its jobs bring them back (:meth:`take`): each job's as it ends."""

    def __init__(self) -> None:
        self._sink = ReportSink()
        self._packed: List[bytes] = []
        self._lock = threading.Lock()

    @property
    def sink(self) -> MetricsSink:
        return self._sink

    def add(self, packed: List[bytes]) -> None:
        with self._lock:
            self._packed.extend(packed)
            if len(self._packed) > 4096:  # keep it short: consolidated, as the accumulator is
                self._packed = pack(unpack(self._packed))

    @property
    def value(self) -> List[bytes]:
        with self._lock:
            return list(self._packed)

    def take(self, records: List[Any]) -> List[Any]:
        kept = []
        for record in records:
            if type(record) is MetricUpdates:
                self.add(list(record.packed))
            else:
                kept.append(record)
        return kept


class ConnectBackend(Backend):
    """The engine on a Spark Connect session (see the module docstring).

    Make one with :meth:`of` (a session of yours) or :meth:`connect` (a URL): both check the
    session once (:func:`~runners.spark.backends.connect_checks.check_session`).
    """

    kind = "connect"
    #: Settings of the sessions the runner makes itself (``--spark_conf`` overrides them).
    #: Adaptive execution re-plans a query after each of its stages; the runner's shuffles
    #: have fixed partition counts and no joins, so it gains nothing and costs a pipeline
    #: 10-25% here (global_sum, 2e5 events: 3.3 s without, 3.7-4.4 s with).
    SESSION_DEFAULTS = {"spark.sql.adaptive.enabled": "false"}
    #: The schema of a DataFrame of records (what :meth:`records` takes).
    records_schema = RECORDS_SCHEMA
    _SESSIONS: Dict[str, "ConnectBackend"] = {}  # session id -> its backend
    _REMOTES: Dict[Any, Any] = {}  # (URL, settings) -> the session the runner made
    _LOCK = threading.RLock()

    def __init__(self, session: Any, facts: SessionFacts) -> None:
        self.session = session
        self.facts = facts
        self.binary = pa.large_binary() if facts.large_binary else pa.binary()
        self._artifacts: set = set()
        self._artifacts_lock = threading.Lock()
        self._slices: Dict[int, Any] = {}  # partitions -> the sources' range of slices

    @classmethod
    def of(cls, session: Any) -> "ConnectBackend":
        """The backend of a Spark Connect session (checked and prepared once per session:
        the project's packages shipped, the workers probed)."""
        with cls._LOCK:
            backend = cls._SESSIONS.get(session.session_id)
            if backend is None:
                backend = cls(session, SessionFacts())
                backend.ship_project()
                backend.facts = check_session(session, backend.describe())
                backend.binary = pa.large_binary() if backend.facts.large_binary else pa.binary()
                cls._SESSIONS[session.session_id] = backend
                if backend.facts.adaptive:
                    _LOGGER.warning(ADAPTIVE_WARNING, backend.describe())
        return backend

    @classmethod
    def connect(cls, url: str, options: PipelineOptions) -> "ConnectBackend":
        """A session on the Spark Connect server at ``url``, one per URL and settings for the
        process's runs, with :data:`SESSION_DEFAULTS` and the ``--spark_conf`` entries
        (runtime settings only: a server's static ones are its own, and one the server
        refuses is logged). The runner's own session: PySpark's builder would make it the
        thread's active one (which a later run with no Spark option would use) and mark the
        process as a Connect one (in which no classic session can be made); made with the
        Connect client's class, it is neither."""
        from pyspark.sql.connect.session import SparkSession

        named = {**cls.SESSION_DEFAULTS, **spark_options.parse_spark_conf(
            options.view_as(spark_options.SparkRunnerOptions).spark_conf)}
        key = (url, tuple(sorted(named.items())))
        with cls._LOCK:
            session = cls._REMOTES.get(key)
            if session is None or session.is_stopped:
                session = SparkSession(connection=url)
                for name, value in named.items():
                    try:
                        session.conf.set(name, value)
                    except Exception as refused:  # noqa: BLE001 (the server's own reason)
                        _LOGGER.warning("--spark_conf %s=%s is not applied on %s: %s",
                                        name, value, url, refused)
                cls._REMOTES[key] = session
        return cls.of(session)

    @property
    def default_parallelism(self) -> int:
        return self.facts.default_parallelism

    @property
    def single_executor(self) -> bool:
        return self.facts.single_executor

    def source(self, records: Sequence[Any], partitions: int = 1) -> ConnectDataset:
        records = list(records)
        partitions = max(partitions, 1)
        reader = SourceRecords(records, partitions)
        if len(reader.pickled) <= SOURCE_INLINE_BYTES:
            return ConnectDataset(self, self._slices_frame(partitions), reader,
                                  known_empty=not records)
        # Too large to ride in the task function: a DataFrame of the records, dealt.
        table = pa.table({
            rows.PARTITION: pa.array([position * partitions // len(records)
                                      for position in range(len(records))], pa.int32()),
            rows.RECORD: pa.array([pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
                                   for record in records], self.binary)})
        frame = self.session.createDataFrame(table, schema=PARTITIONED_SCHEMA)
        return ConnectDataset(self, frame.repartitionById(partitions, rows.PARTITION))

    def _slices_frame(self, partitions: int) -> Any:
        """``spark.range`` of one row per slice in as many partitions, one DataFrame per
        count for the session's sources. The first ``mapInArrow`` over a DataFrame asks the
        server for its columns (an ``AnalyzePlan``, 6-34 ms measured, in every micro-batch
        when each source made its own); a DataFrame keeps the answer, so a reused one asks
        once."""
        with self._LOCK:
            frame = self._slices.get(partitions)
            if frame is None:
                frame = self._slices[partitions] = self.session.range(0, partitions, 1,
                                                                      partitions)
        return frame

    def union(self, datasets: Sequence[Dataset]) -> ConnectDataset:
        if len(datasets) == 1:
            return datasets[0]
        frames = [dataset.frame() for dataset in datasets]
        return ConnectDataset(self, functools.reduce(lambda left, right: left.union(right),
                                                     frames), plain=True)

    def compute_once(self, dataset: Dataset) -> ConnectDataset:
        """Persisted (memory and disk) at its first computation: later readers and jobs read
        the kept blocks."""
        return ConnectDataset(self, dataset.frame().persist(StorageLevel.MEMORY_AND_DISK),
                              plain=True, persisted=True)

    def collect(self, dataset: Dataset) -> List[Any]:
        return list(rows.read_records(result_table(dataset.frame()).to_batches()))

    def broadcast(self, value: Any) -> ConnectBroadcast:
        pickled = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        if len(pickled) <= BROADCAST_INLINE_BYTES:
            return ConnectBroadcast(value, pickled, None)
        digest = hashlib.sha256(pickled).hexdigest()
        name = f"beam-broadcast-{digest[:32]}.pickle"
        with self._artifacts_lock:
            shipped = name in self._artifacts
        if not shipped:
            # The client uploads the file's bytes within addArtifacts: the copy on the
            # driver's disk is not needed after it.
            with tempfile.TemporaryDirectory(prefix="beam-broadcast-") as folder:
                path = os.path.join(folder, name)
                with open(path, "wb") as file:
                    file.write(pickled)
                self._add_artifact(path, file=True)
        return ConnectBroadcast(value, pickled, name)

    def run_metrics(self) -> RunMetrics:
        return ReportedMetrics()

    def job_names(self, run_tag: str) -> JobNames:
        return ConnectJobNames(self.session, run_tag)

    def cancel(self, run_tag: str) -> None:
        self.session.interruptTag(run_tag)

    def partition_affinity(self, partitions: int) -> PartitionAffinity:
        return PointerAffinity(self, partitions, enabled=not self.single_executor)

    def records(self, frame: Any) -> ConnectDataset:
        """The records of ``frame``, a DataFrame of :attr:`records_schema`."""
        return ConnectDataset(self, frame, plain=True)

    def placed(self, pointer: Any, frame: Any, reader: Callable[..., Iterator[Any]],
               steps: Tuple[Step, ...]) -> ConnectDataset:
        """A keyed step's output: ``frame`` (by key partition) cogrouped with ``pointer``,
        ``reader`` then ``steps`` in each key partition's task, and the steps added later
        too (see :class:`ConnectDataset`)."""
        return ConnectDataset(self, frame, reader, steps, pointer=pointer)

    def marked(self, frame: Any, reader: Callable[..., Iterator[Any]],
               steps: Tuple[Step, ...]) -> ConnectDataset:
        """A keyed step's output on one executor: ``frame`` (by key partition, a marker row
        in each) through ``reader`` then ``steps`` in each key partition's ``mapInArrow``
        task (:class:`~runners.spark.backends.connect_tasks.MarkedTask`)."""
        return ConnectDataset(self, frame, reader, steps, marked=True)

    def keyed_empty(self, partitions: int) -> ConnectDataset:
        """No records, as :meth:`ConnectDataset.partition_by` lays them out (no Python task
        runs for it)."""
        frame = self.session.createDataFrame([], schema=PARTITIONED_SCHEMA)
        return ConnectDataset(self, frame.repartitionById(partitions, rows.PARTITION),
                              partitions=partitions, known_empty=True)

    def sees_directory(self, path: str) -> bool:
        """Known for the directory the session was checked in; else one probe job per
        directory and session."""
        seen = self.facts.seen_directories
        if path not in seen:
            seen[path] = super().sees_directory(path)
        return seen[path]

    def stop(self) -> None:
        with self._LOCK:
            self._SESSIONS.pop(self.session.session_id, None)
        self.session.stop()

    def thread(self, target: Callable[[], None], name: str) -> threading.Thread:
        return TaggedThread(self.session, target, name)

    # ----- code and files
    def ship_project(self) -> None:
        """The project's packages as a Python artifact of the session (once per content):
        its Python workers put it on their path."""
        self._add_artifact(project.project_archive(), pyfile=True)

    def add_python_file(self, path: str) -> None:
        self._add_artifact(path, pyfile=True)

    def add_file(self, path: str) -> None:
        self._add_artifact(path, file=True)

    def _add_artifact(self, path: str, **kind: bool) -> None:
        name = os.path.basename(path)
        with self._artifacts_lock:
            if name in self._artifacts:
                return
            self.session.addArtifacts(path, **kind)
            self._artifacts.add(name)
        _LOGGER.info("shipped %s to the Spark Connect session's workers (%d KiB)", name,
                     os.path.getsize(path) // 1024)

    def describe(self) -> str:
        return f"Spark Connect ({self.facts.server or 'session'} {self.session.session_id})"
