"""What the Spark runner can run, in batch and in streaming: checked before any Spark job.

One check for both modes (:func:`check_supported`). Everywhere: transforms must be Python
(the runner's own workers run them) or executed by the runner (Impulse, GroupByKey,
Flatten, Reshuffle); the pipeline's requirements must be ones the runner meets; timers are
in event or processing time. In batch, a TestStream or an unbounded PCollection is refused
(with what to pass instead). In streaming, TestStream, bounded sources and splittable DoFns
(unbounded ones included) feed the micro-batch loop; any other transform that makes an
unbounded PCollection out of bounded input (a legacy ``UnboundedSource`` read) is refused.

>>> import apache_beam as beam
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> from runners.spark.planning import pipeline_proto
>>> pipeline = beam.Pipeline()
>>> _ = pipeline | beam.Create([1]) | beam.Map(str)
>>> check_supported(pipeline_proto(pipeline, pipeline.options), PipelineOptions())
"""

from __future__ import annotations

from typing import Any, Iterator

from apache_beam.options.pipeline_options import StandardOptions

from runners.spark.beam_internals import (
    PAR_DO_URNS,
    RUNNER_URNS,
    beam_runner_api_pb2,
    common_urns,
    python_urns,
)
from runners.spark.planning import UnsupportedPipelineError, par_do_payload

#: Leaf transforms without an SDK environment that the runner knows how to execute.
RUNNER_EXECUTED = RUNNER_URNS | {
    common_urns.primitives.IMPULSE.urn,
    common_urns.deprecated_primitives.READ.urn,
}
SUPPORTED_REQUIREMENTS = frozenset([
    common_urns.requirements.REQUIRES_STATEFUL_PROCESSING.urn,
    common_urns.requirements.REQUIRES_BUNDLE_FINALIZATION.urn,
    common_urns.requirements.REQUIRES_SPLITTABLE_DOFN.urn,
])
_TIME_DOMAINS = (beam_runner_api_pb2.TimeDomain.EVENT_TIME,
                 beam_runner_api_pb2.TimeDomain.PROCESSING_TIME)
_UNBOUNDED_IN_BATCH = (
    "unbounded PCollections need --streaming (the Spark runner's micro-batch loop); "
    "batch execution of unbounded sources is not supported yet")
_UNBOUNDED_SOURCE = (
    "unbounded sources other than TestStream and splittable DoFns (e.g. a legacy "
    "UnboundedSource read) are not supported by the Spark runner's streaming loop; write the "
    "source as a splittable DoFn, or run it on the DirectRunner")


def check_supported(proto: beam_runner_api_pb2.Pipeline, options: Any) -> None:
    """Raise :class:`UnsupportedPipelineError` naming the first transform the runner cannot
    run in the mode ``options`` ask for (``--streaming`` or batch)."""
    streaming = bool(options.view_as(StandardOptions).streaming)
    for requirement in proto.requirements:
        if requirement not in SUPPORTED_REQUIREMENTS:
            raise UnsupportedPipelineError(
                f"the pipeline requires {requirement}, which the Spark runner does not provide")
    components = proto.components
    leaves = list(leaf_transforms(proto))
    if not streaming:
        for transform in leaves:
            if transform.spec.urn == common_urns.primitives.TEST_STREAM.urn:
                raise UnsupportedPipelineError(
                    f"transform {transform.unique_name!r} is a TestStream: the Spark runner runs "
                    "TestStream in streaming only (batch execution of TestStream is not "
                    "supported yet); pass --streaming.")
    for transform in leaves:
        name, urn = transform.unique_name, transform.spec.urn
        if urn == common_urns.primitives.TEST_STREAM.urn:
            continue
        if transform.environment_id:
            environment = components.environments[transform.environment_id]
            if environment.urn != python_urns.EMBEDDED_PYTHON:
                raise UnsupportedPipelineError(
                    f"transform {name!r} ({urn}) runs in a {environment.urn} environment, e.g. a "
                    "cross-language transform of another SDK; the Spark runner executes only "
                    "Python transforms, in its own Python workers. Use a Python implementation.")
        elif urn not in RUNNER_EXECUTED:
            raise UnsupportedPipelineError(
                f"transform {name!r} has URN {urn}, which the Spark runner does not implement.")
        _check_boundedness(transform, components, streaming)
        if urn in PAR_DO_URNS:
            for family_id, family in par_do_payload(transform).timer_family_specs.items():
                if family.time_domain not in _TIME_DOMAINS:
                    raise UnsupportedPipelineError(
                        f"transform {name!r}: timer {family_id!r} uses time domain "
                        f"{family.time_domain}; only event and processing time are supported.")


def _check_boundedness(transform: Any, components: Any, streaming: bool) -> None:
    def unbounded(pcollection_id: str) -> bool:
        return (components.pcollections[pcollection_id].is_bounded
                == beam_runner_api_pb2.IsBounded.UNBOUNDED)

    produces = [pcollection for pcollection in transform.outputs.values()
                if unbounded(pcollection)]
    if not produces:
        return
    name = transform.unique_name
    if not streaming:
        raise UnsupportedPipelineError(
            f"transform {name!r} produces an unbounded PCollection: {_UNBOUNDED_IN_BATCH}.")
    inherited = any(unbounded(pcollection) for pcollection in transform.inputs.values())
    splittable = (transform.spec.urn in PAR_DO_URNS
                  and bool(par_do_payload(transform).restriction_coder_id))
    if not inherited and not splittable:
        raise UnsupportedPipelineError(f"transform {name!r}: {_UNBOUNDED_SOURCE}.")


def leaf_transforms(proto: beam_runner_api_pb2.Pipeline) -> Iterator[Any]:
    """Primitive transforms, and composites the runner executes itself (Reshuffle)."""
    components = proto.components
    pending = list(reversed(proto.root_transform_ids))
    while pending:
        transform = components.transforms[pending.pop()]
        if transform.spec.urn in RUNNER_URNS or not transform.subtransforms:
            # Pass-through transforms (outputs among inputs) are dropped by fusion too.
            if set(transform.outputs.values()) - set(transform.inputs.values()):
                yield transform
        else:
            pending.extend(reversed(transform.subtransforms))
