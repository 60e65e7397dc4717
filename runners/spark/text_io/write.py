"""Beam's ``WriteToText`` writing its records a block at a time: the writing step of Beam's
``WriteImpl`` for Beam's own ``_TextSink``.

Beam writes each element through ``_WriteBundleDoFn.process`` (a Beam operation and its
per-window invocation, since the step reads the temp directory as a side input), then
``FileBasedSinkWriter.write``, ``write_record``, the sink's coder and two writes of the file
handle (measured: ~2.3 us an element before the element's own ``str``). Here the same bytes
are written in one write per block of records, and the step's Beam operation is invoked once
per block instead of once per element:

- :class:`BulkTextWrite` (the step of a file per bundle, ``num_shards`` unset) gathers the
  elements that reach it in the global window alone (all of them, after ``WriteImpl``'s own
  ``WindowInto(GlobalWindows)``), in order, and hands each block to Beam's operation as one
  element; anything else first flushes the block, then goes through Beam's operation alone.
- Its DoFn, :class:`BlockWriteBundleDoFn`, is Beam's ``_WriteBundleDoFn`` (the same writer,
  opened at the first element with the side input's temp directory, closed and reported at
  ``finish_bundle``), that writes a block with :func:`write_records`.
- :class:`BlockWriteKeyedBundleDoFn` is Beam's ``_WriteKeyedBundleDoFn`` (a file per shard,
  after ``WriteImpl``'s GroupByKey), writing each shard's values a block at a time.

:func:`write_records` gives the bytes Beam's writer writes: each record as the sink's coder
encodes it (``ToBytesCoder``, the default: ``bytes`` as they are, anything else ``str()``
encoded as UTF-8, called once per element as Beam calls it), then ``\\n`` when the sink
appends newlines; header and footer are written by Beam's own ``open`` and ``close``. An
exception (a ``str`` that fails, a character UTF-8 cannot encode) is raised for the element
that causes it, with Beam's message, inside Beam's operation (which names the step).

A sink of another class, or one with a limit of records or bytes per file, keeps Beam's
writing step (:func:`runners.spark.beam_internals.text_sink_writer`).
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Iterable, List, Sequence

from apache_beam.coders.coders import ToBytesCoder
from apache_beam.transforms.window import GlobalWindow, TimestampedValue
from apache_beam.utils.timestamp import MAX_TIMESTAMP

from runners.spark.beam_internals import (
    BeamTransformFactory,
    WriteBundleDoFn,
    WriteKeyedBundleDoFn,
    appends_newlines,
    beam_runner_api_pb2,
    create_pardo_operation,
    operations,
    pickler,
    serialized_dofn_data,
)
from runners.spark.chains.blocks import BlockSink

#: The runner-private URNs of the writing steps in worker descriptors (their payloads stay
#: Beam's ``ParDoPayload``; the factories swap the DoFn).
BULK_WRITE_URN = "beam:transform:spark_runner:bulk_text_write:v1"
BULK_KEYED_WRITE_URN = "beam:transform:spark_runner:bulk_text_keyed_write:v1"

#: Records written at a time.
BLOCK_SIZE = 2048


class RecordBlock:
    """Elements handed to the writing DoFn as one element (never a user's value)."""

    __slots__ = ("values",)

    def __init__(self, values: List[Any]) -> None:
        self.values = values


def write_records(writer: Any, values: Sequence[Any]) -> None:
    """Write ``values`` with Beam's ``FileBasedSinkWriter`` of a ``_TextSink``, as its
    ``write`` would one by one, in one write of its file handle."""
    if not values:
        return
    sink = writer.sink
    newline = appends_newlines(sink)
    if type(sink.coder) is ToBytesCoder:
        data = _to_bytes(values, newline)
    else:
        encode = sink.coder.encode
        encoded = [encode(value) for value in values]
        data = b"\n".join(encoded) + b"\n" if newline else b"".join(encoded)
    writer.temp_handle.write(data)
    writer.num_records_written += len(values)


def _to_bytes(values: Sequence[Any], newline: bool) -> bytes:
    """``ToBytesCoder.encode`` of each value, joined (and ended) by ``\\n`` when
    ``newline``: one ``str`` call per value, one UTF-8 encoding of the block."""
    kinds = set(map(type, values))
    separator = "\n" if newline else ""
    if not any(issubclass(kind, (bytes, bytearray)) for kind in kinds):
        texts = values if kinds == {str} else list(map(str, values))
        text = separator.join(texts) + separator
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            for value in texts:  # raise Beam's error, for the value that causes it
                value.encode("utf-8")
            raise
    encoded = [value if isinstance(value, bytes) else str(value).encode("utf-8")
               for value in values]
    return b"\n".join(encoded) + b"\n" if newline else b"".join(encoded)


class BlockWriteBundleDoFn(WriteBundleDoFn):
    """Beam's ``_WriteBundleDoFn`` (a file per bundle) that also takes a
    :class:`RecordBlock` as one element."""

    def process(self, element, init_result):
        if self.writer is None:
            # We ignore UUID collisions here since they are extremely rare (as Beam does).
            self.writer = self.sink.open_writer(init_result, str(uuid.uuid4()))
        if type(element) is RecordBlock:
            write_records(self.writer, element.values)
        else:
            self.writer.write(element)
        # No limit per file (the planning checked): Beam's writer is never at capacity.


class BlockWriteKeyedBundleDoFn(WriteKeyedBundleDoFn):
    """Beam's ``_WriteKeyedBundleDoFn`` (a file per shard), a block of the shard's values at
    a time."""

    def process(self, element, init_result):
        writer = self.sink.open_writer(init_result, str(uuid.uuid4()))
        for block in _blocks(element[1]):
            write_records(writer, block)
        return [TimestampedValue(writer.close(), MAX_TIMESTAMP)]


def _blocks(values: Iterable[Any]) -> Iterable[List[Any]]:
    iterator = iter(values)
    while True:
        block = list(itertools.islice(iterator, BLOCK_SIZE))
        if not block:
            return
        yield block


class BulkTextWrite(operations.DoOperation, BlockSink):
    """The writing step of a file per bundle: elements in the global window alone are
    handed to Beam's operation a :class:`RecordBlock` at a time (see the module's
    docstring). A chain before it appends their values to its block itself
    (:class:`~runners.spark.chains.blocks.BlockSink`)."""

    BLOCK_SIZE = BLOCK_SIZE

    def start(self) -> None:
        super().start()
        self.value_block().clear()
        self._carrier: Any = None

    def process(self, windowed_value) -> None:
        windows = windowed_value.windows
        if len(windows) == 1 and type(windows[0]) is GlobalWindow:
            values = self.value_block()
            if not values:
                self._carrier = windowed_value
            values.append(windowed_value.value)
            if len(values) >= BLOCK_SIZE:
                self.flush_block()
            return
        self.flush_block()
        operations.DoOperation.process(self, windowed_value)

    def open_block(self, carrier: Any) -> None:
        self._carrier = carrier

    def flush_block(self) -> None:
        values = self.value_block()
        if values:
            block = RecordBlock(values[:])
            values.clear()
            operations.DoOperation.process(self, self._carrier.with_value(block))

    def finish(self) -> None:
        self.flush_block()
        super().finish()


def _substituted(parameter: Any, kind: type) -> bytes:
    """The step's pickled DoFn data with Beam's writing DoFn replaced by ``kind`` (the same
    sink, arguments, side inputs and windowing)."""
    data = pickler.loads(serialized_dofn_data(parameter))
    return pickler.dumps((kind(data[0].sink),) + tuple(data[1:]))


@BeamTransformFactory.register_urn(BULK_WRITE_URN, beam_runner_api_pb2.ParDoPayload)
def _create_bulk_write(factory, transform_id, transform_proto, parameter, consumers):
    return create_pardo_operation(factory, transform_id, transform_proto, consumers,
                                  _substituted(parameter, BlockWriteBundleDoFn), parameter,
                                  operation_cls=BulkTextWrite)


@BeamTransformFactory.register_urn(BULK_KEYED_WRITE_URN, beam_runner_api_pb2.ParDoPayload)
def _create_bulk_keyed_write(factory, transform_id, transform_proto, parameter, consumers):
    return create_pardo_operation(factory, transform_id, transform_proto, consumers,
                                  _substituted(parameter, BlockWriteKeyedBundleDoFn), parameter)

