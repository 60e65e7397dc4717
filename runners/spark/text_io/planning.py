"""Which steps of a fused stage are Beam's own text IO, run by the runner's operations
(:mod:`runners.spark.text_io.read`, :mod:`runners.spark.text_io.write`): planning marks
them, the worker swaps them in.

A step is recognized by what Beam's transform is, never by a user's name for it: the process
step of Beam's bounded-source SDF (``ReadFromText``, ``ReadFromTextWithFilename``, any
``Read`` of a ``BoundedSource``: which restrictions are Beam's text source is decided for
each, at run time), the ``_ReadRange`` ParDo of ``ReadAllFromText``, and the writing step
of Beam's ``WriteImpl`` (``_WriteBundleDoFn`` or ``_WriteKeyedBundleDoFn``) of Beam's own
``_TextSink`` without a limit per file. Planning (with
``--bulk_text_io``, the default) marks each with the :data:`RUNNER_OPERATION` annotation,
which also keeps it out of a chain; the worker's processor swaps the marked steps' URNs for
the runner's before Beam builds its operations. The plan itself keeps Beam's URNs and
payloads: what reads the plan (the streaming loop looking for splittable steps, a
checkpoint's pipeline fingerprint) sees Beam's transforms, with the option on or off.

>>> import apache_beam as beam
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> from runners.spark.planning.execution_plan import pipeline_proto, plan
>>> pipeline = beam.Pipeline()
>>> _ = pipeline | "Lines" >> beam.io.ReadFromText("/no/such/*.txt", validate=False)
>>> stages = plan(pipeline_proto(pipeline, PipelineOptions([]))).stages
>>> [(step, stage.descriptor.count(b"bulk_text_source_read") > 0)
...  for stage in stages for step in stage.steps if step.endswith("/Process")]
[('Lines/Read/SDFBoundedSourceReader/ParDo(SDFBoundedSourceDoFn)/Process', True)]
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from runners.spark.beam_internals import (
    SPLITTABLE_PROCESS_URN,
    beam_runner_api_pb2,
    common_urns,
    proto_utils,
    reads_bounded_sources,
    text_range_reader,
    text_sink_writer,
    unpickle_dofn,
)
from runners.spark.chains.planning import RUNNER_OPERATION
from runners.spark.text_io.read import BULK_RANGE_READ_URN, BULK_SOURCE_READ_URN
from runners.spark.text_io.write import BULK_KEYED_WRITE_URN, BULK_WRITE_URN

_PAR_DO_URN = common_urns.primitives.PAR_DO.urn

#: The annotation's value -> the URN the worker gives the step.
_OPERATIONS: Dict[bytes, str] = {
    b"bulk_text_source_read": BULK_SOURCE_READ_URN,
    b"bulk_text_range_read": BULK_RANGE_READ_URN,
    b"bulk_text_write": BULK_WRITE_URN,
    b"bulk_text_keyed_write": BULK_KEYED_WRITE_URN,
}


def operation_of(transform: Any) -> Optional[bytes]:
    """The runner's operation for a step of a fused stage (an annotation value of
    :data:`_OPERATIONS`), or None: the step keeps Beam's. Only expanded steps qualify (the
    process step of an SDF exists after ``expand_sdf``)."""
    urn = transform.spec.urn
    if urn not in (SPLITTABLE_PROCESS_URN, _PAR_DO_URN):
        return None
    payload = proto_utils.parse_Bytes(transform.spec.payload, beam_runner_api_pb2.ParDoPayload)
    if payload.state_specs or payload.timer_family_specs or payload.requests_finalization:
        return None
    dofn = unpickle_dofn(payload)
    if urn == SPLITTABLE_PROCESS_URN:
        reads = not payload.side_inputs and reads_bounded_sources(dofn)
        return b"bulk_text_source_read" if reads else None
    if payload.restriction_coder_id:
        return None
    writer = text_sink_writer(dofn)
    if writer is not None:  # its side input is the temp directory
        return b"bulk_text_write" if writer == "bundle" else b"bulk_text_keyed_write"
    if payload.side_inputs:
        return None
    return b"bulk_text_range_read" if text_range_reader(dofn) is not None else None


def mark_text_io(descriptor: Any) -> int:
    """Annotate, in a stage's ``ProcessBundleDescriptor``, the steps the runner's text IO
    operations run (before steps are chained); returns how many."""
    marked = 0
    for transform in descriptor.transforms.values():
        operation = operation_of(transform)
        if operation is not None:
            transform.annotations[RUNNER_OPERATION] = operation
            marked += 1
    return marked


def use_text_io_operations(descriptor: Any) -> int:
    """In a worker's copy of a descriptor, give the marked steps the runner's URNs (whose
    factories build the runner's operations); returns how many."""
    swapped = 0
    for transform in descriptor.transforms.values():
        urn = _OPERATIONS.get(transform.annotations.get(RUNNER_OPERATION, b""))
        if urn is not None:
            transform.spec.urn = urn
            swapped += 1
    return swapped
