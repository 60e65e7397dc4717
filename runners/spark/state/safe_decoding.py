"""Beam's coders that unpickle what they decode, replaced for a state reader by coders that
build plain data only.

A pipeline without type hints encodes its keys and values with ``FastPrimitivesCoder``
(a type tag, then the value; anything but ``None``, ``int``, ``float``, ``bytes``, ``str``,
``bool``, lists, tuples, sets and dicts of them is pickled), and a lifted combine's
accumulators often too; ``PickleCoder`` and its kind pickle every value. Decoding them with
Beam's own coders would run the pickles a checkpoint holds. A state reader decodes with
:class:`SafePrimitivesCoder` and :class:`SafePickleCoder` instead (what
:func:`~runners.spark.state.manifest_coders.load_coders` builds in their place): the same
layouts, but a pickle builds only plain data and a few value classes of the standard
library (:data:`PLAIN_CLASSES`); anything else raises :class:`UnsafeValueError` naming it,
and the reader shows that value as its bytes, with the reason.

>>> from apache_beam.coders import FastPrimitivesCoder
>>> encoded = FastPrimitivesCoder().encode(("k1", [3, 2.5], {"a": None}))
>>> SafePrimitivesCoder().decode(encoded)
('k1', [3, 2.5], {'a': None})
>>> import ipaddress
>>> SafePrimitivesCoder().decode(FastPrimitivesCoder().encode(ipaddress.ip_address("10.0.0.1")))
Traceback (most recent call last):
...
runners.spark.state.safe_decoding.UnsafeValueError: a pickled ipaddress.IPv4Address: a state reader unpickles plain data and a few standard value classes only
"""

from __future__ import annotations

import io
import pickle
from typing import Any, Dict, Tuple

from apache_beam.coders import coders
from apache_beam.utils.timestamp import Duration, Timestamp

from runners.spark.beam_internals import IterableCoderImpl, StreamCoderImpl

# FastPrimitivesCoder's type tags (Beam's coder_impl.py; its compiled module does not export
# them): the first byte of each value it encodes.
NONE_TYPE, INT_TYPE, FLOAT_TYPE, BYTES_TYPE, UNICODE_TYPE = 0, 1, 2, 3, 4
LIST_TYPE, TUPLE_TYPE, DICT_TYPE, SET_TYPE, BOOL_TYPE, ITERABLE_LIKE_TYPE = 5, 6, 7, 8, 9, 10
UNKNOWN_TYPE = 0xFF  # pickled by the fallback coder

#: The classes a value's pickle may name: plain values of the standard library and Beam's
#: timestamps, built from their pickled arguments without running the pipeline's code.
PLAIN_CLASSES: Dict[Tuple[str, str], Any] = {}


def _allow(module: Any, *names: str) -> None:
    for name in names:
        PLAIN_CLASSES[(module.__name__, name)] = getattr(module, name)


def _plain_classes() -> None:
    import builtins
    import collections
    import datetime
    import decimal
    import fractions

    _allow(builtins, "set", "frozenset", "complex", "bytearray")
    _allow(collections, "OrderedDict")
    _allow(datetime, "date", "time", "datetime", "timedelta", "timezone")
    _allow(decimal, "Decimal")
    _allow(fractions, "Fraction")
    PLAIN_CLASSES[("apache_beam.utils.timestamp", "Timestamp")] = Timestamp
    PLAIN_CLASSES[("apache_beam.utils.timestamp", "Duration")] = Duration


_plain_classes()

#: FastPrimitivesCoder's tags of values whose type is pickled with them (a named tuple, a
#: dataclass, an enum, a proto, an object's state), with what they hold.
_TYPED_TAGS = {100: "a proto message", 101: "a dataclass", 102: "a named tuple",
               103: "an enum", 104: "an object with __getstate__",
               105: "a keyword-only dataclass"}


class UnsafeValueError(ValueError):
    """A value whose decoding would build a class of the pipeline's code (or run a pickle's
    functions): a state reader shows its bytes instead."""


class AllowListUnpickler(pickle.Unpickler):
    """Builds plain data and the classes of :attr:`allowed` only; any other class a pickle
    names is refused with :meth:`refusal`, before anything of it is built or run."""

    #: (module, name) -> the class a pickle may name.
    allowed: Dict[Tuple[str, str], Any] = {}

    def refusal(self, module: str, name: str) -> Exception:
        """The error for a pickle naming ``module.name``."""
        raise NotImplementedError

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get((module, name))
        if found is None:
            raise self.refusal(module, name)
        return found


class PlainValueUnpickler(AllowListUnpickler):
    """Builds plain data and :data:`PLAIN_CLASSES` only."""

    allowed = PLAIN_CLASSES

    def refusal(self, module: str, name: str) -> Exception:
        return UnsafeValueError(f"a pickled {module}.{name}: a state reader unpickles plain "
                                "data and a few standard value classes only")


def load_plain_value(data: bytes) -> Any:
    """Unpickle ``data`` with :class:`PlainValueUnpickler`."""
    try:
        return PlainValueUnpickler(io.BytesIO(data)).load()
    except UnsafeValueError:
        raise
    except Exception as error:  # not a pickle of plain data (dill's, cloudpickle's types)
        raise UnsafeValueError(f"a pickle that is not plain data "
                               f"({type(error).__name__}: {error})") from error


class SafePickleCoderImpl(StreamCoderImpl):
    """``PickleCoder``'s layout (a pickle), unpickled with :class:`PlainValueUnpickler`."""

    def encode_to_stream(self, value: Any, stream: Any, nested: bool) -> None:
        stream.write(pickle.dumps(value, pickle.HIGHEST_PROTOCOL), nested)

    def decode_from_stream(self, stream: Any, nested: bool) -> Any:
        return load_plain_value(stream.read_all(nested))


class SafePrimitivesCoderImpl(StreamCoderImpl):
    """``FastPrimitivesCoder``'s layout; its pickled values through
    :class:`SafePickleCoderImpl`, and values whose type is pickled refused. Encodes as
    ``FastPrimitivesCoder`` does (encoding runs no code of the data's)."""

    def __init__(self) -> None:
        self._iterable = IterableCoderImpl(self)
        self._fallback = SafePickleCoderImpl()
        self._encoder = coders.FastPrimitivesCoder().get_impl()

    def encode_to_stream(self, value: Any, stream: Any, nested: bool) -> None:
        self._encoder.encode_to_stream(value, stream, nested)

    def decode_from_stream(self, stream: Any, nested: bool) -> Any:
        tag = stream.read_byte()
        if tag == NONE_TYPE:
            return None
        if tag == INT_TYPE:
            return stream.read_var_int64()
        if tag == FLOAT_TYPE:
            return stream.read_bigendian_double()
        if tag == BYTES_TYPE:
            return stream.read_all(nested)
        if tag == UNICODE_TYPE:
            return stream.read_all(nested).decode("utf-8")
        if tag in (LIST_TYPE, TUPLE_TYPE, SET_TYPE):
            items = [self.decode_from_stream(stream, True)
                     for _ in range(stream.read_var_int64())]
            return items if tag == LIST_TYPE else tuple(items) if tag == TUPLE_TYPE else set(
                items)
        if tag == DICT_TYPE:
            pairs = [(self.decode_from_stream(stream, True), self.decode_from_stream(stream, True))
                     for _ in range(stream.read_var_int64())]
            return dict(pairs)
        if tag == BOOL_TYPE:
            return bool(stream.read_byte())
        if tag == ITERABLE_LIKE_TYPE:
            return self._iterable.decode_from_stream(stream, nested)
        if tag == UNKNOWN_TYPE:
            return self._fallback.decode_from_stream(stream, nested)
        if tag in _TYPED_TAGS:
            raise UnsafeValueError(f"{_TYPED_TAGS[tag]} whose class is pickled with it: a "
                                   "state reader does not unpickle the pipeline's classes")
        raise ValueError(f"unknown FastPrimitivesCoder type tag {tag:#x}")


class SafePickleCoder(coders.FastCoder):
    """Stands for ``PickleCoder``, ``DillCoder`` and ``CloudpickleCoder`` in a reader."""

    def _create_impl(self) -> SafePickleCoderImpl:
        return SafePickleCoderImpl()

    def is_deterministic(self) -> bool:
        return False


class SafePrimitivesCoder(coders.FastCoder):
    """Stands for ``FastPrimitivesCoder`` and its deterministic kinds in a reader."""

    def _create_impl(self) -> SafePrimitivesCoderImpl:
        return SafePrimitivesCoderImpl()

    def is_deterministic(self) -> bool:
        return True


#: Beam's coder classes that unpickle what they decode -> what a reader builds instead.
SUBSTITUTES: Dict[Tuple[str, str], type] = {
    ("apache_beam.coders.coders", "FastPrimitivesCoder"): SafePrimitivesCoder,
    ("apache_beam.coders.coders", "DeterministicFastPrimitivesCoder"): SafePrimitivesCoder,
    ("apache_beam.coders.coders", "DeterministicFastPrimitivesCoderV2"): SafePrimitivesCoder,
    ("apache_beam.coders.coders", "PickleCoder"): SafePickleCoder,
    ("apache_beam.coders.coders", "DillCoder"): SafePickleCoder,
    ("apache_beam.coders.coders", "CloudpickleCoder"): SafePickleCoder,
}
#: ... and those a reader refuses (their values are base64 text of compressed pickles).
REFUSED = {("apache_beam.coders.coders", "_MemoizingPickleCoder"):
           "a memoizing pickle coder, whose values are compressed pickles"}
