"""What the streaming loop can run: checked while planning, before any Spark job starts.

TestStream, bounded sources and splittable DoFns (unbounded ones included: their residuals
are carried from batch to batch, their watermark estimators hold the watermark, see
:mod:`~runners.spark.streaming.unbounded`) feed the micro-batch loop. Any other transform
that makes an unbounded PCollection out of bounded input (e.g. a legacy ``UnboundedSource``
read) is refused.
"""

from __future__ import annotations

from runners.spark.beam_internals import beam_runner_api_pb2, common_urns, python_urns
from runners.spark.planning import (
    _RUNNER_EXECUTED,
    _SUPPORTED_REQUIREMENTS,
    PAR_DO_URNS,
    UnsupportedPipelineError,
    _leaf_transforms,
    _par_do_payload,
)

_UNBOUNDED_LATER = (
    "unbounded sources other than TestStream and splittable DoFns (e.g. a legacy "
    "UnboundedSource read) are not supported by the Spark runner's streaming loop; write the "
    "source as a splittable DoFn, or run it on the DirectRunner"
)


def _is_splittable(transform) -> bool:
    return (transform.spec.urn in PAR_DO_URNS
            and bool(_par_do_payload(transform).restriction_coder_id))


def check_streaming_supported(proto: beam_runner_api_pb2.Pipeline) -> None:
    """Streaming: TestStream, bounded sources and splittable DoFns feed the micro-batch loop."""
    for requirement in proto.requirements:
        if requirement not in _SUPPORTED_REQUIREMENTS:
            raise UnsupportedPipelineError(
                f"the pipeline requires {requirement}, which the Spark runner does not provide"
            )
    components = proto.components
    for transform in _leaf_transforms(proto):
        name, urn = transform.unique_name, transform.spec.urn
        if urn == common_urns.primitives.TEST_STREAM.urn:
            continue
        if transform.environment_id:
            environment = components.environments[transform.environment_id]
            if environment.urn != python_urns.EMBEDDED_PYTHON:
                raise UnsupportedPipelineError(
                    f"transform {name!r} ({urn}) runs in a {environment.urn} environment; the "
                    "Spark runner executes only Python transforms. Use a Python implementation."
                )
        elif urn not in _RUNNER_EXECUTED:
            raise UnsupportedPipelineError(
                f"transform {name!r} has URN {urn}, which the Spark runner does not implement."
            )
        inputs = set(transform.inputs.values())
        for pcollection_id in transform.outputs.values():
            pcollection = components.pcollections[pcollection_id]
            produced_unbounded = pcollection.is_bounded == beam_runner_api_pb2.IsBounded.UNBOUNDED
            inherited = any(
                components.pcollections[i].is_bounded == beam_runner_api_pb2.IsBounded.UNBOUNDED
                for i in inputs)
            if produced_unbounded and not inherited and not _is_splittable(transform):
                raise UnsupportedPipelineError(f"transform {name!r}: {_UNBOUNDED_LATER}.")
