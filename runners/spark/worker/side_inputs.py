"""Side inputs: materialized per window on the driver, served to bundles as state.

A ParDo reads a side input through the Fn API state protocol, asking for the elements of one
window (iterable access) or of one key in one window (multimap access). The driver collects
the side input's elements once, groups them by window with Beam's ``WindowGroupingBuffer``
and lays them out under the exact state keys ``FnApiRunnerExecutionContext.
commit_side_inputs_to_state`` uses; the resulting ``{state key bytes: [encoded values]}``
table is broadcast (:class:`SharedSideInputs`), and each task serves it read-only through
:class:`TaskStateHandler`, next to a fresh store for the task's user state (stateful DoFns).

A table travels with a digest of its content (:func:`table_digest`): Beam's DoFn invoker
keeps the values of side inputs in the global window from the first element it processes
for as long as its ``BundleProcessor`` lives, so a worker reuses a processor only for tasks
of the same table (:mod:`runners.spark.worker.bundles`).

>>> table_digest({b"key": [b"a", b"b"]}) == table_digest({b"key": [b"ab"]})
False
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from typing import Any, Dict, Iterable, List, Optional, Tuple

from runners.spark.beam_internals import (
    SIDE_INPUT_STATE_TYPES,
    StateHandler,
    StateServicer,
    WindowGroupingBuffer,
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    common_urns,
    load_user_state_cells,
    user_state_cells,
)
from runners.spark.planning.execution_plan import SideInputSpec

SideInputTable = Dict[bytes, List[bytes]]


def table_digest(table: SideInputTable) -> str:
    """A digest of a side-input table's content: its state keys and their values, each
    length-prefixed (tables that differ never feed the hash the same bytes)."""
    digest = hashlib.sha256()
    for state_key in sorted(table):
        values = table[state_key]
        digest.update(struct.pack(">QQ", len(state_key), len(values)))
        digest.update(state_key)
        for value in values:
            digest.update(struct.pack(">Q", len(value)))
            digest.update(value)
    return digest.hexdigest()


class SharedSideInputs:
    """A stage's side-input table as its tasks get it (picklable): the table broadcast, and
    its digest (what a task's pooled processor must have been built for).

    Args:
      broadcast: a backend broadcast (:class:`~runners.spark.backends.base.Broadcast`) of
        the table.
      digest: :func:`table_digest` of the table.
    """

    def __init__(self, broadcast: Any, digest: str) -> None:
        self.broadcast = broadcast
        self.digest = digest

    @classmethod
    def create(cls, backend: Any, table: SideInputTable) -> "SharedSideInputs":
        """``table`` broadcast by ``backend`` (a :class:`~runners.spark.backends.base.
        Backend`)."""
        return cls(backend.broadcast(table), table_digest(table))

    @property
    def value(self) -> SideInputTable:
        """The table (in a task: fetched once per worker process)."""
        return self.broadcast.value

    def unpersist(self) -> None:
        """Free the broadcast (no job of the pass needs it any more)."""
        self.broadcast.unpersist()


def materialize(spec: SideInputSpec, chunks: Iterable[bytes], coder: Any) -> SideInputTable:
    """The state entries a consuming bundle reads for one side input.

    Args:
      spec: which ParDo input this is, and how it is accessed.
      chunks: the side input's encoded elements (as its producing stage wrote them).
      coder: the windowed coder of those elements (``spec.coder_id``).
    """
    access_pattern = beam_runner_api_pb2.FunctionSpec.FromString(spec.access_pattern)
    grouped = WindowGroupingBuffer(access_pattern, coder)
    for chunk in chunks:
        grouped.append(chunk)
    table: SideInputTable = {}

    def add(state_key: "beam_fn_api_pb2.StateKey", data: bytes) -> None:
        table.setdefault(state_key.SerializeToString(), []).append(data)

    if access_pattern.urn == common_urns.side_inputs.ITERABLE.urn:
        for _, window, elements, _ in grouped.encoded_items():
            add(beam_fn_api_pb2.StateKey(
                iterable_side_input=beam_fn_api_pb2.StateKey.IterableSideInput(
                    transform_id=spec.transform_id, side_input_id=spec.tag, window=window)),
                elements)
    elif access_pattern.urn == common_urns.side_inputs.MULTIMAP.urn:
        for key, window, elements, count in grouped.encoded_items():
            add(beam_fn_api_pb2.StateKey(
                multimap_side_input=beam_fn_api_pb2.StateKey.MultimapSideInput(
                    transform_id=spec.transform_id, side_input_id=spec.tag, window=window,
                    key=key)),
                elements)
            add(beam_fn_api_pb2.StateKey(
                multimap_keys_side_input=beam_fn_api_pb2.StateKey.MultimapKeysSideInput(
                    transform_id=spec.transform_id, side_input_id=spec.tag, window=window)),
                key)
            # KV<K, Iterable<V>>: the key, the element count, then the elements.
            add(beam_fn_api_pb2.StateKey(
                multimap_keys_values_side_input=(
                    beam_fn_api_pb2.StateKey.MultimapKeysValuesSideInput)(
                    transform_id=spec.transform_id, side_input_id=spec.tag, window=window)),
                key + struct.pack(">i", count) + elements)
    else:
        raise ValueError(
            f"side input {spec.tag!r} of {spec.transform_id!r} uses access pattern "
            f"{access_pattern.urn!r}; the Spark runner supports iterable and multimap"
        )
    return table


class TaskStateHandler(StateHandler):
    """The Fn API state of one task: side inputs read-only, user state in a fresh store.

    User state lives only as long as the task: a stateful stage's input is partitioned by
    key, so every key's state and timers stay inside the one task that owns the key.
    """

    def __init__(self, side_inputs: Optional[SideInputTable] = None) -> None:
        self._side_inputs = side_inputs or {}
        self._user_state = StateServicer()

    def user_state(self) -> Dict[bytes, List[bytes]]:
        """The user-state cells written so far: serialized state key -> values."""
        return user_state_cells(self._user_state)

    def load_user_state(self, cells: Dict[bytes, List[bytes]]) -> None:
        """Start from these cells (streaming: the keys' state from earlier batches)."""
        load_user_state_cells(self._user_state, cells)

    def get_raw(self, state_key, continuation_token: Optional[bytes] = None) -> Tuple[bytes, None]:
        if state_key.WhichOneof("type") in SIDE_INPUT_STATE_TYPES:
            return b"".join(self._side_inputs.get(state_key.SerializeToString(), ())), None
        return self._user_state.get_raw(state_key, continuation_token)

    def append_raw(self, state_key, data: bytes):
        return self._user_state.append_raw(state_key, data)

    def clear(self, state_key):
        return self._user_state.clear(state_key)

    @contextlib.contextmanager
    def process_instruction_id(self, bundle_id: str):
        yield

    def done(self) -> None:
        pass
