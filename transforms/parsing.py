"""Edge adaptation: external records (JSON, CSV lines) in, typed and event-time stamped events out.

The lecture's first processing element turns what arrives from the outside world into typed
tuples and rejects what it cannot read. :class:`ParseJson` and :class:`ParseCsv` do exactly
that for an ``event_type`` declared as a ``typing.NamedTuple`` with annotated fields (``int``,
``float``, ``str``, ``bool`` or ``Optional[...]`` of these):

* ``.parsed``: one ``event_type`` instance per good record, its element timestamp set to the
  record's event time (read from ``timestamp_field``; see
  :func:`transforms.windows.parse_event_time`).
* ``.dead_letter``: one :class:`DeadLetter` ``(raw, reason, source)`` per bad record, its
  reason naming the field and the problem. Nothing is dropped: every input element lands in
  exactly one of the two outputs, and the Beam counters ``parsed`` and ``rejected`` in
  namespace :data:`METRICS_NAMESPACE` count them.

Conversion is strict, so a bad record is caught here rather than as a wrong number later:

* JSON values must already have the field's JSON type: a number for ``int`` (integral, not
  ``3.0``) and ``float`` (an int is accepted), a string for ``str``, ``true``/``false`` or
  ``1``/``0`` for ``bool``; ``null`` only for ``Optional`` fields. ``NaN``/``Infinity``,
  duplicate keys and non-object documents are rejected.
* CSV cells are text: ``int`` is ``[+-]digits``, ``float`` a decimal or exponent number
  (finite), ``bool`` is ``true``/``false``/``1``/``0`` (any case); surrounding spaces are
  ignored for these, never for ``str``. An empty cell is ``None`` for an ``Optional`` field.
* A field missing from the record takes the NamedTuple's default if it declares one and is
  rejected otherwise (``Optional`` means "may be null", not "may be absent").
* Fields the event type does not declare are rejected, because keeping the record would
  silently drop them; pass ``ignore_extra_fields=True`` to accept records from producers
  that add fields (schema evolution). ``timestamp_field`` is never extra.

Define event types at module level of an importable module (as ``pipelines/events.py``
does): runners pickle parsed events between stages, and a class pickles by reference.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> from pipelines.events import GameEvent  # user: str, team: str, score: int, timestamp: float
>>> records = ['{"user": "ann", "team": "red", "score": 3, "timestamp": 10}',
...            '{"user": "bob", "team": "red", "score": "x", "timestamp": 10}']
>>> with beam.Pipeline() as p:
...     result = p | beam.Create(records) | ParseJson(GameEvent)
...     _ = assert_that(result.parsed, equal_to([GameEvent("ann", "red", 3, 10.0)]),
...                     label="parsed")
...     _ = assert_that(result.dead_letter | beam.Map(lambda letter: letter.reason),
...                     equal_to(["field 'score': expected int, got 'x'"]), label="rejected")
"""

from __future__ import annotations

import csv
import json
import math
import re
import typing
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Type

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as beam_window

from transforms.windows import parse_event_time

__all__ = ["DeadLetter", "METRICS_NAMESPACE", "PARSED", "DEAD_LETTER", "ParseJson", "ParseCsv"]

#: Namespace of the "parsed" and "rejected" counters.
METRICS_NAMESPACE = "transforms.parsing"
#: Output tags (and attribute names) of the parse result.
PARSED = "parsed"
DEAD_LETTER = "dead_letter"

_SUPPORTED_TYPES = (int, float, str, bool)
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}


class DeadLetter(NamedTuple):
    """A rejected input record: the raw text, why it was rejected, and which parser did it.

    >>> DeadLetter("{", "malformed JSON: ...", "ParseJson[Score]").to_json()
    '{"raw": "{", "reason": "malformed JSON: ...", "source": "ParseJson[Score]"}'
    """

    raw: str
    reason: str
    source: str

    def to_json(self) -> str:
        """One JSON object per dead letter, ready for a JSON-lines file or a Kafka topic."""
        return json.dumps({"raw": self.raw, "reason": self.reason, "source": self.source})

    @classmethod
    def from_json(cls, text: str) -> "DeadLetter":
        """The inverse of :meth:`to_json`."""
        data = json.loads(text)
        return cls(data["raw"], data["reason"], data["source"])


class _Rejected(Exception):
    """A record cannot be parsed; the message is the dead-letter reason."""


class _Field(NamedTuple):
    name: str
    kind: type  # int, float, str or bool
    optional: bool
    has_default: bool
    default: Any


def _event_fields(event_type: Type[tuple]) -> List[_Field]:
    if not (isinstance(event_type, type) and issubclass(event_type, tuple)
            and hasattr(event_type, "_fields")):
        raise TypeError(
            f"event_type must be a typing.NamedTuple class with annotated fields, "
            f"got {event_type!r}"
        )
    hints = typing.get_type_hints(event_type)
    defaults = getattr(event_type, "_field_defaults", {})
    fields = []
    for name in event_type._fields:
        if name not in hints:
            raise TypeError(f"{event_type.__name__}.{name} has no type annotation")
        kind, optional = hints[name], False
        arguments = typing.get_args(kind)
        if typing.get_origin(kind) is typing.Union and len(arguments) == 2 and type(None) in arguments:
            kind, optional = [arg for arg in arguments if arg is not type(None)][0], True
        if kind not in _SUPPORTED_TYPES:
            raise TypeError(
                f"{event_type.__name__}.{name} is annotated {hints[name]!r}; supported field "
                "types are int, float, str, bool and Optional[...] of these"
            )
        fields.append(_Field(name, kind, optional, name in defaults, defaults.get(name)))
    return fields


def _convert_json(field: _Field, value: Any) -> Any:
    if value is None:
        if field.optional:
            return None
    elif field.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif isinstance(value, bool):
        pass  # true/false is no number and no string
    elif field.kind is int:
        if isinstance(value, int):
            return value
    elif field.kind is float:
        if isinstance(value, (int, float)):
            try:
                number = float(value)
            except OverflowError:  # an int beyond the float range
                number = math.inf
            if not math.isfinite(number):
                raise _Rejected(f"field {field.name!r}: {value!r} is not a finite number")
            return number
    elif isinstance(value, str):  # field.kind is str
        return value
    raise _Rejected(f"field {field.name!r}: expected {_type_name(field)}, got {value!r}")


def _convert_text(field: _Field, text: str) -> Any:
    if field.optional and text == "":
        return None
    if field.kind is str:
        return text
    stripped = text.strip()
    if field.kind is bool:
        if stripped.lower() in _BOOL_TEXT:
            return _BOOL_TEXT[stripped.lower()]
    elif field.kind is int:
        if _INT_TEXT.fullmatch(stripped):
            return int(stripped)
    elif _FLOAT_TEXT.fullmatch(stripped):  # field.kind is float
        value = float(stripped)
        if not math.isfinite(value):
            raise _Rejected(f"field {field.name!r}: {text!r} is not a finite number")
        return value
    raise _Rejected(f"field {field.name!r}: expected {_type_name(field)}, got {text!r}")


def _type_name(field: _Field) -> str:
    name = "bool (true/false/1/0)" if field.kind is bool else field.kind.__name__
    return f"{name} or null" if field.optional else name


class _RecordBuilder:
    """Turns a field-name -> value mapping into ``(event, event time)`` or raises _Rejected."""

    def __init__(
        self,
        event_type: Type[tuple],
        timestamp_field: Optional[str],
        ignore_extra_fields: bool,
    ) -> None:
        if timestamp_field is not None and (not isinstance(timestamp_field, str)
                                            or not timestamp_field):
            raise TypeError(
                f"timestamp_field must be a field name, or None to keep the input "
                f"timestamps, got {timestamp_field!r}"
            )
        self.event_type = event_type
        self.fields = _event_fields(event_type)
        self.timestamp_field = timestamp_field
        self.ignore_extra_fields = ignore_extra_fields
        by_name = {field.name: field for field in self.fields}
        if timestamp_field in by_name and by_name[timestamp_field].kind is bool:
            raise TypeError(
                f"{event_type.__name__}.{timestamp_field} is the timestamp field but is "
                "annotated bool; annotate it int, float or str"
            )
        self.known_fields = set(by_name) | ({timestamp_field} if timestamp_field else set())

    def build(self, record: Dict[str, Any], convert) -> Tuple[tuple, Any]:
        if not self.ignore_extra_fields:
            extra = [name for name in record if name not in self.known_fields]
            if extra:
                names = ", ".join(repr(name) for name in extra)
                raise _Rejected(
                    f"unexpected field(s) {names}: not in {self.event_type.__name__}"
                )
        values = []
        for field in self.fields:
            if field.name in record:
                values.append(convert(field, record[field.name]))
            elif field.has_default:
                values.append(field.default)
            else:
                raise _Rejected(f"missing field {field.name!r}")
        event = self.event_type(*values)
        if self.timestamp_field is None:
            return event, None
        if self.timestamp_field not in record:
            raise _Rejected(f"missing field {self.timestamp_field!r}")
        if self.timestamp_field in self.event_type._fields:
            # The converted value: a float field accepts "12.5" in CSV, an int field does not.
            moment = getattr(event, self.timestamp_field)
        else:
            moment = record[self.timestamp_field]
        try:
            return event, parse_event_time(moment, self.timestamp_field)
        except ValueError as error:
            raise _Rejected(str(error)) from None


def _decode(element: Any) -> str:
    if isinstance(element, str):
        return element
    if isinstance(element, (bytes, bytearray)):
        try:
            return bytes(element).decode("utf-8")
        except UnicodeDecodeError as error:
            raise _Rejected(f"not valid UTF-8: {error}") from None
    raise _Rejected(f"expected a str or bytes record, got {type(element).__name__}")


def _raw_text(element: Any) -> str:
    if isinstance(element, str):
        return element
    if isinstance(element, (bytes, bytearray)):
        return bytes(element).decode("utf-8", errors="backslashreplace")
    return repr(element)


class _ParseFn(beam.DoFn):
    """Parse one record; emit the event (stamped) or a DeadLetter on the dead-letter tag."""

    def __init__(self, builder: _RecordBuilder, source: str) -> None:
        self._builder = builder
        self._source = source
        self._parsed = Metrics.counter(METRICS_NAMESPACE, "parsed")
        self._rejected = Metrics.counter(METRICS_NAMESPACE, "rejected")

    def read(self, text: str) -> Tuple[Dict[str, Any], Any]:
        """The record as a field mapping, plus the converter for its values."""
        raise NotImplementedError

    def process(self, element):
        try:
            record, convert = self.read(_decode(element))
            event, moment = self._builder.build(record, convert)
        except _Rejected as rejection:
            self._rejected.inc()
            yield beam.pvalue.TaggedOutput(
                DEAD_LETTER, DeadLetter(_raw_text(element), str(rejection), self._source)
            )
            return
        self._parsed.inc()
        yield event if moment is None else beam_window.TimestampedValue(event, moment)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_duplicate_keys(pairs: Iterable[Tuple[str, Any]]) -> Dict[str, Any]:
    record: Dict[str, Any] = {}
    for key, value in pairs:
        if key in record:
            raise _Rejected(f"duplicate field {key!r}")
        record[key] = value
    return record


# One decoder for every record: json.loads with options builds a new JSONDecoder per call
# (2% of a Kafka job's worker time, measured with py-spy).
_JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant,
                                 object_pairs_hook=_no_duplicate_keys)


class _ParseJsonFn(_ParseFn):
    def read(self, text: str):
        try:
            record = _JSON_DECODER.decode(text)
        except ValueError as error:  # JSONDecodeError is a ValueError
            raise _Rejected(f"malformed JSON: {error}") from None
        if not isinstance(record, dict):
            raise _Rejected(f"not a JSON object: got {type(record).__name__}")
        return record, _convert_json


class _ParseCsvFn(_ParseFn):
    def __init__(
        self, builder: _RecordBuilder, source: str, columns: Sequence[str], delimiter: str
    ) -> None:
        super().__init__(builder, source)
        self._columns = list(columns)
        self._delimiter = delimiter

    def read(self, text: str):
        try:
            rows = list(csv.reader([text], delimiter=self._delimiter, strict=True))
        except csv.Error as error:
            raise _Rejected(f"malformed CSV: {error}") from None
        if len(rows) != 1:
            raise _Rejected(f"malformed CSV: expected one record, got {len(rows)}")
        row = rows[0]
        if len(row) != len(self._columns):
            raise _Rejected(
                f"malformed CSV: expected {len(self._columns)} columns "
                f"({', '.join(self._columns)}), got {len(row)}"
            )
        return dict(zip(self._columns, row)), _convert_text


class _Parse(beam.PTransform):
    def __init__(self, parse_fn: _ParseFn, label: Optional[str]) -> None:
        super().__init__(label)
        self._parse_fn = parse_fn

    def expand(self, pcoll):
        return pcoll | "Parse" >> beam.ParDo(self._parse_fn).with_outputs(
            DEAD_LETTER, main=PARSED
        )


class ParseJson(_Parse):
    """Parse JSON objects (str or UTF-8 bytes, one per element) into ``event_type`` events.

    Returns an outputs tuple with ``.parsed`` (events stamped with the time in
    ``timestamp_field``; ``None`` keeps the input timestamps) and ``.dead_letter``
    (:class:`DeadLetter` records, their ``source`` defaulting to ``ParseJson[<type>]``).
    """

    def __init__(
        self,
        event_type: Type[tuple],
        timestamp_field: Optional[str] = "timestamp",
        *,
        ignore_extra_fields: bool = False,
        source: Optional[str] = None,
        label: Optional[str] = None,
    ) -> None:
        builder = _RecordBuilder(event_type, timestamp_field, ignore_extra_fields)
        source = source or f"ParseJson[{event_type.__name__}]"
        super().__init__(_ParseJsonFn(builder, source), label)


class ParseCsv(_Parse):
    """Parse CSV lines (one record per element) into ``event_type`` events.

    ``columns`` names the CSV columns in order (default: the event type's fields); it must
    cover every field without a default and ``timestamp_field`` (if that is not a field).
    Quoting follows the csv module (``"a, b"`` is one cell). There is no header handling:
    skip a header line at the source, e.g. ``ReadFromText(path, skip_header_lines=1)``.
    Outputs as :class:`ParseJson`.
    """

    def __init__(
        self,
        event_type: Type[tuple],
        timestamp_field: Optional[str] = "timestamp",
        columns: Optional[Sequence[str]] = None,
        delimiter: str = ",",
        *,
        ignore_extra_fields: bool = False,
        source: Optional[str] = None,
        label: Optional[str] = None,
    ) -> None:
        builder = _RecordBuilder(event_type, timestamp_field, ignore_extra_fields)
        if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
            raise ValueError(
                f"delimiter must be one character other than a quote or newline, "
                f"got {delimiter!r}"
            )
        if isinstance(columns, str):
            raise TypeError(f"columns must be a list of field names, got the string {columns!r}")
        columns = list(event_type._fields if columns is None else columns)
        _check_columns(columns, builder)
        source = source or f"ParseCsv[{event_type.__name__}]"
        super().__init__(_ParseCsvFn(builder, source, columns, delimiter), label)


def _check_columns(columns: List[str], builder: _RecordBuilder) -> None:
    """Every column maps to a field, and every required field has a column."""
    if not columns or not all(isinstance(column, str) and column for column in columns):
        raise ValueError(f"columns must be a non-empty list of field names, got {columns!r}")
    duplicates = sorted({column for column in columns if columns.count(column) > 1})
    if duplicates:
        raise ValueError(f"columns name {duplicates} more than once; name each column once")
    event_name = builder.event_type.__name__
    required = [field.name for field in builder.fields if not field.has_default]
    if builder.timestamp_field and builder.timestamp_field not in builder.event_type._fields:
        required.append(builder.timestamp_field)
    missing = [name for name in required if name not in columns]
    if missing:
        raise ValueError(
            f"columns {columns} lack {missing}, required by {event_name} or as the "
            "timestamp field; add them in their CSV position"
        )
    unknown = [column for column in columns if column not in builder.known_fields]
    if unknown and not builder.ignore_extra_fields:
        raise ValueError(
            f"columns {unknown} are not fields of {event_name}; remove them, or pass "
            "ignore_extra_fields=True to skip them"
        )
