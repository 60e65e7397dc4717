"""Checkpoints of the streaming loop: everything it needs to resume, every N batches.

With ``--checkpoint_dir DIR`` the loop checkpoints after every ``--checkpoint_interval_
batches`` micro-batches and when it stops by itself (sources done, ``--max_batches``,
timeout); a driver started again with the same ``DIR`` and the same pipeline resumes from the
latest checkpoint instead of from the beginning.

A checkpoint is incremental, and the keyed state in it never passes through the driver: in a
checkpoint batch each keyed step's tasks write, next to their store, the keys changed since
the step's previous checkpoint (a *delta*), or every tenth time a compact copy of the store
(a *snapshot*), under ``DIR/state/<step>/<partition>/`` (:mod:`~runners.spark.streaming.
state_store`); a step that did not run in the batch but changed since its last checkpoint
writes its delta in a small job of its own. Then the driver writes the checkpoint's
manifest, which names, per step, the chain of files (a snapshot or nothing, then deltas)
that rebuilds its state, and holds as plain data (bytes, numbers, strings, lists, dicts; no
pickled objects, so no code runs when one is read): the batch index and the loop's clock;
each source's position (a TestStream's next event and its output watermarks); each keyed
step's watermarks, hold, wakes and store version; every stage's output watermark; the side
inputs' kept elements; the splittable DoFns' carried residuals.

Layout of ``DIR``::

    checkpoint-00000012/      the latest complete checkpoint (batch 12); older ones deleted
        MANIFEST.json         format, versions, pipeline fingerprint, batch, state files
        data.bin              the driver's snapshot (pickle protocol 5 of plain data only)
    state/Sum_GroupByKey-3fca91a2/00000/
        snapshot-000000000040/data.mdb    a compact copy of partition 0's store
        delta-000000000052.pickle         keys changed after it

A manifest is written to a temporary directory and renamed into place, so a driver killed
while writing leaves the previous checkpoint intact; state files no manifest names any more
are deleted once the new manifest is in place. A restarted driver's tasks rebuild each key
partition's store from its chain (:mod:`~runners.spark.streaming.state_store`). A checkpoint
is refused when read back by a runner of another checkpoint format or state version
(:class:`CheckpointError`, :class:`~runners.spark.streaming.state.StateVersionError`), or
when the pipeline differs (:class:`CheckpointMismatchError`): the fingerprint covers the
fused stages, their buffers, coders, windowing strategies, state and timer specs and
TestStream events, but not the code inside DoFns (a fixed bug in a DoFn may resume from its
checkpoint). Transform names are part of it: name transforms (``"Sum" >> ...``), as Beam's
pipeline update also requires.

Delivery: outputs of the batches after the latest checkpoint and before a crash are emitted
again on restart (at-least-once between checkpoints, rollback recovery). A TestStream resumes
at its checkpointed event, so the final panes equal an uninterrupted run's. A job that ended
by itself leaves its final checkpoint: started again on the same directory, it resumes at its
end and emits nothing (give an empty directory to run from the beginning). State stays in
the checkpoint's key partitions: a restart keeps its ``--spark_parallelism``. On a cluster,
``DIR`` must be storage every executor can read (state is rebuilt from it wherever a
partition's task runs).

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
import shutil
import time
from typing import Any, Dict, List, Optional, Tuple


from runners.spark.beam_internals import (
    PAR_DO_URNS,
    DistributionData,
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    monitoring_infos,
)
from runners.spark.metrics import pack
from runners.spark.planning import SDK_STAGE, TEST_STREAM_STAGE, ExecutionPlan
from runners.spark.streaming.state import STATE_VERSION, StateVersionError
from runners.spark.streaming.state_store import checkpoint_file_name

_LOGGER = logging.getLogger(__name__)

#: What a manifest's ``format`` says; and the layout version this module reads and writes.
FORMAT = "beam-spark-streaming-checkpoint"
CHECKPOINT_VERSION = 2
MANIFEST = "MANIFEST.json"
#: The directory of keyed steps' state files, in ``--checkpoint_dir``.
STATE_DIRECTORY = "state"
#: The directory of the plans of the batches since the latest checkpoint.
PLANS_DIRECTORY = "plans"
DATA = "data.bin"
_NAME = re.compile(r"^checkpoint-(\d+)$")
_TEMPORARY = ".incomplete-"
#: Namespace of the metrics checkpoints report (the loop's own).
METRICS_NAMESPACE = "spark_streaming"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used (unreadable, damaged, or of another format)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint written by another pipeline than the one being run."""


def checkpoint_name(batch: int) -> str:
    return f"checkpoint-{batch:08d}"


def latest_checkpoint(directory: str) -> Optional[str]:
    """The path of the latest complete checkpoint in ``directory``, or None."""
    if not os.path.isdir(directory):
        return None
    found = [(int(match.group(1)), name) for name in os.listdir(directory)
             for match in [_NAME.match(name)] if match
             and os.path.isfile(os.path.join(directory, name, MANIFEST))]
    return os.path.join(directory, max(found)[1]) if found else None


def read_manifest(path: str) -> Dict[str, Any]:
    """A checkpoint's manifest (format, versions, fingerprint, batch, sizes)."""
    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as file:
            manifest = json.load(file)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path} is unreadable ({error}); move it away to "
                              "start from the beginning") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a streaming checkpoint of this runner")
    return manifest


def pipeline_fingerprint(plan: ExecutionPlan) -> str:
    """A digest of what a checkpoint's state depends on: stages, buffers, coders, windowing,
    state and timer specs, TestStream events (not DoFn code). Stable across processes."""
    digest = hashlib.sha256()

    def add(*parts: Any) -> None:
        digest.update(repr(parts).encode("utf-8"))

    # By name: the fused stages' order (their index) may differ from process to process.
    for stage in sorted(plan.stages, key=lambda stage: stage.name):
        add(stage.name, stage.kind, stage.keyed, stage.inputs, stage.outputs,
            stage.side_inputs, stage.timer_families, stage.output_coder_id, stage.output_coders)
        if stage.kind == TEST_STREAM_STAGE:
            add(stage.descriptor)
        elif stage.kind == SDK_STAGE and stage.descriptor:
            descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
            for name, transform in sorted(descriptor.transforms.items()):
                add(name, transform.spec.urn, sorted(transform.inputs.items()),
                    sorted(transform.outputs.items()))
                if transform.spec.urn in PAR_DO_URNS:
                    payload = beam_runner_api_pb2.ParDoPayload.FromString(
                        transform.spec.payload)
                    add(sorted((name, spec.SerializeToString(deterministic=True))
                               for name, spec in payload.state_specs.items()),
                        sorted((name, spec.SerializeToString(deterministic=True))
                               for name, spec in payload.timer_family_specs.items()))
    for buffer_id, group in sorted(plan.groups.items()):
        add(buffer_id, group)
    components = plan.components
    for coder_id, coder in sorted(components.coders.items()):
        add(coder_id, coder.spec.urn, tuple(coder.component_coder_ids))
    for strategy_id, strategy in sorted(components.windowing_strategies.items()):
        add(strategy_id, strategy.SerializeToString(deterministic=True))
    return digest.hexdigest()


class _PlainUnpickler(pickle.Unpickler):
    """Reads plain data only: a checkpoint naming any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise CheckpointError(f"a checkpoint holds plain data only, not {module}.{name}")


class Checkpoints:
    """Writes and restores the checkpoints of one streaming run.

    Args:
      directory: ``--checkpoint_dir`` (created if missing), or None: no checkpoints.
      interval: write one every this many batches (``--checkpoint_interval_batches``).
      plan: the run's plan (its fingerprint guards against resuming another pipeline).
    """

    def __init__(self, directory: Optional[str], interval: int, plan: ExecutionPlan) -> None:
        if interval < 1:
            raise ValueError(f"--checkpoint_interval_batches={interval}: give a positive "
                             "whole number")
        self.directory = os.path.abspath(directory) if directory else None
        self.interval = interval
        self.plan = plan
        self.fingerprint = pipeline_fingerprint(plan) if directory else ""
        self.written_batch: Optional[int] = None
        if self.directory:
            if os.path.exists(self.directory) and not os.path.isdir(self.directory):
                raise ValueError(f"--checkpoint_dir={directory}: not a directory")
            os.makedirs(self.directory, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    @property
    def run_name(self) -> str:
        """The run's name, the same for every driver that resumes from this directory."""
        digest = hashlib.sha256(f"{self.directory}\n{self.fingerprint}".encode("utf-8"))
        return digest.hexdigest()[:16]

    @property
    def state_directory(self) -> Optional[str]:
        """Where keyed steps write their state files (None without checkpoints)."""
        return os.path.join(self.directory, STATE_DIRECTORY) if self.directory else None

    def is_due(self, batches: int) -> bool:
        """Whether the batch that makes ``batches`` batches is checkpointed."""
        return self.enabled and batches - (self.written_batch or 0) >= self.interval

    # ----- restore
    def restore(self, execution: Any, sources: List[Any], clock: float) -> float:
        """Load the latest checkpoint into the loop; returns the clock to resume at."""
        if not self.enabled:
            return clock
        path = latest_checkpoint(self.directory)
        if path is None:
            _LOGGER.info("streaming: no checkpoint in %s, starting from the beginning",
                         self.directory)
            return clock
        manifest = read_manifest(path)
        self._check(path, manifest)
        data = self._read_data(path, manifest)
        # Sources by their stage's name: the fused stages' order may differ between drivers.
        snapshots = {snapshot.get("stage"): snapshot for snapshot in data["sources"]}
        names = [getattr(source, "name", None) for source in sources]
        if len(snapshots) != len(sources) or set(snapshots) != set(names):
            raise CheckpointMismatchError(
                f"checkpoint {path} has the sources {sorted(map(str, snapshots))}, this "
                f"pipeline {sorted(map(str, names))}: {self._what_to_do()}")
        for source, name in zip(sources, names):
            source.restore(snapshots[name])
        if manifest["parallelism"] != execution.context.parallelism:
            _LOGGER.warning("streaming: %s holds state in %d key partitions; resuming with "
                            "them (not %d)", path, manifest["parallelism"],
                            execution.context.parallelism)
            execution.context.parallelism = manifest["parallelism"]
        state = execution.state
        state.residuals.parallelism = manifest["parallelism"]
        steps = {step.name: step for step in state.steps.values()}
        for name, snapshot in data["steps"].items():
            steps[name].restore(snapshot)
        state.watermarks.restore(data["watermarks"])
        state.side_inputs.restore(data["side_inputs"])
        state.residuals.restore(_reindexed_residuals(
            data["residuals"], data["stage_names"],
            {stage.name: stage.index for stage in self.plan.stages}))
        state.round_number = data["round_number"]
        execution.batches = execution.resumed_from = self.written_batch = data["batch"]
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
        if manifest.get("fingerprint") != self.fingerprint:
            ours = {stage.name for stage in self.plan.stages}
            theirs = set(manifest.get("stages", []))
            differences = sorted(theirs - ours)[:3] + sorted(ours - theirs)[:3]
            raise CheckpointMismatchError(
                f"checkpoint {path} was written by another pipeline (fingerprint "
                f"{str(manifest.get('fingerprint'))[:12]}, this pipeline {self.fingerprint[:12]}"
                + (f"; stages differ: {differences}" if differences else "")
                + f"): {self._what_to_do()}")

    def _read_data(self, path: str, manifest: Dict[str, Any]) -> Dict[str, Any]:
        try:
            with open(os.path.join(path, DATA), "rb") as file:
                data = file.read()
        except OSError as error:
            raise CheckpointError(f"checkpoint {path} is unreadable ({error})") from error
        if hashlib.sha256(data).hexdigest() != manifest.get("data_sha256"):
            raise CheckpointError(f"checkpoint {path} is damaged (its data does not match its "
                                  f"manifest's digest): {self._what_to_do()}")
        return _PlainUnpickler(io.BytesIO(data)).load()

    # ----- the plan of each batch, logged before it runs
    def log_plan(self, batch: int, clock: float, residuals: bytes,
                 stage_names: Dict[int, str]) -> None:
        """Log what batch ``batch`` (0-based) reads before it runs: its clock and the
        residuals (with their planned ranges) of the sources that plan their batches. A
        driver resuming from an earlier checkpoint replays it exactly (:meth:`logged_plan`)."""
        if not self.enabled:
            return
        directory = os.path.join(self.directory, PLANS_DIRECTORY)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"batch-{batch:08d}.json")
        entry = {"format": FORMAT, "version": CHECKPOINT_VERSION, "batch": batch,
                 "clock": clock, "fingerprint": self.fingerprint,
                 "stage_names": {str(index): name for index, name in stage_names.items()},
                 "residuals": residuals.decode("utf-8")}
        _write_synced(path + ".tmp", json.dumps(entry, sort_keys=True).encode("utf-8"))
        os.replace(path + ".tmp", path)

    def logged_plan(self, batch: int) -> Optional[Tuple[float, bytes]]:
        """(clock, residuals re-keyed to this driver's stages) of a batch logged by an
        earlier driver and not covered by the checkpoint it resumed from; None if none."""
        if not self.enabled:
            return None
        path = os.path.join(self.directory, PLANS_DIRECTORY, f"batch-{batch:08d}.json")
        try:
            with open(path, encoding="utf-8") as file:
                entry = json.load(file)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise CheckpointError(f"the plan of batch {batch} in {path} is unreadable "
                                  f"({error}): {self._what_to_do()}") from error
        if entry.get("fingerprint") != self.fingerprint:
            raise CheckpointMismatchError(f"the plan of batch {batch} in {path} was logged by "
                                          f"another pipeline: {self._what_to_do()}")
        names = {int(index): name for index, name in entry["stage_names"].items()}
        residuals = _reindexed_residuals(entry["residuals"].encode("utf-8"), names,
                                         {stage.name: stage.index for stage in self.plan.stages})
        return entry["clock"], residuals

    def _prune_plans(self, batch: int) -> None:
        """Forget the plans of batches a checkpoint covers."""
        directory = os.path.join(self.directory, PLANS_DIRECTORY)
        if not os.path.isdir(directory):
            return
        for name in os.listdir(directory):
            match = re.match(r"^batch-(\d+)\.json$", name)
            if match and int(match.group(1)) < batch:
                os.remove(os.path.join(directory, name))

    # ----- write
    def write(self, execution: Any, sources: List[Any], clock: float,
              written: Dict[str, Tuple[str, int]]) -> str:
        """Write the manifest of a checkpoint after the current batch; returns its path.

        ``written``: step name -> the state file (kind, version) its tasks wrote in this
        batch, for every step whose state changed since its last checkpoint.
        """
        batch = execution.batches
        state = execution.state
        chains: Dict[str, Tuple[Tuple[str, int], ...]] = {}
        for step in state.steps.values():
            chain = step.chain
            if step.needs_checkpoint():
                kind, version = written[step.name]
                if version != step.version:
                    raise RuntimeError(f"step {step.name!r} is at version {step.version} but "
                                       f"its checkpoint file is of version {version}")
                chain = ((kind, version),) if kind == "snapshot" else chain + ((kind, version),)
            chains[step.name] = chain
        steps = {}
        for step in state.steps.values():
            snapshot = step.snapshot()
            snapshot["chain"] = [list(entry) for entry in chains[step.name]]
            steps[step.name] = snapshot
        snapshot = {"batch": batch, "clock": clock, "round_number": state.round_number,
                    "sources": [source.snapshot() for source in sources], "steps": steps,
                    "watermarks": state.watermarks.snapshot(),
                    "side_inputs": state.side_inputs.snapshot(),
                    "residuals": state.residuals.snapshot(),
                    "stage_names": {stage.index: stage.name for stage in self.plan.stages}}
        data = pickle.dumps(snapshot, protocol=5)
        manifest = {
            "format": FORMAT, "version": CHECKPOINT_VERSION, "state_version": STATE_VERSION,
            "fingerprint": self.fingerprint, "batch": batch,
            "parallelism": execution.context.parallelism, "written_at": time.time(),
            "data_sha256": hashlib.sha256(data).hexdigest(), "data_bytes": len(data),
            "state_files": {name: [list(entry) for entry in chain]
                            for name, chain in sorted(chains.items())},
            "state_bytes": {step.name: step.state_bytes for step in state.steps.values()},
            "state_keys": {step.name: step.keys for step in state.steps.values()},
            "stages": [stage.name for stage in self.plan.stages],
        }
        path = self._write_atomically(batch, data, manifest)
        for step in state.steps.values():
            step.chain = chains[step.name]
        self.written_batch = batch
        self._prune_state_files(state)
        self._prune_plans(batch)
        self._report(execution, len(data))
        _LOGGER.info("streaming: checkpoint of batch %d written to %s (driver data %d bytes; "
                     "state files %s)", batch, path, len(data),
                     {name: chain[-1] for name, chain in chains.items() if chain})
        return path

    def _write_atomically(self, batch: int, data: bytes, manifest: Dict[str, Any]) -> str:
        final = os.path.join(self.directory, checkpoint_name(batch))
        temporary = os.path.join(self.directory, f"{_TEMPORARY}{checkpoint_name(batch)}"
                                                 f"-{os.getpid()}")
        shutil.rmtree(temporary, ignore_errors=True)
        os.makedirs(temporary)
        _write_synced(os.path.join(temporary, DATA), data)
        _write_synced(os.path.join(temporary, MANIFEST),
                      json.dumps(manifest, indent=1, sort_keys=True).encode("utf-8"))
        if os.path.exists(final):  # the same batch again (e.g. resumed, stopped at once)
            shutil.rmtree(final)
        os.rename(temporary, final)
        _sync_directory(self.directory)
        for name in os.listdir(self.directory):
            match = _NAME.match(name)
            if (match and int(match.group(1)) < batch) or name.startswith(_TEMPORARY):
                shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)
        return final

    def _prune_state_files(self, state: Any) -> None:
        """Delete the state files the latest manifest does not name (older chains, files
        of rounds a later round of the same batch superseded, a crashed run's leftovers)."""
        for step in state.steps.values():
            directory = state.durable_directory(step)
            if not directory or not os.path.isdir(directory):
                continue
            keep = {checkpoint_file_name(kind, version) for kind, version in step.chain}
            for partition in os.listdir(directory):
                partition_directory = os.path.join(directory, partition)
                for name in os.listdir(partition_directory):
                    if name not in keep:
                        path = os.path.join(partition_directory, name)
                        if os.path.isdir(path):
                            shutil.rmtree(path, ignore_errors=True)
                        else:
                            os.remove(path)

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


def _write_synced(path: str, content: bytes) -> None:
    with open(path, "wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())


def _sync_directory(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
