"""A keyed step across micro-batches, on the driver: watermarks, hold, wakes, store version.

A keyed step is a GroupByKey or a stateful stage. Its state lives on the executors, one
store per key partition (:mod:`~runners.spark.state.store`); the driver keeps what
the partitions reported after the step last ran (:class:`~runners.spark.worker.records.StepReport`):
enough to know, without any Spark job, whether the step has anything to do in a batch (new
input, or a timer or window expiry due at the new watermark or clock) and what its output
watermark is. Watermarks follow Beam's DirectRunner: the output watermark is the input
watermark, or for a GroupByKey ``min(input watermark, the keys' watermark holds)``, and
never moves back: late data can set a hold behind it (Beam's trigger driver holds a late
element's window at its end), which must not make later data of that window look early.

>>> from apache_beam.utils.timestamp import Timestamp
>>> step = KeyedStep("Sum/GroupByKey", holds=True)
>>> step.apply([StepReport("Sum/GroupByKey", 0, version=1, keys=3, hold=5_000_000,
...                        next_event_wake=10_000_000)], Timestamp(4), clock=0.0)
>>> step.output_watermark, step.is_due(Timestamp(9), 0), step.is_due(Timestamp(10), 0)
(Timestamp(4), False, True)
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from runners.spark.state.changelog import StateFile, snapshot_due, snapshot_overdue
from runners.spark.state.store import step_directory_name
from runners.spark.worker.records import StepReport


class KeyedStep:
    """A GroupByKey or stateful stage across batches (see the module docstring).

    Args:
      name: the step's transform name (its stores and reports are named after it).
      holds: True for a GroupByKey (its keys' holds hold its output watermark).
    """

    def __init__(self, name: str, holds: bool) -> None:
        self.name = name
        self.holds = holds
        #: where its state files are, in the checkpoint location: named after the step that
        #: first wrote them (an updated pipeline may have renamed it)
        self.directory = step_directory_name(name)
        self.input_watermark = MIN_TIMESTAMP
        self.output_watermark = MIN_TIMESTAMP
        self.hold = MAX_TIMESTAMP
        self.next_event_wake: Optional[int] = None  # micros
        self.next_processing_wake: Optional[int] = None  # micros
        self.keys = 0  # keys holding state
        self.state_bytes = 0  # their encoded state
        self.inputs = 0  # elements received in the current batch
        self.outputs = 0  # elements emitted in the current batch
        self.touched = 0  # keys read and written in the current batch
        self.version = 0  # the store version of every partition (0: never ran)
        self.loaded = 0  # stores rebuilt from the checkpoint location in the current batch
        self.storage_retries = 0  # transient storage errors its tasks retried, this batch
        #: partition -> the state files that rebuild its store (with a checkpoint location)
        self.chains: Dict[int, Tuple[StateFile, ...]] = {}
        self.partition_bytes: Dict[int, int] = {}  # partition -> its encoded state
        #: partition -> the id of the commit of ``version`` its report named
        self.commits: Dict[int, bytes] = {}
        #: partition -> the executor that ran its last task (holding its store)
        self.executors: Dict[int, str] = {}
        #: (partition, file) replaced by a snapshot since the last checkpoint manifest
        self._superseded: List[Tuple[int, StateFile]] = []

    # ----- one batch
    def is_due(self, input_watermark: Timestamp, clock_micros: int) -> bool:
        """A timer or window expiry due at this input watermark or processing time."""
        return ((self.next_event_wake is not None
                 and self.next_event_wake <= input_watermark.micros)
                or (self.next_processing_wake is not None
                    and self.next_processing_wake <= clock_micros))

    def start_batch(self) -> None:
        self.inputs = self.outputs = self.touched = self.loaded = self.storage_retries = 0

    def skip(self, input_watermark: Timestamp) -> None:
        """Nothing to do at this watermark: only the watermarks move."""
        self.input_watermark = max(self.input_watermark, input_watermark)
        self._advance_output_watermark()

    def _advance_output_watermark(self) -> None:
        self.output_watermark = max(self.output_watermark, min(self.input_watermark, self.hold))

    def apply(self, reports: List[StepReport], input_watermark: Timestamp, clock: float) -> None:
        """What the step's partitions reported after running at ``input_watermark``."""
        if not reports:
            raise RuntimeError(f"keyed step {self.name!r} ran but no partition reported")
        versions = {report.version for report in reports}
        if len(versions) != 1:
            raise RuntimeError(f"keyed step {self.name!r}: partitions at versions {versions}")
        self.version = versions.pop()
        self.input_watermark = max(self.input_watermark, input_watermark)
        holds = [report.hold for report in reports if report.hold is not None]
        self.hold = (Timestamp(micros=min(holds)) if self.holds and holds else MAX_TIMESTAMP)
        self._advance_output_watermark()
        self.keys = sum(report.keys for report in reports)
        self.state_bytes = sum(report.state_bytes for report in reports)
        self.inputs += sum(report.inputs for report in reports)
        self.outputs += sum(report.outputs for report in reports)
        self.touched += sum(report.touched for report in reports)
        self.next_event_wake = _earliest(report.next_event_wake for report in reports)
        self.next_processing_wake = _earliest(report.next_processing_wake for report in reports)
        self.loaded += sum(1 for report in reports if report.loaded)
        self.storage_retries += sum(report.storage_retries for report in reports)
        for report in reports:
            self.partition_bytes[report.partition] = report.state_bytes
            self.commits[report.partition] = report.commit
            if report.executor:
                self.executors[report.partition] = report.executor
            if report.written is not None:
                self._chain_file(report.partition, StateFile(*report.written))
            if report.snapshot is not None:
                self._start_chain_at(report.partition, StateFile(*report.snapshot))

    def _chain_file(self, partition: int, state_file: StateFile) -> None:
        chain = self.chains.get(partition, ())
        if state_file.kind == "snapshot":
            self._superseded.extend((partition, entry) for entry in chain)
            chain = ()
        self.chains[partition] = chain + (state_file,)

    def _start_chain_at(self, partition: int, snapshot: StateFile) -> None:
        """A snapshot written in the background: the chain starts at it when it is of a
        version the chain holds, by the commit accepted for it (another attempt's, or one
        of a version the chain has moved past, is deleted with the files the next checkpoint
        supersedes: no manifest names it)."""
        chain = self.chains.get(partition, ())
        accepted = [entry for entry in chain
                    if entry.version == snapshot.version and entry.commit == snapshot.commit]
        if not accepted:
            self._superseded.append((partition, snapshot))
            return
        self._superseded.extend((partition, entry) for entry in chain
                                if entry.version <= snapshot.version)
        self.chains[partition] = (snapshot,) + tuple(
            entry for entry in chain if entry.version > snapshot.version)

    def partition_chains(self, partitions: int) -> Tuple[Tuple[StateFile, ...], ...]:
        """Each key partition's chain of state files (empty: nothing durable yet)."""
        return tuple(self.chains.get(partition, ()) for partition in range(partitions))

    def partition_commits(self, partitions: int) -> Tuple[bytes, ...]:
        """Each key partition's accepted commit id of the current version."""
        return tuple(self.commits.get(partition, b"") for partition in range(partitions))

    def snapshots_due(self) -> FrozenSet[int]:
        """Partitions due a snapshot (written in the background)."""
        return frozenset(partition for partition, chain in self.chains.items()
                         if snapshot_due(chain, self.partition_bytes.get(partition, 0)))

    def snapshots_overdue(self) -> FrozenSet[int]:
        """Partitions whose next task writes a snapshot itself (see ``snapshot_overdue``)."""
        return frozenset(partition for partition, chain in self.chains.items()
                         if snapshot_overdue(chain, self.partition_bytes.get(partition, 0)))

    def chain_files(self) -> List[Tuple[int, StateFile]]:
        return [(partition, entry) for partition, chain in sorted(self.chains.items())
                for entry in chain]

    def take_superseded(self) -> List[Tuple[int, StateFile]]:
        """The files replaced by snapshots since the last call (a new checkpoint manifest,
        naming the snapshots instead, makes them garbage)."""
        superseded, self._superseded = self._superseded, []
        return superseded

    # ----- checkpoints
    def snapshot(self) -> Dict[str, Any]:
        """The step as plain data, for a checkpoint manifest."""
        return {"name": self.name, "directory": self.directory,
                "input_watermark": self.input_watermark.micros,
                "output_watermark": self.output_watermark.micros, "hold": self.hold.micros,
                "keys": self.keys, "state_bytes": self.state_bytes,
                "next_event_wake": self.next_event_wake,
                "next_processing_wake": self.next_processing_wake,
                "version": self.version, "chains": self.chains_snapshot(),
                "partition_bytes": {str(partition): size
                                    for partition, size in sorted(self.partition_bytes.items())},
                "commits": {str(partition): commit.hex()
                            for partition, commit in sorted(self.commits.items())}}

    def chains_snapshot(self) -> Dict[str, List[List[Any]]]:
        """The partitions' chains as plain data (JSON keys are strings)."""
        return {str(partition): [list(entry) for entry in chain]
                for partition, chain in sorted(self.chains.items())}

    def restore(self, snapshot: Dict[str, Any]) -> None:
        self.directory = snapshot.get("directory") or step_directory_name(snapshot["name"])
        self.input_watermark = Timestamp(micros=snapshot["input_watermark"])
        self.output_watermark = Timestamp(micros=snapshot["output_watermark"])
        self.hold = Timestamp(micros=snapshot["hold"])
        self.keys = snapshot["keys"]
        self.state_bytes = snapshot["state_bytes"]
        self.next_event_wake = snapshot["next_event_wake"]
        self.next_processing_wake = snapshot["next_processing_wake"]
        self.version = snapshot["version"]
        self.chains = {int(partition): tuple(StateFile(*entry) for entry in chain)
                       for partition, chain in snapshot["chains"].items()}
        self.partition_bytes = {int(partition): size
                                for partition, size in snapshot["partition_bytes"].items()}
        self.commits = {int(partition): bytes.fromhex(commit)
                        for partition, commit in snapshot["commits"].items()}


def _earliest(values) -> Optional[int]:
    present = [value for value in values if value is not None]
    return min(present) if present else None
