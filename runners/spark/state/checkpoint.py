"""Checkpoints of the streaming loop: everything it needs to resume, every N batches.

With ``--checkpoint_dir DIR`` (a local path or any URL Beam's filesystems serve:
:mod:`~runners.spark.state.storage.filesystems`) the loop checkpoints after every
``--checkpoint_interval_batches`` micro-batches and when it stops by itself (sources done,
``--max_batches``, timeout); a driver started again with the same ``DIR`` and the same
pipeline resumes from the latest checkpoint instead of from the beginning.

Keyed state never passes through the driver, and is durable at *every* batch, not only at
checkpoints: each keyed task writes the rows it changed (now and then a compact copy of its
store) to ``DIR/state/<step>/<partition>/`` before the batch counts as done
(:mod:`~runners.spark.state.changelog`), and the driver keeps, from the tasks'
reports, each partition's chain of files. A checkpoint is then the driver's own part: a
small manifest naming, per step and partition, the chain that rebuilds the state, and
holding as plain data (bytes, numbers, strings, lists, dicts; no pickled objects, so no code
runs when one is read): the batch index and the loop's clock; each source's position (a
TestStream's next event and its output watermarks); each keyed step's watermarks, hold,
wakes and store version; every stage's output watermark; the side inputs' kept elements;
the main elements held for their side inputs; the splittable DoFns' carried residuals.

Layout of ``DIR``::

    checkpoint-00000012/      the latest complete checkpoint (batch 12); older ones deleted
        data.bin              the driver's snapshot (pickle protocol 5 of plain data only)
        MANIFEST.json         format, versions, pipeline fingerprint, batch, state files:
                              written last, it is what makes the checkpoint complete
    state/Sum_GroupByKey-3fca91a2/00000/
        snapshot-000000000040.mdb     a compact copy of partition 0's store
        delta-000000000052.bin        keys changed by version 52
    plans/batch-00000013.json the planned reads of a batch not yet checkpointed

Nothing relies on a rename (object stores have none): a checkpoint whose manifest is missing
or unreadable (a driver killed while writing it) is skipped for the one before it, and
older checkpoints and state files no manifest names any more are deleted only once the new
manifest is written. A restarted driver's tasks rebuild each key partition's store from its
chain (:mod:`~runners.spark.state.store`). A checkpoint is refused when read back
by a runner of another checkpoint format or state version (:class:`CheckpointError`,
:class:`~runners.spark.state.encoding.StateVersionError`). A checkpoint of another version
of the pipeline (its fingerprint, over the fused stages, buffers, coders, windowing, state
and timer specs and TestStream events, differs; DoFn code is not part of it) is an update
(:mod:`~runners.spark.state.update`): it resumes when every step holding state has its
counterpart, by name or through ``--transform_name_mapping``, with the same coders,
windowing and specs, and is refused otherwise (:class:`IncompatibleUpdateError`, naming
each step and why). Name the transforms that hold state (``"Sum" >> ...``), as Beam's
pipeline update also requires.

Delivery: outputs of the batches after the latest checkpoint and before a crash are emitted
again on restart (at-least-once between checkpoints, rollback recovery). A TestStream resumes
at its checkpointed event, so the final panes equal an uninterrupted run's. A job that ended
by itself leaves its final checkpoint: started again on the same directory, it resumes at its
end and emits nothing (give an empty directory to run from the beginning). State stays in
the checkpoint's key partitions unless the restart names another ``--spark_parallelism``:
then every keyed step's state is re-split into that many before the first batch
(:mod:`~runners.spark.state.rescale`), and checkpointed after it. On a cluster,
``DIR`` must be storage every executor can read and write (a task rebuilds a store from it
wherever the partition's task runs).

>>> import tempfile
>>> latest_checkpoint(tempfile.mkdtemp()) is None
True
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import pickle
import re
import time
from typing import Any, Dict, List, Optional, Tuple

from runners.spark.beam_internals import DistributionData, monitoring_infos
from runners.spark.planning.execution_plan import ExecutionPlan
from runners.spark.state.changelog import file_name
from runners.spark.state.encoding import STATE_VERSION, StateVersionError
from runners.spark.state.manifest_coders import state_decoding
from runners.spark.state.rescale import requested_rescale, rescale
from runners.spark.state.storage.filesystems import DurableStorage
from runners.spark.state.store import partition_directory_name
from runners.spark.state.update import (
    NameMapping,
    PipelineUpdate,
    describe,
    pipeline_fingerprint,
)
from runners.spark.worker.metrics import pack

_LOGGER = logging.getLogger(__name__)

#: What a manifest's ``format`` says; and the layout version this module reads and writes
#: (3: state durable at every batch, a chain of state files per key partition).
FORMAT = "beam-spark-streaming-checkpoint"
CHECKPOINT_VERSION = 3
MANIFEST = "MANIFEST.json"
#: The directory of keyed steps' state files, in ``--checkpoint_dir``.
STATE_DIRECTORY = "state"
#: The directory of the plans of the batches since the latest checkpoint.
PLANS_DIRECTORY = "plans"
DATA = "data.bin"
#: How many batches' store versions a manifest keeps (``batch_versions``): more than a
#: chain of deltas spans (a snapshot compacts them after at most 50).
BATCH_VERSIONS = 200
_NAME = re.compile(r"checkpoint-(\d+)$")
_PLAN = re.compile(r"batch-(\d+)\.json$")
#: Namespace of the metrics checkpoints report (the loop's own).
METRICS_NAMESPACE = "spark_streaming"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (unreadable, damaged, or of another format)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint written by another pipeline than the one being run."""


class IncompatibleUpdateError(CheckpointMismatchError):
    """A checkpoint of an earlier version of the pipeline whose state cannot carry over to
    this one (:mod:`~runners.spark.state.update`); the message names each step and why."""


def checkpoint_name(batch: int) -> str:
    return f"checkpoint-{batch:08d}"


def _storage(location: "str | DurableStorage") -> DurableStorage:
    return (location if isinstance(location, DurableStorage)
            else DurableStorage.open(location, probe=False))


def checkpoints_in(storage: DurableStorage) -> List[Tuple[int, str]]:
    """(batch, path) of every checkpoint with a manifest, newest first."""
    found = []
    for path in storage.match(storage.join("checkpoint-*", MANIFEST)):
        directory = path[: -len(MANIFEST) - 1]
        match = _NAME.search(directory)
        if match:
            found.append((int(match.group(1)), directory))
    return sorted(found, reverse=True)


def latest_checkpoint(location: "str | DurableStorage") -> Optional[str]:
    """The path of the latest complete checkpoint in ``location``, or None. A checkpoint is
    complete once its manifest exists (a driver killed before writing it leaves none: that
    checkpoint is skipped); a manifest that exists but cannot be read raises
    :class:`CheckpointError` (never "no checkpoint": starting over would drop its state)."""
    storage = _storage(location)
    for _, path in checkpoints_in(storage):
        read_manifest(path, storage)
        return path
    return None


def read_manifest(path: str, storage: Optional[DurableStorage] = None) -> Dict[str, Any]:
    """A checkpoint's manifest (format, versions, fingerprint, batch, sizes)."""
    storage = storage or _storage(path)
    try:
        manifest = json.loads(storage.read(storage.join(path, MANIFEST)).decode("utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path} is unreadable ({error}); move it away to "
                              "start from the beginning") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a streaming checkpoint of this runner")
    return manifest


class PlainUnpickler(pickle.Unpickler):
    """Reads plain data only: a checkpoint naming any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise CheckpointError(f"a checkpoint holds plain data only, not {module}.{name}")


class Checkpoints:
    """Writes and restores the checkpoints of one streaming run.

    Args:
      storage: ``--checkpoint_dir`` as durable storage, or None: no checkpoints.
      interval: write one every this many batches (``--checkpoint_interval_batches``).
      plan: the run's plan (its fingerprint guards against resuming another pipeline).
      name_mapping: ``--transform_name_mapping``, for resuming the checkpoint of an earlier
        version of the pipeline whose steps had other names.
    """

    def __init__(self, storage: Optional[DurableStorage], interval: int,
                 plan: ExecutionPlan, name_mapping: NameMapping = NameMapping()) -> None:
        if interval < 1:
            raise ValueError(f"--checkpoint_interval_batches={interval}: give a positive "
                             "whole number")
        self.storage = storage
        self.interval = interval
        self.plan = plan
        self.fingerprint = pipeline_fingerprint(plan) if storage else ""
        self.name_mapping = name_mapping
        self.written_batch: Optional[int] = None
        self._description: Optional[Dict[str, Any]] = None
        self._decoding: Optional[Dict[str, Any]] = None
        #: the update from the checkpoint resumed (None: it was this pipeline's)
        self.update: Optional[PipelineUpdate] = None
        self._updated_from = ""  # the fingerprint of the pipeline updated from
        #: the files of a layout re-split at the restart, deleted once a checkpoint is written
        self._retired: List[str] = []
        self._due_now = False  # checkpoint after the next batch (a rescale's new layout)
        #: the key partitions to re-split into once replayed batches are done (None: none)
        self._pending_rescale: Optional[int] = None
        self._rescale_deferred = False
        #: batch -> the store version (the loop's round number) after it, for the state
        #: reader's change feed between batches (the latest BATCH_VERSIONS batches)
        self.batch_versions: Dict[int, int] = {}

    @property
    def description(self) -> Dict[str, Any]:
        """This pipeline as an update sees it (:func:`~runners.spark.state.update.
        describe`), kept in every manifest."""
        if self._description is None:
            self._description = describe(self.plan)
        return self._description

    @property
    def decoding(self) -> Dict[str, Any]:
        """What a state reader decodes this pipeline's state with (:func:`~runners.spark.
        state.manifest_coders.state_decoding`), kept in every manifest."""
        if self._decoding is None:
            self._decoding = state_decoding(self.plan)
        return self._decoding

    @property
    def enabled(self) -> bool:
        return self.storage is not None

    @property
    def directory(self) -> Optional[str]:
        return self.storage.root if self.storage else None

    @property
    def run_name(self) -> str:
        """The run's name, the same for every driver that resumes from this directory."""
        digest = hashlib.sha256(f"{self.directory}\n{self.fingerprint}".encode("utf-8"))
        return digest.hexdigest()[:16]

    @property
    def state_directory(self) -> Optional[str]:
        """Where keyed steps write their state files (None without checkpoints)."""
        return self.storage.join(STATE_DIRECTORY) if self.storage else None

    def rescale_when_replayed(self, execution: Any) -> None:
        """Re-split the state into the partitions asked for, once the batches the previous
        driver ran after its checkpoint are replayed: a replay runs a logged batch exactly
        as it ran (same partitions, same bundle names, which an exactly-once sink
        recognises), so the re-split waits until the next batch is one no driver ran."""
        if self._pending_rescale is None:
            return
        if self.storage.exists(self._plan_path(execution.batches)):
            if not self._rescale_deferred:
                _LOGGER.info("streaming: batches after the checkpoint ran before the restart; "
                             "they run again at %d key partitions before the re-split into %d",
                             execution.context.parallelism, self._pending_rescale)
                self._rescale_deferred = True
            return
        self._retired = rescale(execution.context, execution.state, self._pending_rescale,
                                execution.batches)
        self._pending_rescale = None
        self._due_now = True  # the next checkpoint names the new layout

    def note_batch(self, batches: int, version: int) -> None:
        """After the batch that makes ``batches`` batches: the store version it left."""
        self.batch_versions[batches] = version
        for old in [batch for batch in self.batch_versions if batch <= batches - BATCH_VERSIONS]:
            del self.batch_versions[old]

    def is_due(self, batches: int) -> bool:
        """Whether the batch that makes ``batches`` batches is checkpointed."""
        return self.enabled and (self._due_now
                                 or batches - (self.written_batch or 0) >= self.interval)

    # ----- restore
    def restore(self, execution: Any, sources: List[Any], clock: float) -> float:
        """Load the latest checkpoint into the loop; returns the clock to resume at."""
        if not self.enabled:
            return clock
        path = latest_checkpoint(self.storage)
        if path is None:
            _LOGGER.info("streaming: no checkpoint in %s, starting from the beginning",
                         self.directory)
            # State files of a run that never checkpointed: nothing names them.
            self._delete_unnamed_state_files(execution.state)
            return clock
        manifest = read_manifest(path, self.storage)
        self._check(path, manifest)
        data = self._read_data(path, manifest)
        if manifest.get("fingerprint") != self.fingerprint:
            data = self._updated(path, manifest, data)
        # Bundles keep their names across restarts and updates (exactly-once sinks).
        execution.context.run_name = manifest.get("run_name", execution.context.run_name)
        # Sources by their stage's name: the fused stages' order may differ between drivers.
        snapshots = {snapshot.get("stage"): snapshot for snapshot in data["sources"]}
        names = [getattr(source, "name", None) for source in sources]
        if len(snapshots) != len(sources) or set(snapshots) != set(names):
            raise CheckpointMismatchError(
                f"checkpoint {path} has the sources {sorted(map(str, snapshots))}, this "
                f"pipeline {sorted(map(str, names))}: {self._what_to_do()}")
        for source, name in zip(sources, names):
            source.restore(snapshots[name])
        rescale_to = requested_rescale(manifest["parallelism"],
                                       getattr(execution, "requested_parallelism", None))
        if rescale_to is None and manifest["parallelism"] != execution.context.parallelism:
            _LOGGER.info("streaming: %s holds state in %d key partitions; resuming with them "
                         "(give --spark_parallelism to re-split it into another number)",
                         path, manifest["parallelism"])
        execution.context.parallelism = manifest["parallelism"]
        state = execution.state
        state.residuals.parallelism = manifest["parallelism"]
        state.placement.partitions = manifest["parallelism"]
        steps = {step.name: step for step in state.steps.values()}
        for name, snapshot in data["steps"].items():
            steps[name].restore(snapshot)
        state.watermarks.restore(data["watermarks"])
        state.side_inputs.restore(data["side_inputs"])
        state.held.restore(data["held"], {stage.name: stage.index for stage in self.plan.stages})
        state.residuals.restore(_reindexed_residuals(
            data["residuals"], data["stage_names"],
            {stage.name: stage.index for stage in self.plan.stages}))
        state.round_number = data["round_number"]
        self.batch_versions = {int(batch): version for batch, version
                               in manifest.get("batch_versions", {}).items()
                               if int(batch) <= data["batch"]}
        execution.batches = execution.resumed_from = self.written_batch = data["batch"]
        # Files the crashed driver's tasks wrote after this checkpoint: no chain names them.
        self._delete_unnamed_state_files(state)
        if rescale_to is not None:
            self._pending_rescale = rescale_to
            self.rescale_when_replayed(execution)
        _LOGGER.info("streaming: resuming from %s (batch %d)", path, data["batch"])
        return data["clock"]

    def _what_to_do(self) -> str:
        return (f"run the pipeline that wrote it, or give an empty --checkpoint_dir (or delete "
                f"{self.directory}) to start from the beginning")

    def _check(self, path: str, manifest: Dict[str, Any]) -> None:
        if manifest.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint {path} has format version {manifest.get('version')}; this runner "
                f"reads version {CHECKPOINT_VERSION}: {self._what_to_do()}")
        if manifest.get("state_version") != STATE_VERSION:
            raise StateVersionError(
                f"checkpoint {path} holds streaming state of version "
                f"{manifest.get('state_version')}; this runner reads version {STATE_VERSION}: "
                f"{self._what_to_do()}")

    def _updated(self, path: str, manifest: Dict[str, Any],
                 data: Dict[str, Any]) -> Dict[str, Any]:
        """The checkpoint of another version of the pipeline: its data in this pipeline's
        names, or :class:`IncompatibleUpdateError` naming every step that cannot carry
        over."""
        if "pipeline" not in manifest:  # written before checkpoints described their pipeline
            raise CheckpointMismatchError(
                f"checkpoint {path} was written by another pipeline (fingerprint "
                f"{str(manifest.get('fingerprint'))[:12]}, this pipeline {self.fingerprint[:12]})"
                f": {self._what_to_do()}")
        update = PipelineUpdate(manifest["pipeline"], self.description, self.name_mapping)
        update.check_data(data)
        if update.problems:
            raise IncompatibleUpdateError(
                f"checkpoint {path} was written by another version of this pipeline, and its "
                "state cannot carry over:\n  - " + "\n  - ".join(update.problems)
                + f"\nMake those steps as they were, or {self._what_to_do()}")
        _LOGGER.info("streaming: %s was written by another version of this pipeline; its "
                     "state carries over (%s)", path,
                     ", ".join(sorted(update.carried())) or "no step holds state")
        self.update = update
        self._updated_from = manifest["fingerprint"]
        return update.translate(data)

    def _read_data(self, path: str, manifest: Dict[str, Any]) -> Dict[str, Any]:
        try:
            data = self.storage.read(self.storage.join(path, DATA))
        except OSError as error:
            raise CheckpointError(f"checkpoint {path} is unreadable ({error})") from error
        if hashlib.sha256(data).hexdigest() != manifest.get("data_sha256"):
            raise CheckpointError(f"checkpoint {path} is damaged (its data does not match its "
                                  f"manifest's digest): {self._what_to_do()}")
        return PlainUnpickler(io.BytesIO(data)).load()

    # ----- the plan of each batch, logged before it runs
    def _plan_path(self, batch: int) -> str:
        return self.storage.join(PLANS_DIRECTORY, f"batch-{batch:08d}.json")

    def log_plan(self, batch: int, clock: float, residuals: bytes,
                 stage_names: Dict[int, str], planned_records: Optional[int] = None) -> None:
        """Log what batch ``batch`` (0-based) reads before it runs: its clock and the
        residuals (with their planned ranges) of the sources that plan their batches. A
        driver resuming from an earlier checkpoint replays it exactly (:meth:`logged_plan`)."""
        if not self.enabled:
            return
        entry = {"format": FORMAT, "version": CHECKPOINT_VERSION, "batch": batch,
                 "clock": clock, "fingerprint": self.fingerprint,
                 "stage_names": {str(index): name for index, name in stage_names.items()},
                 "residuals": residuals.decode("utf-8"), "planned_records": planned_records}
        self.storage.write(self._plan_path(batch),
                           json.dumps(entry, sort_keys=True).encode("utf-8"))

    def logged_plan(self, batch: int) -> Optional[Tuple[float, bytes, Optional[int]]]:
        """(clock, residuals re-keyed to this driver's stages, records planned) of a batch
        logged by an earlier driver and not covered by the checkpoint it resumed from; None
        if none."""
        if not self.enabled:
            return None
        path = self._plan_path(batch)
        if not self.storage.exists(path):
            return None
        try:
            entry = json.loads(self.storage.read(path).decode("utf-8"))
        except (OSError, ValueError) as error:
            raise CheckpointError(f"the plan of batch {batch} in {path} is unreadable "
                                  f"({error}): {self._what_to_do()}") from error
        names = {int(index): name for index, name in entry["stage_names"].items()}
        if entry.get("fingerprint") != self.fingerprint:
            if self.update is None or entry.get("fingerprint") != self._updated_from:
                raise CheckpointMismatchError(f"the plan of batch {batch} in {path} was logged "
                                              f"by another pipeline: {self._what_to_do()}")
            names = self.update.stage_names(names)
        residuals = _reindexed_residuals(entry["residuals"].encode("utf-8"), names,
                                         {stage.name: stage.index for stage in self.plan.stages})
        return entry["clock"], residuals, entry.get("planned_records")

    def _prune_plans(self, batch: int) -> None:
        """Forget the plans of batches a checkpoint covers."""
        old = [path for path in self.storage.match(self.storage.join(PLANS_DIRECTORY, "batch-*"))
               for match in [_PLAN.search(path)] if match and int(match.group(1)) < batch]
        self.storage.delete(old)

    # ----- write
    def write(self, execution: Any, sources: List[Any], clock: float) -> str:
        """Write the checkpoint of the loop after the current batch; returns its path."""
        batch = execution.batches
        state = execution.state
        steps = {step.name: step.snapshot() for step in state.steps.values()}
        snapshot = {"batch": batch, "clock": clock, "round_number": state.round_number,
                    "sources": [source.snapshot() for source in sources], "steps": steps,
                    "watermarks": state.watermarks.snapshot(),
                    "side_inputs": state.side_inputs.snapshot(),
                    "held": state.held.snapshot({stage.index: stage.name
                                                 for stage in self.plan.stages}),
                    "residuals": state.residuals.snapshot(),
                    "stage_names": {stage.index: stage.name for stage in self.plan.stages}}
        data = pickle.dumps(snapshot, protocol=5)
        manifest = {
            "format": FORMAT, "version": CHECKPOINT_VERSION, "state_version": STATE_VERSION,
            "fingerprint": self.fingerprint, "batch": batch,
            "parallelism": execution.context.parallelism, "written_at": time.time(),
            "data_sha256": hashlib.sha256(data).hexdigest(), "data_bytes": len(data),
            "state_files": {step.name: step.chains_snapshot() for step in state.steps.values()},
            "state_bytes": {step.name: step.state_bytes for step in state.steps.values()},
            "state_keys": {step.name: step.keys for step in state.steps.values()},
            "stages": [stage.name for stage in self.plan.stages],
            "pipeline": self.description, "run_name": execution.context.run_name,
            "decoding": self.decoding,
            "batch_versions": {str(batch): version
                               for batch, version in sorted(self.batch_versions.items())},
        }
        path = self.storage.join(checkpoint_name(batch))
        self.storage.write(self.storage.join(path, DATA), data)
        self.storage.write(self.storage.join(path, MANIFEST),
                           json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
        self.written_batch = batch
        self._delete_older_checkpoints(batch)
        for step in state.steps.values():  # no manifest names them any more
            self.storage.delete(self._state_file_paths(step, step.take_superseded()))
        self.storage.delete(self._retired)  # a rescale's old layout: no manifest names it
        self._retired, self._due_now = [], False
        self._prune_plans(batch)
        self._report(execution, len(data))
        _LOGGER.info("streaming: checkpoint of batch %d written to %s (driver data %d bytes)",
                     batch, path, len(data))
        return path

    def _delete_older_checkpoints(self, batch: int) -> None:
        """Delete every checkpoint before ``batch`` (complete or left half-written)."""
        root = self.storage.root
        if self.storage.is_local:  # whole directories (objects stores have no empty ones)
            names = os.listdir(root) if os.path.isdir(root) else []
            paths = [os.path.join(root, name) for name in names for match in [_NAME.match(name)]
                     if match and int(match.group(1)) < batch]
        else:
            paths = [path for path in self.storage.match(self.storage.join("checkpoint-*", "*"))
                     for match in [_NAME.search(path.rsplit("/", 1)[0])]
                     if match and int(match.group(1)) < batch]
        self.storage.delete(paths)

    def _state_file_paths(self, step: Any, files: List[Tuple[int, Any]]) -> List[str]:
        base = self.storage.join(STATE_DIRECTORY, step.directory)
        return [self.storage.join(base, partition_directory_name(partition), file_name(entry))
                for partition, entry in files]

    def _delete_unnamed_state_files(self, state: Any) -> None:
        """Delete the state files no chain of ``state``'s steps names (left by tasks after
        the checkpoint a driver resumes from, or by a run that left no checkpoint)."""
        named = set()
        for step in state.steps.values():
            named.update(self._state_file_paths(step, step.chain_files()))
        root = self.storage.join(STATE_DIRECTORY)
        unnamed = [path for path in self.storage.list(root) if path not in named]
        if unnamed:
            _LOGGER.info("streaming: deleting %d state files no checkpoint names (written "
                         "after the checkpoint resumed from)", len(unnamed))
            self.storage.delete(unnamed)

    def _report(self, execution: Any, total: int) -> None:
        """Distribution ``checkpoint_bytes`` (step ``loop``): the size of each manifest's data."""
        execution.context.metrics.add(pack([monitoring_infos.int64_user_distribution(
            METRICS_NAMESPACE, "checkpoint_bytes", DistributionData(total, 1, total, total),
            "loop")]))


def _reindexed_residuals(snapshot: bytes, names_then: Dict[int, str],
                         indexes_now: Dict[str, int]) -> bytes:
    """Re-key ``CarriedResiduals.snapshot()`` (JSON, ``"stages": {"<stage index>": ...}``)
    from the checkpointing driver's stage indexes to this one's, by stage name: the fused
    stages' order may differ between drivers of one pipeline."""
    data = json.loads(snapshot.decode("utf-8"))
    data["stages"] = {str(indexes_now[names_then[int(index)]]): residuals
                      for index, residuals in data.get("stages", {}).items()}
    return json.dumps(data, sort_keys=True).encode("utf-8")
