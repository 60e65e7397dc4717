"""A Python worker's pool of stage processors (:mod:`runners.spark.worker.bundles`), without Spark.

Beam's DoFn invoker keeps the values of side inputs in the global window for as long as its
processor lives, so a pooled processor must serve only tasks of its own run and side-input
table: tasks of the same stage code in another job (batch), or with a newer table in the
same run (a streaming micro-batch), read their own side input.
"""

from __future__ import annotations

from typing import Any, List

import apache_beam as beam
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.planning import execution_plan
from runners.spark.worker import bundles, side_inputs
from runners.spark.worker.bundles import StageTask, process_partition
from runners.spark.worker.components import SharedComponents
from runners.spark.worker.records import Elements

#: What the runner feeds a stage that reads an Impulse: one empty byte string, encoded.
IMPULSE = Elements(0, b"\x00")


class _Held:
    """A value as a task reads a broadcast (``.value``), without Spark."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _plan():
    """A stage that emits the side input it reads in the global window (a singleton), as
    ``CombineGlobally`` injects its default."""
    options = PipelineOptions([])
    pipeline = beam.Pipeline(options=options)
    side = pipeline | "Side" >> beam.Create([0])
    _ = (pipeline | "Once" >> beam.Impulse()
         | "Read" >> beam.Map(lambda unused, value: value, beam.pvalue.AsSingleton(side))
         | "Out" >> beam.Reshuffle())
    plan = execution_plan.plan(execution_plan.pipeline_proto(pipeline, options))
    (stage,) = [stage for stage in plan.stages if stage.side_inputs]
    return plan, stage


def _port_coder(context, stage, transform_id: str) -> Any:
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    port = beam_fn_api_pb2.RemoteGrpcPort.FromString(
        descriptor.transforms[transform_id].spec.payload)
    return context.coders.get_by_id(port.coder_id).get_impl()


def _table(context, stage, value: int) -> _Held:
    """The stage's side-input table holding ``value``, as the driver lays it out."""
    (spec,) = stage.side_inputs
    coder = context.coders[spec.coder_id]
    stream = create_OutputStream()
    coder.get_impl().encode_to_stream(WindowedValue(value, 0, [GlobalWindow()]), stream, True)
    held = _Held(side_inputs.materialize(spec, [stream.get()], coder))
    held.digest = side_inputs.table_digest(held.value)
    return held


def _run(plan, stage, run: str, table: _Held) -> List[int]:
    """The task of ``stage`` in run ``run`` with side input ``table``: what it emits."""
    context = PipelineContext(plan.components)
    components = SharedComponents(_Held(plan.components.SerializeToString()), "components")
    task = StageTask(stage, components, table, None, None, run=run)
    ((output_id, _),) = stage.outputs
    coder = _port_coder(context, stage, output_id)
    values = []
    for record in process_partition(task, iter([IMPULSE])):
        stream = create_InputStream(record.data)
        while stream.size() > 0:
            values.append(coder.decode_from_stream(stream, True).value)
    return values


def test_a_pooled_processor_serves_only_its_own_run_and_side_input_table(monkeypatch):
    monkeypatch.setattr(bundles, "_POOL", {})
    plan, stage = _plan()
    context = PipelineContext(plan.components)
    seven, eight = _table(context, stage, 7), _table(context, stage, 8)
    assert seven.digest != eight.digest
    # Another job of the same stage code, with another side input (batch: one table a run).
    assert _run(plan, stage, "job-1", seven) == [7]
    assert _run(plan, stage, "job-2", eight) == [8]
    assert _run(plan, stage, "job-3", seven) == [7]
    # The same run with a newer table (a streaming micro-batch), and back.
    assert _run(plan, stage, "job-3", eight) == [8]
    assert _run(plan, stage, "job-3", seven) == [7]
    # Processors are still reused within a run and table, and the others' are shut down.
    (key,) = bundles._POOL
    (kept,) = bundles._POOL[key]
    assert _run(plan, stage, "job-3", seven) == [7]
    assert bundles._POOL[key] == [kept]
