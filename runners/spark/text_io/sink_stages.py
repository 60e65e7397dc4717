"""``WriteImpl``'s one-element stages, run in the driver where a task would do the same.

Beam's bounded ``WriteImpl`` (behind ``WriteToText`` and every file sink of Beam's: Avro,
Parquet, TFRecord, ...) surrounds the write with steps of one element each: ``DoOnce``
(``Create([None])``) and ``InitializeWrite`` (the temporary directory), ``PreFinalize``
(existing files of the output's name deleted) and ``FinalizeWrite`` (the temporary files
renamed to their shard names, the temporary directory removed), each reading the previous
ones as side inputs. Fused, they are three stages around the one that writes, and each is a
Spark job of its own: measured on a local master, 0.15 s, 0.08 s and 0.09 s of the ~0.5 s a
``WriteToText`` of 10 elements adds to a run, whatever the size of its input.

Such a stage does nothing but call Beam's sink on files: where the Spark workers run beside
the driver (:meth:`runners.spark.backends.base.Backend.runs_beside_driver`: a local master
whose workers see the driver's working directory, so the same files), the batch runner runs
it in the driver (``--write_stages_in_driver``, default true) with the same worker code
(:func:`runners.spark.worker.bundles.process_partition`), the same element, the same side
inputs: the same files, names, temporary-directory protocol, metrics and errors, without a
Spark job. A stage qualifies (:func:`runs_in_driver`) only if every step in it is Beam's
own code: ``Create``'s steps, and ``WriteImpl``'s initialize, pre-finalize and finalize
steps of a sink of Beam's own ``FileBasedSink`` classes writing a local path (a user's sink
class is the user's code, which runs in a task as the user expects; remote storage is
reached with the workers' credentials, which the driver may not have). On a cluster, or on
Spark Connect with workers elsewhere, the stages run as Spark jobs, as before.

>>> import apache_beam as beam
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> from runners.spark.planning.execution_plan import pipeline_proto, plan
>>> pipeline = beam.Pipeline()
>>> _ = pipeline | beam.Create([1, 2]) | beam.io.WriteToText("/tmp/no-such-dir/out")
>>> [stage.steps[-1].split("/")[-1] for stage in plan(
...     pipeline_proto(pipeline, PipelineOptions([]))).stages if stage.driver_side]
['InitializeWrite', 'PreFinalize', 'FinalizeWrite']
"""

from __future__ import annotations

from typing import Any, Iterable

from runners.spark.beam_internals import (
    DATA_INPUT_URN,
    DATA_OUTPUT_URN,
    beam_runner_api_pb2,
    dofn_data,
    proto_utils,
    write_impl_step,
)
from runners.spark.chains.planning import PAR_DO_URN

_WRITE_STEPS = frozenset(["initialize", "pre_finalize", "finalize"])


def runs_in_driver(transforms: Iterable[Any]) -> bool:
    """Whether a fused stage (its transforms, chained steps unchained) is one of
    ``WriteImpl``'s one-element stages of Beam's own file sink (see the module)."""
    steps = []
    for transform in transforms:
        urn = transform.spec.urn
        if urn in (DATA_INPUT_URN, DATA_OUTPUT_URN):
            continue
        if urn != PAR_DO_URN:
            return False
        payload = proto_utils.parse_Bytes(transform.spec.payload,
                                          beam_runner_api_pb2.ParDoPayload)
        if payload.state_specs or payload.timer_family_specs or payload.restriction_coder_id:
            return False
        dofn, args, _, _, _ = dofn_data(payload)
        step = write_impl_step(dofn, args)
        if step is None:
            return False
        steps.append(step)
    return bool(_WRITE_STEPS.intersection(steps))
