"""Beam's bounded text reads with each range's lines read in bulk: the SDK harness operations
that replace, for Beam's own text sources, the per-line loop of ``_TextSource.read_records``.

Beam runs ``ReadFromText`` and ``ReadFromTextWithFilename`` as its ``Read`` of a
``BoundedSource``: after ``expand_sdf``, a splittable DoFn whose process step reads each
restriction (a file's byte range) through ``read_records``, claiming every line from a
range tracker and reporting every output to a watermark estimator; ``ReadAllFromText``
reads each ``(file, range)`` element the same way in its ``_ReadRange`` DoFn. Here, those
two steps run as Beam's own operations (``SdfProcessSizedElements``, ``DoOperation``: the
DoFn's lifecycle, metrics, splitting and everything else stay Beam's), except that an
element whose range is read by Beam's own ``_TextSource`` (or ``_TextSourceWithFilename``),
not a subclass, has its records read a chunk at a time (:mod:`runners.spark.text_io.lines`),
decoded a block at a time (``StrUtf8Coder``; any other coder decodes each record) and
handed on each as the element Beam's output handler would make: the input element's
timestamp, windows and pane, with the record (or ``(file name, record)``) as its value, in
the order Beam reads them. What the output PCollection counts and samples is counted by
Beam's own receiver, as for Beam's read; where the step's one consumer is a chain, each
decoded block goes to it whole, with the input element as every record's carrier, counted
and sampled a block at a time (:class:`runners.spark.chains.blocks.ValueBlocks`).

Anything else keeps Beam's own path, element by element: a source of another class (a user's
``FileBasedSource``), a text source that matches header lines with functions, an escape
character that is a byte of the separator (:func:`runners.spark.text_io.lines.supported`), a
restriction element in several windows. An exception is raised as Beam's ``DoFnRunner``
raises it: naming the step for ``_ReadRange``, as it is for the splittable DoFn.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from apache_beam.coders.coders import StrUtf8Coder

from runners.spark.beam_internals import (
    BeamTransformFactory,
    beam_runner_api_pb2,
    create_pardo_operation,
    operations,
    pickler,
    restriction_range,
    serialized_dofn_data,
    text_file_of,
    text_range_reader,
    text_source_settings,
)
from runners.spark.chains.blocks import ValueBlocks, only_consumer, takes_value_blocks
from runners.spark.chains.operation import ChainedStepsOperation, with_step_name
from runners.spark.text_io.lines import LineFormat, decoded, records, supported

#: The runner-private URN of the process step of Beam's bounded-source SDF, in worker
#: descriptors (its payload stays Beam's ``ParDoPayload``).
BULK_SOURCE_READ_URN = "beam:transform:spark_runner:bulk_text_source_read:v1"
#: The same for the ``_ReadRange`` ParDo of ``ReadAllFromText``.
BULK_RANGE_READ_URN = "beam:transform:spark_runner:bulk_text_range_read:v1"


class TextFile:
    """One file of Beam's text source, read as that source reads it."""

    def __init__(self, text_source: Any, file_name: str, settings: dict) -> None:
        self.text_source = text_source
        self.file_name = file_name
        self.coder = settings["coder"]
        self.utf8 = type(self.coder) is StrUtf8Coder
        self.with_filename = settings["with_filename"]
        self.line_format = LineFormat(settings["delimiter"], settings["escapechar"],
                                      settings["strip_trailing_newlines"],
                                      settings["skip_header_lines"])

    @classmethod
    def of(cls, source: Any) -> Optional["TextFile"]:
        """The text file of one file's source, when Beam's own text source reads it and its
        settings are read here as Beam reads them; None otherwise."""
        found = text_file_of(source)
        if found is None:
            return None
        settings = text_source_settings(found[0])
        if settings is None:
            return None
        text_file = cls(found[0], found[1], settings)
        return text_file if supported(text_file.line_format) is None else None

    def emit(self, start: int, stop: Optional[int], carrier: Any, receiver: Any,
             file_name: Optional[str] = None, blocks: Optional[ValueBlocks] = None) -> None:
        """Hand ``receiver`` (a consumer set) each record of ``[start, stop)``, decoded, in
        order, as the element ``carrier.with_value(record)`` (``(file_name, record)`` when
        ``file_name`` is given); with ``blocks``, hand them on a block at a time."""
        with self.text_source.open_file(self.file_name) as file:
            decoded_blocks: Iterator[Sequence[Any]] = decoded(
                records(file, self.line_format, start, stop), self.coder, self.utf8)
            if file_name is not None:
                decoded_blocks = (list(zip(itertools.repeat(file_name), block))
                                  for block in decoded_blocks)
            if blocks is not None:
                for block in decoded_blocks:
                    blocks.hand(carrier, block)
                return
            values = itertools.chain.from_iterable(decoded_blocks)
            # Consumed in C (Beam's compiled methods mapped): no Python frame per record.
            collections.deque(map(receiver.receive, map(carrier.with_value, values)),
                              maxlen=0)


def value_blocks(operation: Any) -> Optional[ValueBlocks]:
    """The hand-over of an operation's records a block at a time, when its one consumer is
    a chain (set by the factory as ``operation.chain``) and nothing samples its output's
    elements."""
    chain = operation.chain
    receiver = operation.receivers[0]
    if chain is None or not takes_value_blocks(receiver):
        return None
    return ValueBlocks(receiver, chain)


def _raise_as_step(error: BaseException, operation: Any) -> None:
    if getattr(error, "_tagged_with_step", False):
        raise error
    raise with_step_name(error, operation.name_context.logging_name())


class BulkSourceRead(operations.SdfProcessSizedElements):
    """The process step of Beam's bounded-source SDF; each restriction of Beam's text source
    is read in bulk (see the module's docstring)."""

    chain: Any = None  # the one consumer, when it is a chain

    def setup(self, data_sampler=None) -> None:
        super().setup(data_sampler)
        self._blocks = value_blocks(self)

    def process(self, windowed_value) -> None:
        (_, (restriction, _)), _ = windowed_value.value
        found = restriction_range(restriction)
        text_file = TextFile.of(found[0]) if found is not None else None
        if text_file is None or len(windowed_value.windows) != 1:
            # Beam's splittable DoFn invokes each window of its element apart.
            operations.SdfProcessSizedElements.process(self, windowed_value)
            return
        _, start, stop = found
        with self.scoped_process_state:
            for receiver in self.receivers:  # as Beam's operation does for each restriction
                receiver.opcounter.restart_sampling()
            # An exception goes up as it is: Beam's DoFnRunner does not name the step of a
            # splittable DoFn's process (``process_with_sized_restriction``).
            text_file.emit(start, stop, windowed_value, self.receivers[0],
                           text_file.file_name if text_file.with_filename else None,
                           self._blocks)


class BulkRangeRead(operations.DoOperation):
    """The ``_ReadRange`` step of Beam's ``ReadAllFromText``: each ``(file metadata, offset
    range)`` element read as that DoFn reads it (its source made and split as Beam makes and
    splits it), the records in bulk."""

    chain: Any = None  # the one consumer, when it is a chain

    def setup(self, data_sampler=None) -> None:
        super().setup(data_sampler)
        self._blocks = value_blocks(self)
        dofn = pickler.loads(self.spec.serialized_fn)[0]
        found = text_range_reader(dofn)
        self._source_from_file: Optional[Callable[[str], Any]] = None
        self._with_filename = False
        if found is not None:
            source_from_file, self._with_filename = found
            # The same settings for every file: a probe source (no file is opened) says
            # whether they are read here.
            probe = source_from_file("probe")
            settings = text_source_settings(probe)
            if settings is not None and supported(LineFormat(
                    settings["delimiter"], settings["escapechar"])) is None:
                self._source_from_file = source_from_file

    def process(self, windowed_value) -> None:
        if self._source_from_file is None:
            operations.DoOperation.process(self, windowed_value)
            return
        with self.scoped_process_state:
            try:
                self._read(windowed_value)
            except BaseException as error:
                _raise_as_step(error, self)

    def _read(self, windowed_value) -> None:
        metadata, offset_range = windowed_value.value
        source = self._source_from_file(metadata.path)
        # As _ReadRange: split to get the one file's source (the path is matched again).
        sources = list(source.split(float("inf")))
        if not sources:  # an empty file
            return
        text_file = TextFile.of(sources[0].source)
        stop = offset_range.stop
        text_file.emit(offset_range.start, None if stop == float("inf") else stop,
                       windowed_value, self.receivers[0],
                       metadata.path if self._with_filename else None, self._blocks)


def _with_chain(operation: Any, consumers: Dict[str, List[Any]]) -> Any:
    operation.chain = only_consumer(consumers, ChainedStepsOperation)
    return operation


@BeamTransformFactory.register_urn(BULK_SOURCE_READ_URN, beam_runner_api_pb2.ParDoPayload)
def _create_bulk_source_read(factory, transform_id, transform_proto, parameter, consumers):
    return _with_chain(create_pardo_operation(
        factory, transform_id, transform_proto, consumers, serialized_dofn_data(parameter),
        parameter, operation_cls=BulkSourceRead), consumers)


@BeamTransformFactory.register_urn(BULK_RANGE_READ_URN, beam_runner_api_pb2.ParDoPayload)
def _create_bulk_range_read(factory, transform_id, transform_proto, parameter, consumers):
    return _with_chain(create_pardo_operation(
        factory, transform_id, transform_proto, consumers, serialized_dofn_data(parameter),
        parameter, operation_cls=BulkRangeRead), consumers)
