"""What the streaming loop can run: checked while planning, before any Spark job starts.

TestStream and bounded sources feed the micro-batch loop; an unbounded PCollection must come
from a TestStream (or inherit unboundedness from its input). Unbounded splittable DoFns
(residuals carried from batch to batch, watermark estimators) are not supported yet.
"""

from __future__ import annotations

from runners.spark.beam_internals import beam_runner_api_pb2, common_urns, python_urns
from runners.spark.planning import (
    _RUNNER_EXECUTED,
    _SUPPORTED_REQUIREMENTS,
    UnsupportedPipelineError,
    _leaf_transforms,
)

_UNBOUNDED_LATER = (
    "unbounded sources other than TestStream (e.g. unbounded splittable DoFns) are not "
    "supported yet by the Spark runner's streaming loop; run it on the DirectRunner"
)


def check_streaming_supported(proto: beam_runner_api_pb2.Pipeline) -> None:
    """Streaming: TestStream and bounded sources feed the micro-batch loop."""
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
            if produced_unbounded and not inherited:
                raise UnsupportedPipelineError(f"transform {name!r}: {_UNBOUNDED_LATER}.")
