"""What the Spark runner can run, in batch and in streaming: checked before any Spark job.

The mode first (:func:`runs_in_streaming`), as Beam 2.77's DirectRunner picks its engine
(``SwitchingDirectRunner.run_pipeline``). With ``--streaming``: streaming (micro-batches).
Without it, streaming for a TestStream only (the DirectRunner runs it event by event on its
bundle-based engine). Every other pipeline runs in batch, also one whose unbounded
PCollections come from splittable DoFns (PeriodicImpulse, an ``UnboundedSource`` read, the
project's Kafka reader): the DirectRunner runs those on its FnApiRunner, in batch, each
splittable DoFn to its end before the steps after it, so a GroupByKey sees its whole input
at once however the clock's ticks fall (a source that never ends never finishes the run,
there as here). One INFO line says so, and that ``--streaming`` runs it in micro-batches.

Where the DirectRunner switches engines for other reasons, it gives no result to follow: a
stateful DoFn with a processing-time timer sends a pipeline to its bundle-based engine, which
never fires such a timer of a bounded pipeline (the output is silently empty) and fails on an
unbounded splittable DoFn (PeriodicImpulse: "OffsetRestrictionTracker is not done"); here
that pipeline runs in batch and its timers fire when due. And the DirectRunner 2.77 ignores
``--streaming`` for a pipeline its FnApiRunner can run (it checks only its transforms): a
PeriodicImpulse pipeline runs in batch there even with the flag. Here ``--streaming`` is what
the user asked for: always micro-batches.

Then one check for both modes (:func:`check_supported`). Everywhere: transforms must be
Python (the runner's own workers run them) or executed by the runner (Impulse, GroupByKey,
Flatten, Reshuffle); the pipeline's requirements must be ones the runner meets; timers are
in event or processing time; an unbounded PCollection is made by a splittable DoFn (or from
one): any other transform that makes one out of bounded input (a primitive Read of a custom
source, which the DirectRunner cannot translate either) is refused. TestStream runs in
streaming only.

>>> import apache_beam as beam
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> from runners.spark.planning.execution_plan import pipeline_proto
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
from runners.spark.planning.execution_plan import UnsupportedPipelineError, par_do_payload

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
_UNBOUNDED_SOURCE = (
    "unbounded sources other than TestStream and splittable DoFns (e.g. a primitive Read of "
    "a source that is neither a BoundedSource nor an UnboundedSource) are not supported by "
    "the Spark runner (Beam's DirectRunner cannot translate such a Read either); write the "
    "source as a splittable DoFn, or as an UnboundedSource (Beam reads one with a "
    "splittable DoFn)")


def streaming_reason(proto: beam_runner_api_pb2.Pipeline) -> Optional[str]:
    """Why ``proto`` runs in streaming without ``--streaming`` (its first TestStream), or
    None when it runs in batch."""
    for transform in leaf_transforms(proto):
        if transform.spec.urn == common_urns.primitives.TEST_STREAM.urn:
            return f"transform {transform.unique_name!r} is a TestStream"
    return None


def _unbounded_source(proto: beam_runner_api_pb2.Pipeline) -> Optional[str]:
    """The name of the first transform that makes an unbounded PCollection, or None."""
    components = proto.components
    for transform in leaf_transforms(proto):
        for pcollection_id in transform.outputs.values():
            if (components.pcollections[pcollection_id].is_bounded
                    == beam_runner_api_pb2.IsBounded.UNBOUNDED):
                return transform.unique_name
    return None


def runs_in_streaming(proto: beam_runner_api_pb2.Pipeline, options: Any,
                      log_mode: bool = False) -> bool:
    """Whether the runner runs ``proto`` in streaming: with ``--streaming``, or without it
    for a TestStream, as Beam's DirectRunner does (:func:`streaming_reason`).

    With ``log_mode``, one INFO line says why a pipeline runs in streaming without the
    flag, or that one with an unbounded source runs in batch (the run says so, not every
    check before it).
    """
    if options.view_as(StandardOptions).streaming:
        return True
    reason = streaming_reason(proto)
    if reason is not None:
        if log_mode:
            _LOG.info("running in streaming (micro-batches) without --streaming: %s", reason)
        return True
    source = _unbounded_source(proto) if log_mode else None
    if source is not None:
        _LOG.info(
            "running in batch without --streaming: transform %r makes an unbounded "
            "PCollection; its splittable DoFn runs to its end before the steps after it, as on "
            "Beam's DirectRunner (a source that never ends never finishes the run); pass "
            "--streaming to run it in micro-batches", source)
    return False


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
        _check_boundedness(transform, components)
        if urn in PAR_DO_URNS:
            for family_id, family in par_do_payload(transform).timer_family_specs.items():
                if family.time_domain not in _TIME_DOMAINS:
                    raise UnsupportedPipelineError(
                        f"transform {name!r}: timer {family_id!r} uses time domain "
                        f"{family.time_domain}; only event and processing time are supported.")


def _check_boundedness(transform: Any, components: Any) -> None:
    def unbounded(pcollection_id: str) -> bool:
        return (components.pcollections[pcollection_id].is_bounded
                == beam_runner_api_pb2.IsBounded.UNBOUNDED)

    if not any(unbounded(pcollection) for pcollection in transform.outputs.values()):
        return
    inherited = any(unbounded(pcollection) for pcollection in transform.inputs.values())
    splittable = (transform.spec.urn in PAR_DO_URNS
                  and bool(par_do_payload(transform).restriction_coder_id))
    if not inherited and not splittable:
        raise UnsupportedPipelineError(
            f"transform {transform.unique_name!r}: {_UNBOUNDED_SOURCE}.")


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
