"""What the Spark runner can run, in batch and in streaming: checked before any Spark job.

The mode first (:func:`runs_in_streaming`): ``--streaming``, or a pipeline that needs it, a
TestStream or an unbounded PCollection, as Beam's DirectRunner switches by itself. Then one
check for both modes (:func:`check_supported`). Everywhere: transforms must be Python
(the runner's own workers run them) or executed by the runner (Impulse, GroupByKey,
Flatten, Reshuffle); the pipeline's requirements must be ones the runner meets; timers are
in event or processing time. In streaming, TestStream, bounded sources and splittable DoFns
(unbounded ones included) feed the micro-batch loop; any other transform that makes an
unbounded PCollection out of bounded input (a primitive Read of a custom source) is refused.

>>> import apache_beam as beam
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> from runners.spark.planning import pipeline_proto
>>> pipeline = beam.Pipeline()
>>> _ = pipeline | beam.Create([1]) | beam.Map(str)
>>> proto = pipeline_proto(pipeline, pipeline.options)
>>> runs_in_streaming(proto, PipelineOptions())
False
>>> check_supported(proto, streaming=False)
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Optional

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
_LOG = logging.getLogger(__name__)
_TIME_DOMAINS = (beam_runner_api_pb2.TimeDomain.EVENT_TIME,
                 beam_runner_api_pb2.TimeDomain.PROCESSING_TIME)
_UNBOUNDED_IN_BATCH = (
    "unbounded PCollections need --streaming (the Spark runner's micro-batch loop); "
    "batch execution of unbounded sources is not supported yet")
_UNBOUNDED_SOURCE = (
    "unbounded sources other than TestStream and splittable DoFns (e.g. a primitive Read of "
    "a source that is neither a BoundedSource nor an UnboundedSource) are not supported by "
    "the Spark runner's streaming loop; write the source as a splittable DoFn (Beam reads an "
    "UnboundedSource as one), or run it on the DirectRunner")


def streaming_reason(proto: beam_runner_api_pb2.Pipeline) -> Optional[str]:
    """Why ``proto`` can only run in streaming (its first TestStream, or the first transform
    that makes an unbounded PCollection), or None when it can run in batch."""
    components = proto.components
    for transform in leaf_transforms(proto):
        if transform.spec.urn == common_urns.primitives.TEST_STREAM.urn:
            return f"transform {transform.unique_name!r} is a TestStream"
        for pcollection_id in transform.outputs.values():
            if (components.pcollections[pcollection_id].is_bounded
                    == beam_runner_api_pb2.IsBounded.UNBOUNDED):
                return f"transform {transform.unique_name!r} makes an unbounded PCollection"
    return None


def runs_in_streaming(proto: beam_runner_api_pb2.Pipeline, options: Any,
                      log_switch: bool = False) -> bool:
    """Whether the runner runs ``proto`` in streaming: with ``--streaming``, or, as Beam's
    DirectRunner does, by itself when the pipeline needs it (``log_switch``: say so in one
    INFO line; the run does, not every check before it)."""
    if options.view_as(StandardOptions).streaming:
        return True
    reason = streaming_reason(proto)
    if reason is None:
        return False
    if log_switch:
        _LOG.info("running in streaming (micro-batches) without --streaming: %s", reason)
    return True


def check_supported(proto: beam_runner_api_pb2.Pipeline, streaming: bool) -> None:
    """Raise :class:`UnsupportedPipelineError` naming the first transform the runner cannot
    run in the given mode (streaming or batch)."""
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
