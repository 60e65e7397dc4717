"""One key's stored state as rows of a table: what a state reader shows of a store's row.

A keyed step's store row (:mod:`~runners.spark.state.store`) is a header (the
version that wrote it, wakes, the watermark hold) and a blob (:mod:`~runners.spark.
state.encoding`): a GroupByKey's trigger state, or a stateful DoFn's user-state cells and
timers. :func:`decode_key` turns one into :class:`StateRow` s, one per buffered element,
trigger bookkeeping cell, watermark hold, user-state value and timer, decoded with the
step's coders (:mod:`~runners.spark.state.manifest_coders`): keys, windows, a GroupByKey's
buffered elements (a lifted combine's accumulators, named ``accumulator``), user-state
values and timers. A value no coder can decode safely (its coder could not be built, or only
unpickling the pipeline's classes would decode it: :mod:`~runners.spark.state.
safe_decoding`) is shown as its bytes, with the reason (:func:`not_decoded`).

The runner's own structures in a blob are pickles of plain data; they are read with
:class:`PlainStateUnpickler`, which builds only plain Python values and Beam's
``Timestamp``/``Duration`` and refuses any other class or function
(:class:`UnsafeStateError`): reading a checkpoint runs no code from it beyond Beam's coders,
and none of them unpickles the pipeline's classes.

>>> import pickle
>>> load_plain(pickle.dumps((2, {b"cell": [b"v"]}, {})))
(2, {b'cell': [b'v']}, {})
>>> load_plain(pickle.dumps(print))
Traceback (most recent call last):
...
runners.spark.state.table.rows.UnsafeStateError: a state blob names builtins.print; a state reader builds plain data, Timestamp and Duration only
"""

from __future__ import annotations

import io
import typing
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple

from apache_beam.utils.timestamp import Duration, Timestamp

from runners.spark.beam_internals import beam_fn_api_pb2, create_InputStream
from runners.spark.state.encoding import STATE_VERSION, processing_micros
from runners.spark.state.manifest_coders import ACCUMULATORS, GROUP_BY_KEY, LoadedCoders
from runners.spark.state.safe_decoding import AllowListUnpickler, UnsafeValueError
from runners.spark.state.store import decode_row

#: The classes a state blob may name (all else is refused).
_ALLOWED = {("apache_beam.utils.timestamp", "Timestamp"): Timestamp,
            ("apache_beam.utils.timestamp", "Duration"): Duration}
#: Trigger-state tags with a meaning of their own (``encoding.py``, Beam's trigger driver).
_ELEMENTS_TAG = "elements"
_HOLD_TAG = "watermark"


class UnsafeStateError(ValueError):
    """A state blob naming a class or function a state reader does not build."""


class StateRow(NamedTuple):
    """One row of a keyed step's state (see :func:`decode_key`): ``kind`` is
    ``"elements"`` (a GroupByKey's buffered element), ``"trigger"`` (trigger bookkeeping),
    ``"hold"`` (a window's watermark hold), ``"cell"`` (a user-state value) or ``"timer"``;
    ``timestamp`` (micros) is a timer's fire time or a hold's; ``hold`` is the key's
    watermark hold (micros, None: none); ``version`` the store version that wrote the key."""

    step: str
    partition: int
    key: str
    key_bytes: bytes
    window: Optional[str]
    kind: str
    name: str
    value: Optional[str]
    value_bytes: Optional[bytes]
    timestamp: Optional[int]
    hold: Optional[int]
    version: int


#: Spark's type of a state row's columns, by their Python type; a partition is an int.
_SPARK_TYPES = {str: "string", bytes: "binary", int: "long"}
_NARROWER_SPARK_TYPES = {"partition": "int"}


def spark_schema(row_type: Any) -> str:
    """The Spark DDL schema of a row type whose fields are ``str``, ``bytes``, ``int`` or
    ``Optional`` of one of them.

    >>> spark_schema(StateRow).split(", ")[:4]
    ['step string', 'partition int', 'key string', 'key_bytes binary']
    """
    columns = []
    for name, hint in typing.get_type_hints(row_type).items():
        types = [each for each in typing.get_args(hint) if each is not type(None)] or [hint]
        columns.append(f"{name} {_NARROWER_SPARK_TYPES.get(name) or _SPARK_TYPES[types[0]]}")
    return ", ".join(columns)


class PlainStateUnpickler(AllowListUnpickler):
    """Builds plain data, ``Timestamp`` and ``Duration`` only; anything else is refused."""

    allowed = _ALLOWED

    def refusal(self, module: str, name: str) -> Exception:
        return UnsafeStateError(f"a state blob names {module}.{name}; a state reader builds "
                                "plain data, Timestamp and Duration only")


def load_plain(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`PlainStateUnpickler`."""
    return PlainStateUnpickler(io.BytesIO(data)).load()


def text(value: Any) -> str:
    """A decoded value as table text: a string as it is, anything else by its repr."""
    return value if isinstance(value, str) else repr(value)


def not_decoded(data: Optional[bytes], why: str) -> str:
    """What a reader shows of a value no coder could decode safely: its bytes (first, so
    values stay apart when a cell is cut), then why.

    >>> print(not_decoded(b"\\x04k1", "no coder"))
    b'\\x04k1' <not decoded: no coder>
    """
    return f"{data!r} <not decoded: {why}>" if data is not None else f"<not decoded: {why}>"


def _why(error: Exception) -> str:
    """Why a value was not decoded: a refusal says it all, another error names its type."""
    return str(error) if isinstance(error, UnsafeValueError) else (
        f"{type(error).__name__}: {error}")


class KeyDecoder:
    """Decodes a step's rows with its decoding entry (``state_coders.state_decoding``) and
    its coders (None for both: show bytes only, saying why)."""

    def __init__(self, step: str, entry: Optional[Dict[str, Any]], coders: LoadedCoders) -> None:
        self.step = step
        self.entry = entry or {}
        self.coders = coders
        self.kind = self.entry.get("kind", "")
        self._key = self._coder("key_coder")
        self._window = self._coder("window_coder")
        self._value = self._coder("value_coder")
        #: What a GroupByKey's buffered values are: elements, or a lifted combine's
        #: accumulators (the name of their rows).
        self._values = ("accumulator" if self.entry.get("values") == ACCUMULATORS
                        else _ELEMENTS_TAG)

    def _coder(self, field: str) -> Tuple[Optional[Any], str]:
        coder_id = self.entry.get(field)
        coder = self.coders.get(coder_id)
        why = "" if coder is not None else (
            self.coders.why(coder_id) if self.entry else
            "the checkpoint has no decoding entry for this step (written by an older runner)")
        return coder, why

    def _decode(self, coder: Tuple[Optional[Any], str], data: bytes, nested: bool = False) -> str:
        impl_coder, why = coder
        if impl_coder is None:
            return not_decoded(data, why)
        try:
            impl = impl_coder.get_impl()
            value = (impl.decode_from_stream(create_InputStream(data), True) if nested
                     else impl.decode(data))
        except Exception as error:  # a value its coder cannot (or may not) read: say why
            return not_decoded(data, _why(error))
        return text(value)

    def key(self, key_bytes: bytes) -> str:
        return self._decode(self._key, key_bytes)

    def window(self, encoded: Any) -> Optional[str]:
        """A window as the trigger state keeps it: ``("window", bytes)`` or ``("id", n)``."""
        if encoded is None:
            return None
        if isinstance(encoded, tuple) and encoded[0] == "id":
            return f"window id {encoded[1]}"
        data = encoded[1] if isinstance(encoded, tuple) else encoded
        return self._decode(self._window, data)

    def rows(self, partition: int, key_bytes: bytes, row: bytes) -> Iterator[StateRow]:
        """The state rows of one stored key."""
        version, state = decode_row(row)
        base = StateRow(self.step, partition, self.key(key_bytes), key_bytes, None, "", "",
                        None, None, None, state.hold, version)
        blob = load_plain(state.blob)
        if blob[0] != STATE_VERSION:
            raise ValueError(f"step {self.step!r}: a state blob of layout version {blob[0]}; "
                             f"this reader reads version {STATE_VERSION}")
        if self.kind == GROUP_BY_KEY or (not self.kind and len(blob) == 4):
            yield from self._trigger_rows(base, blob)
        else:
            yield from self._user_rows(base, blob)

    # ----- a GroupByKey's trigger state: (version, timers, cells, global state)
    def _trigger_rows(self, base: StateRow, blob: Tuple[Any, ...]) -> Iterator[StateRow]:
        _, timers, cells, global_state = blob
        for window, name, domain, tag, timestamp in timers:
            micros = (Timestamp.of(timestamp).micros if isinstance(timestamp, Timestamp)
                      else processing_micros(timestamp))
            yield base._replace(window=self.window(window), kind="timer",
                                name=name + (f"/{tag}" if tag else ""), value=str(domain),
                                timestamp=micros)
        for window, tag, values in cells:
            if not values:  # an empty cell is a cleared one
                continue
            window_text = self.window(window)
            if tag == _ELEMENTS_TAG:
                for encoded in values:
                    yield base._replace(window=window_text, kind="elements", name=self._values,
                                        value=self._decode(self._value, encoded),
                                        value_bytes=encoded)
            elif tag == _HOLD_TAG:
                yield base._replace(window=window_text, kind="hold", name=tag,
                                    value=text(values),
                                    timestamp=min(Timestamp.of(value).micros
                                                  for value in values))
            else:
                yield base._replace(window=window_text, kind="trigger", name=tag,
                                    value=text(values))
        for tag, value in sorted(global_state.items()):
            if tag == "window_ids":  # merging windows: window -> the ids its state is under
                value = [(self.window(("window", window)), ids) for window, ids in value]
            yield base._replace(kind="trigger", name=tag, value=text(value))

    # ----- a stateful DoFn's state: (version, cells, timers)
    def _user_rows(self, base: StateRow, blob: Tuple[Any, ...]) -> Iterator[StateRow]:
        _, cells, timers = blob
        for state_key, values in sorted(cells.items()):
            parsed = beam_fn_api_pb2.StateKey.FromString(state_key)
            kind = parsed.WhichOneof("type")
            cell = getattr(parsed, kind)
            transform_id = getattr(cell, "transform_id", "")
            state_id = getattr(cell, "user_state_id", "")
            window = self._decode(self._window, cell.window) if cell.window else None
            data = b"".join(values)
            # The SDK keys its state by the key's nested encoding (the store key may be the
            # outer one): the key shown is the one the cell names.
            key = self._decode(self._key, cell.key, nested=True) if cell.key else base.key
            yield from self._cell_rows(base._replace(key=key, window=window, kind="cell",
                                                     name=f"{transform_id}/{state_id}"),
                                       kind, transform_id, state_id, data)
        for (transform_id, family_id), encoded_timers in sorted(timers.items()):
            coder_id = self.entry.get("timers", {}).get(f"{transform_id}/{family_id}")
            coder = self.coders.get(coder_id)
            for encoded in encoded_timers:
                row = base._replace(kind="timer", name=f"{transform_id}/{family_id}",
                                    value_bytes=encoded)
                if coder is None:
                    yield row._replace(value=not_decoded(encoded, self.coders.why(coder_id)))
                    continue
                try:
                    timer = coder.get_impl().decode_from_stream(create_InputStream(encoded),
                                                                True)
                except Exception as error:  # e.g. a key of the pipeline's own class
                    yield row._replace(value=not_decoded(encoded, _why(error)))
                    continue
                tag = f"/{timer.dynamic_timer_tag}" if timer.dynamic_timer_tag else ""
                yield row._replace(key=text(timer.user_key), name=row.name + tag,
                                   window=text(timer.windows[0]),
                                   value=f"hold {timer.hold_timestamp}",
                                   timestamp=timer.fire_timestamp.micros)

    def _cell_rows(self, row: StateRow, kind: str, transform_id: str, state_id: str,
                   data: bytes) -> Iterator[StateRow]:
        """A user-state cell's values: a bag's (a value's, a combining value's) each decoded
        from the stream the SDK wrote; other kinds of cell as their bytes."""
        spec = self.entry.get("state", {}).get(transform_id, {}).get(state_id)
        coders = spec["coders"] if spec else []
        coder = self.coders.get(coders[-1]) if kind == "bag_user_state" and coders else None
        if coder is None:
            why = (self.coders.why(coders[-1]) if kind == "bag_user_state" and coders
                   else f"a {kind} cell is shown as bytes")
            yield row._replace(value=not_decoded(data, why), value_bytes=data)
            return
        impl = coder.get_impl()
        stream = create_InputStream(data)
        start = 0
        while stream.size() > 0:
            try:
                value = text(impl.decode_from_stream(stream, True))
            except Exception as error:  # the rest of the cell cannot be read: its bytes
                yield row._replace(value=not_decoded(data[start:], _why(error)),
                                   value_bytes=data[start:])
                return
            end = len(data) - stream.size()
            yield row._replace(value=value, value_bytes=data[start:end])
            start = end
