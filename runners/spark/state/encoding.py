"""Per-key streaming state, encoded explicitly and versioned.

State survives from micro-batch to micro-batch in each key partition's store
(:mod:`~runners.spark.state.store`), so it is bytes, never live objects: Beam's
``InMemoryUnmergedState`` (what the trigger driver reads and writes) holds a
``defaultdict(lambda)`` and does not pickle. Two kinds of state exist:

* **GroupByKey state** (one per key): the trigger driver's timers, per-window state (the
  buffered elements, pane indices, trigger bookkeeping, watermark holds) and, for merging
  windows, the window-id table. Windows are encoded with the WindowFn's window coder,
  buffered elements with the value coder; the trigger's bookkeeping values are plain
  Python scalars (counts, flags, timestamps), pickled.
* **Stateful DoFn state** (one per key): the Fn API user-state cells of the key, exactly the
  bytes the SDK harness wrote, and its pending timers, encoded with the timer coder.

Every blob starts with :data:`STATE_VERSION`; decoding another version fails loudly.
Windows are garbage-collected once expired (:func:`expire_windows`).
"""

from __future__ import annotations

import math
import pickle
from typing import Any, Dict, List, Optional, Tuple

from apache_beam.utils.timestamp import Timestamp

from runners.spark.beam_internals import InMemoryUnmergedState, TimeDomain

#: Version of every state blob this module writes; bump it when the layout changes
#: (2: a stateful stage's state per key, no longer per partition).
STATE_VERSION = 2

#: The trigger driver's tag for buffered elements (GeneralTriggerDriver.ELEMENTS).
_ELEMENTS_TAG = "elements"
#: MergeableStateAdapter's global-state tag of the window -> ids table.
_WINDOW_IDS_TAG = "window_ids"


class StateVersionError(ValueError):
    """A state blob of another layout version (e.g. from an older checkpoint)."""


def _check_version(version: int) -> None:
    if version != STATE_VERSION:
        raise StateVersionError(
            f"streaming state of version {version} cannot be read by this runner "
            f"(version {STATE_VERSION}); start the job without that checkpoint")


class TriggerStateCodec:
    """Encodes a key's ``InMemoryUnmergedState`` to bytes and back.

    Args:
      window_coder: the coder of the windowing strategy's windows.
      value_coder: the coder of the grouped values (the elements buffered in panes).
    """

    def __init__(self, window_coder: Any, value_coder: Any) -> None:
        self._window = window_coder.get_impl()
        self._value = value_coder.get_impl()

    def _encode_window(self, window: Any) -> Tuple[str, Any]:
        if isinstance(window, int):  # merging windows: the adapter's window id
            return ("id", window)
        return ("window", self._window.encode(window))

    def _decode_window(self, encoded: Tuple[str, Any]) -> Any:
        kind, payload = encoded
        return payload if kind == "id" else self._window.decode(payload)

    def encode(self, state: Any) -> bytes:
        timers = [
            # Event-time timers hold Timestamps; processing-time ones the clock's floats.
            (self._encode_window(window), name, domain, tag, timestamp)
            for window, window_timers in state.timers.items()
            for (name, domain, tag), timestamp in window_timers.items()
        ]
        cells = []
        for window, tagged in state.state.items():
            for tag, values in tagged.items():
                if tag == _ELEMENTS_TAG:
                    values = [self._value.encode(value) for value in values]
                cells.append((self._encode_window(window), tag, list(values)))
        global_state = dict(state.global_state)
        if _WINDOW_IDS_TAG in global_state:
            global_state[_WINDOW_IDS_TAG] = [
                (self._window.encode(window), list(ids))
                for window, ids in global_state[_WINDOW_IDS_TAG].items()]
        return pickle.dumps((STATE_VERSION, timers, cells, global_state), protocol=5)

    def decode(self, blob: bytes) -> Any:
        version, timers, cells, global_state = pickle.loads(blob)
        _check_version(version)
        state = InMemoryUnmergedState()
        for window, name, domain, tag, timestamp in timers:
            state.timers[self._decode_window(window)][(name, domain, tag)] = timestamp
        for window, tag, values in cells:
            if tag == _ELEMENTS_TAG:
                values = [self._value.decode(value) for value in values]
            state.state[self._decode_window(window)][tag] = values
        if _WINDOW_IDS_TAG in global_state:
            global_state[_WINDOW_IDS_TAG] = {
                self._window.decode(window): ids for window, ids in global_state[_WINDOW_IDS_TAG]}
        state.global_state = global_state
        return state


def has_window_ids(state: Any) -> bool:
    """True when a key's trigger state is kept under window ids (the merging driver's)."""
    return _WINDOW_IDS_TAG in state.global_state


def is_empty(state: Any) -> bool:
    """True when a key holds nothing (its state can be dropped)."""
    window_ids = state.global_state.get(_WINDOW_IDS_TAG)
    other_global = {k: v for k, v in state.global_state.items() if k != _WINDOW_IDS_TAG}
    return (not any(state.timers.values()) and not any(state.state.values())
            and not window_ids and not other_global)


def expire_windows(state: Any, input_watermark: Any, allowed_lateness: Any,
                   merge_reach: Any = None) -> int:
    """Drop the state and timers of windows that no element can reach any more.

    The trigger driver drops data whose window ends before ``input_watermark -
    allowed_lateness``, so a non-merging window past that point is never read again. A merged
    window (a session) can still grow: an element kept at the limit has a proto-window
    reaching ``merge_reach`` (the session gap) past its timestamp, so a session is collected
    only once ``end + allowed lateness + gap`` is behind the watermark; without a known
    reach (a custom merging WindowFn) merged windows are kept. Returns how many windows
    were collected.
    """
    def expired(window: Any, reach: Any = 0) -> bool:
        return input_watermark > window.end + allowed_lateness + reach

    collected = 0
    window_ids = state.global_state.get(_WINDOW_IDS_TAG)
    if window_ids is not None:  # merging windows: state lives under window ids
        if merge_reach is None:
            return 0
        for window, ids in list(window_ids.items()):
            if expired(window, merge_reach):
                for window_id in ids:
                    state.state.pop(window_id, None)
                    state.timers.pop(window_id, None)
                del window_ids[window]
                collected += 1
        return collected
    for window in set(state.state) | set(state.timers):
        if not isinstance(window, int) and expired(window):
            state.state.pop(window, None)
            state.timers.pop(window, None)
            collected += 1
    return collected


def encode_user_state(cells: Dict[bytes, List[bytes]],
                      timers: Dict[Tuple[str, str], List[bytes]]) -> bytes:
    """One key's state in a stateful stage: its Fn API state cells (serialized state key ->
    values, exactly the bytes the SDK harness wrote) and its pending timers, encoded."""
    return pickle.dumps((STATE_VERSION, cells, timers), protocol=5)


def decode_user_state(blob: bytes) -> Tuple[Dict[bytes, List[bytes]],
                                            Dict[Tuple[str, str], List[bytes]]]:
    version, cells, timers = pickle.loads(blob)
    _check_version(version)
    return cells, timers


def processing_micros(seconds: Any) -> int:
    """Processing time (the loop's clock, seconds) in the micros the store indexes; the
    same function for timers and the clock, so ``timer <= clock`` is kept.

    >>> processing_micros(1.5)
    1500000
    """
    return math.floor(float(seconds) * 1_000_000)


def trigger_wakes(state: Any, allowed_lateness: Any,
                  merge_reach: Any) -> Tuple[Optional[int], Optional[int]]:
    """When a key's trigger state next needs its task (micros): (earliest event-time timer
    or window expiry, earliest processing-time timer); None when never.

    A window expires once the input watermark passes ``end + allowed lateness (+ the merge
    reach of a merging WindowFn)``, as :func:`expire_windows` collects it.
    """
    event: Optional[int] = None
    processing: Optional[int] = None
    for _, timers in state.timers.items():
        for (_, domain, _), timestamp in timers.items():
            if domain == TimeDomain.REAL_TIME:
                micros = processing_micros(timestamp)
                processing = micros if processing is None else min(processing, micros)
            else:
                micros = Timestamp.of(timestamp).micros
                event = micros if event is None else min(event, micros)
    window_ids = state.global_state.get(_WINDOW_IDS_TAG)
    windows = (list(window_ids) if window_ids is not None else
               [window for window in set(state.state) | set(state.timers)
                if not isinstance(window, int)])
    if window_ids is None or merge_reach is not None:
        reach = merge_reach if window_ids is not None else 0
        for window in windows:
            expiry = (window.end + allowed_lateness + reach).micros + 1
            event = expiry if event is None else min(event, expiry)
    return event, processing
