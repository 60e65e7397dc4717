"""The records that flow between the Spark stages of a run, as named types.

Spark moves Python objects between stages; the runner's are these, and nothing else:

* :class:`Elements`: encoded elements (Beam's nested encoding, concatenated) on one *port*:
  as a stage's input, the index of the stage input they feed; as its output, the index of
  the stage output that wrote them.
* :class:`KeyedElements`: the same, for a keyed step (GroupByKey or stateful stage), each
  element preceded by its encoded key, cut per target key partition on the map side so a
  shuffle moves a few large records rather than one per element.
* *Reports* for the driver (streaming), carried along with the data to the one Spark job of
  the micro-batch: :class:`StepReport` (a keyed step's partition after the batch),
  :class:`Residual` (a splittable DoFn's deferred restriction), :class:`SplittableReport`,
  :class:`HeldElements` (main elements waiting for their side inputs),
  :class:`SideInputChunk`, and :class:`MetricUpdates` (a task's metrics, where the backend
  gathers them through the job's records: Spark Connect).
  A stage forwards the reports it receives, untouched, to whatever reads it.

>>> record = Elements(0, b"encoded")
>>> record.port, is_report(record), is_report(StepReport("Sum", 0, 1))
(0, False, True)
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, NamedTuple, Optional, Tuple

from runners.spark.beam_internals import create_InputStream, create_OutputStream


class Elements(NamedTuple):
    """Encoded elements on one port of a stage (input index, or output index)."""

    port: int
    data: bytes


class KeyedElements(NamedTuple):
    """``(encoded key, encoded element)`` pairs for one input port of a keyed step, packed
    as ``varint length, key, varint length, element`` (see :func:`pack_keyed`)."""

    port: int
    data: bytes


class StepReport(NamedTuple):
    """One key partition of a keyed step after a micro-batch (streaming).

    Timestamps are Beam micros; ``None`` means none (no hold, no timer, nothing due).
    """

    step: str
    partition: int
    version: int  # the store version the partition is at now
    keys: int = 0  # keys holding state
    state_bytes: int = 0  # their encoded state
    inputs: int = 0  # elements received this batch
    outputs: int = 0  # elements emitted this batch
    touched: int = 0  # keys read and written this batch
    hold: Optional[int] = None  # earliest watermark hold of the partition's keys
    next_event_wake: Optional[int] = None  # earliest event-time timer or window expiry
    next_processing_wake: Optional[int] = None  # earliest processing-time timer
    loaded: bool = False  # the store was rebuilt from the checkpoint location
    #: the state file written to the checkpoint location (a ``state_files.StateFile``)
    written: Optional[Tuple[str, int, int, str, str]] = None
    commit: bytes = b""  # the id of the store's commit of ``version``
    storage_retries: int = 0  # transient storage errors the task's process retried
    #: a snapshot of the partition written in the background (a ``state_files.StateFile``)
    snapshot: Optional[Tuple[str, int, int, str, str]] = None
    #: the executor the task ran on, which now holds the store (``executor_identity``)
    executor: str = ""


class Residual(NamedTuple):
    """A restriction a splittable DoFn deferred (``defer_remainder``), for the next batch."""

    stage: int  # the stage's index
    port: int  # the stage input it re-enters
    element: bytes  # the encoded element and remaining restriction
    watermark_micros: Optional[int]  # its watermark estimator's, None if unknown
    delay_seconds: float  # how long the DoFn asked to wait before resuming


class SplittableReport(NamedTuple):
    """One task of a splittable DoFn stage: what it emitted, and its worker's pending
    bundle finalizations (callbacks run once the batch's output is written). ``worker``
    names the Python worker process across the cluster: its host, its executor (by the
    executor's own local directories) and its process id."""

    stage: int
    worker: str
    sequence: int
    pending: int
    outputs: int
    elements: int


class HeldElements(NamedTuple):
    """Main-input elements of a stage whose side inputs are not ready for their windows
    (streaming), for the driver to hold until they are: encoded on their input ``port``,
    with the side-input watermark each side input must reach (``ready_at``, micros, one per
    side input) and the earliest of their timestamps (micros: it holds the watermark)."""

    stage: int
    port: int
    ready_at: Tuple[int, ...]
    timestamp: int
    data: bytes
    count: int  # elements in ``data``


class SideInputChunk(NamedTuple):
    """Encoded elements a side-input buffer received in a micro-batch whose readers did not
    run: the driver keeps them for later batches."""

    buffer_id: bytes
    data: bytes


class MetricUpdates(NamedTuple):
    """A task's MonitoringInfos, packed (:func:`runners.spark.worker.metrics.pack`), on their way to
    the driver with the job's reports."""

    packed: Tuple[bytes, ...]


#: Every report type (what a stage forwards without looking inside).
REPORT_TYPES = (StepReport, Residual, SplittableReport, HeldElements, SideInputChunk,
                MetricUpdates)


def is_report(record: Any) -> bool:
    return isinstance(record, REPORT_TYPES)


def relabel(port: int, record: Any) -> Any:
    """An :class:`Elements` moved to ``port``; a report as it is."""
    return Elements(port, record.data) if type(record) is Elements else record


def pack_keyed(pairs: Iterable[Tuple[bytes, bytes]]) -> bytes:
    """``(key, element)`` byte pairs in the layout of :class:`KeyedElements`.

    >>> list(unpack_keyed(pack_keyed([(b"k", b"e1"), (b"k2", b"")])))
    [(b'k', b'e1'), (b'k2', b'')]
    """
    out = create_OutputStream()
    for key, element in pairs:
        out.write_var_int64(len(key))
        out.write(key)
        out.write_var_int64(len(element))
        out.write(element)
    return out.get()


def unpack_keyed(data: bytes) -> Iterator[Tuple[bytes, bytes]]:
    stream = create_InputStream(data)
    while stream.size() > 0:
        key = stream.read(stream.read_var_int64())
        yield key, stream.read(stream.read_var_int64())


class KeyedPacker:
    """Collects ``(key, element)`` pairs per target partition and port, packed.

    >>> packer = KeyedPacker(2)
    >>> packer.add(1, 0, b"k", b"e")
    >>> [(partition, record.port) for partition, record in packer.records()]
    [(1, 0)]
    """

    #: A partition's pairs are flushed as a record once they reach this size.
    RECORD_BYTES = 4 << 20

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._streams: Dict[Tuple[int, int], Any] = {}
        self._full: list = []

    def add(self, partition: int, port: int, key: bytes, element: bytes) -> None:
        stream = self._streams.get((partition, port))
        if stream is None:
            stream = self._streams[(partition, port)] = create_OutputStream()
        stream.write_var_int64(len(key))
        stream.write(key)
        stream.write_var_int64(len(element))
        stream.write(element)
        if stream.size() >= self.RECORD_BYTES:
            self._full.append((partition, KeyedElements(port, stream.get())))
            del self._streams[(partition, port)]

    def records(self) -> Iterator[Tuple[int, KeyedElements]]:
        yield from self._full
        self._full = []
        for (partition, port), stream in sorted(self._streams.items()):
            yield partition, KeyedElements(port, stream.get())
        self._streams = {}
