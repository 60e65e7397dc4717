"""Updating a streaming job on the SparkRunner: a changed pipeline resumes from the checkpoint
of the old one when its state can carry over, and is refused, naming the step, when not.

SparkRunner only: checkpoints are the Spark runner's (the DirectRunner has none to resume).

The old pipeline runs the first :data:`CUT` batches of a TestStream (one event a batch) and
stops with its checkpoint (``--max_batches``), windows still open: a windowed sum's
GroupByKey holds buffered elements, a stateful DoFn holds running counts. The new pipeline
resumes from that checkpoint. What it emits must be what an uninterrupted run of the new
pipeline emits after its first :data:`CUT` batches: the same elements, windows, timestamps
and panes (a resume that lost the state would restart the sums and the counts).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
from typing import Any, Dict, Optional

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState
from apache_beam.testing import test_stream as streams
from apache_beam.transforms import userstate
from apache_beam.transforms.trigger import AccumulationMode, AfterCount, AfterWatermark
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from test_spark_streaming_checkpoint import RunningCount

from runners.spark import SparkRunner
from runners.spark.state.checkpoint import IncompatibleUpdateError
from triggers.panes import DescribePanes

from connect_fixtures import no_classic_spark, spark_connect  # noqa: F401 (fixtures)
from spark_fixtures import spark_session  # noqa: F401 (fixture)

#: The old pipeline runs this many batches (the events before the cut) and stops.
CUT = 4


def _events() -> streams.TestStream:
    """One event a batch; at the cut, window [10, 20) holds a 5 (early pane given) and the
    counts are a: 3, b: 1, c: 1."""
    return (streams.TestStream()
            .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2)])
            .add_elements([TimestampedValue(("a", 3), 5)])
            .advance_watermark_to(10)                                        # ON_TIME [0, 10)
            .add_elements([TimestampedValue(("a", 5), 12), TimestampedValue(("c", 1), 15)])
            # ---- the cut
            .add_elements([TimestampedValue(("a", 7), 18)])                  # EARLY a: 12
            .advance_watermark_to(20)                                        # ON_TIME [10, 20)
            .add_elements([TimestampedValue(("b", 4), 25)])
            .advance_watermark_to_infinity())


class RunningCountReworded(beam.DoFn):
    """``RunningCount`` (the checkpoint tests') with another body (its state spec unchanged)."""

    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        so_far = 1 + (count.read() or 0)
        count.write(so_far)
        yield {"key": element[0], "elements_so_far": so_far, "body": "reworded"}


class RunningCountAsText(beam.DoFn):
    """:class:`RunningCount` keeping its count as text: another state coder."""

    COUNT = userstate.ReadModifyWriteStateSpec("count", beam.coders.StrUtf8Coder())

    def process(self, element, count=beam.DoFn.StateParam(COUNT)):
        so_far = int(count.read() or "0") + 1
        count.write(str(so_far))
        yield {"key": element[0], "elements_so_far": so_far}


class _AppendTo(beam.DoFn):
    """Appends each record to a JSON-lines file."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, record):
        with open(self._path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(record, sort_keys=True) + "\n")


def _build(pipeline: beam.Pipeline, sink: str, sum_name: str = "Sum",
           count_fn: Any = RunningCount, window_seconds: int = 10,
           added_steps: bool = False) -> None:
    events = pipeline | "Events" >> _events()
    if added_steps:  # stateless: one before the GroupByKey, one after
        # (A Map to (key, int(value)) would be refused: Beam infers an int coder for the
        # GroupByKey's values, which the checkpoint holds pickled.)
        events = events | "DropEmpty" >> beam.Filter(lambda kv: kv[1] is not None)
    _ = (events | "Count" >> beam.ParDo(count_fn())
         | "WriteCounts" >> beam.ParDo(_AppendTo(sink)))
    panes = (events
             | "Windows" >> beam.WindowInto(
                 FixedWindows(window_seconds), trigger=AfterWatermark(early=AfterCount(1)),
                 accumulation_mode=AccumulationMode.ACCUMULATING)
             | sum_name >> beam.CombinePerKey(sum)
             | "Describe" >> DescribePanes())
    if added_steps:
        panes = panes | "Annotate" >> beam.Map(lambda record: {**record, "annotated": True})
    _ = panes | "Write" >> beam.ParDo(_AppendTo(sink))


def _run(session: Any, sink: str, checkpoint_dir: str, max_batches: Optional[int] = None,
         mapping: Optional[Dict[str, str]] = None, **build: Any) -> None:
    args = ["--streaming", f"--checkpoint_dir={checkpoint_dir}"]
    if max_batches is not None:
        args.append(f"--max_batches={max_batches}")
    if mapping is not None:
        args.append(f"--transform_name_mapping={json.dumps(mapping)}")
    pipeline = beam.Pipeline(runner=SparkRunner(session), options=PipelineOptions(args))
    _build(pipeline, sink, **build)
    assert pipeline.run().wait_until_finish() == PipelineState.DONE


def _read(path: Any) -> "collections.Counter[str]":
    if not os.path.exists(path):
        return collections.Counter()
    with open(path, encoding="utf-8") as sink:
        return collections.Counter(line.strip() for line in sink)


@pytest.fixture(scope="module")
def old_checkpoint(spark_session, tmp_path_factory):  # noqa: F811
    """The old pipeline's checkpoint after :data:`CUT` batches (a directory to copy)."""
    directory = tmp_path_factory.mktemp("old")
    _run(spark_session, str(directory / "panes.jsonl"), str(directory / "checkpoints"),
         max_batches=CUT)
    assert _read(directory / "panes.jsonl"), "the old pipeline emitted nothing before the cut"
    return directory / "checkpoints"


def _resume(old_checkpoint: Any, tmp_path: Any) -> str:
    checkpoint_dir = tmp_path / "resumed"
    shutil.copytree(old_checkpoint, checkpoint_dir)
    return str(checkpoint_dir)


@pytest.mark.parametrize("change", [
    {"sum_name": "Total", "mapping": {"Sum": "Total"}},
    {"added_steps": True},
    {"count_fn": RunningCountReworded},
], ids=["renamed_step", "added_stateless_steps", "changed_dofn_body"])
def test_a_compatible_update_resumes_with_the_panes_of_the_new_pipeline(
        spark_session, old_checkpoint, tmp_path, change):  # noqa: F811
    _check_compatible_update(spark_session, old_checkpoint, tmp_path, change)


def test_a_checkpoint_of_classic_spark_is_updated_on_spark_connect(
        old_checkpoint, tmp_path, spark_connect):  # noqa: F811
    """The old pipeline checkpointed on classic Spark, its update (a renamed step, mapped)
    resumed on Spark Connect: the same checks as on classic."""
    _check_compatible_update(spark_connect, old_checkpoint, tmp_path,
                             {"sum_name": "Total", "mapping": {"Sum": "Total"}})


def _check_compatible_update(spark_session, old_checkpoint, tmp_path, change) -> None:
    build = {key: value for key, value in change.items() if key != "mapping"}
    resumed = tmp_path / "resumed.jsonl"
    _run(spark_session, str(resumed), _resume(old_checkpoint, tmp_path),
         mapping=change.get("mapping"), **build)
    # The new pipeline uninterrupted, and its first CUT batches alone.
    whole, before_cut = tmp_path / "whole.jsonl", tmp_path / "before_cut.jsonl"
    _run(spark_session, str(whole), str(tmp_path / "whole"), **build)
    _run(spark_session, str(before_cut), str(tmp_path / "before_cut"), max_batches=CUT,
         **build)
    assert before_cut_is_part_of(_read(before_cut), _read(whole))
    after_cut = _read(whole) - _read(before_cut)
    assert _read(resumed) == after_cut
    # The state carried over: the early pane of [10, 20) sums 5 + 7, a's count goes on at 4.
    records = [json.loads(line) for line in _read(resumed)]
    assert {record["value"] for record in records
            if record.get("key") == "a" and record.get("window", {}).get("start") == 10.0
            and record["pane"]["timing"] == "EARLY"} == {12}
    assert {record["elements_so_far"] for record in records
            if record.get("key") == "a" and "elements_so_far" in record} == {4}


def before_cut_is_part_of(part: collections.Counter, whole: collections.Counter) -> bool:
    return bool(part) and not part - whole


@pytest.mark.parametrize("change, refusal", [
    ({"count_fn": RunningCountAsText},
     "step 'Count': its state spec 'count' changed from read_modify_write_spec(VarIntCoder) "
     "to read_modify_write_spec(StrUtf8Coder)"),
    ({"window_seconds": 5},
     "step 'Sum/GroupByKey': its window changed from FixedWindows(offset=Duration(0), "
     "size=Duration(10)) to FixedWindows(offset=Duration(0), size=Duration(5))"),
    ({"sum_name": "Total"},
     "step 'Sum/GroupByKey': the GroupByKey's windows and buffered elements would be lost"),
], ids=["changed_state_coder", "changed_window", "renamed_without_mapping"])
def test_an_update_whose_state_cannot_carry_over_is_refused_before_any_batch(
        spark_session, old_checkpoint, tmp_path, change, refusal):  # noqa: F811
    checkpoint_dir = _resume(old_checkpoint, tmp_path)
    before = sorted(os.listdir(checkpoint_dir))
    sink = tmp_path / "refused.jsonl"
    with pytest.raises(IncompatibleUpdateError) as error:
        _run(spark_session, str(sink), checkpoint_dir, **change)
    message = str(error.value)
    assert refusal in message
    assert checkpoint_dir in message and "empty --checkpoint_dir" in message
    assert not os.path.exists(sink), "a batch ran before the refusal"
    assert sorted(os.listdir(checkpoint_dir)) == before


def test_a_transform_name_mapping_that_is_not_an_object_is_refused(
        spark_session, tmp_path):  # noqa: F811
    with pytest.raises(ValueError, match="--transform_name_mapping=.*JSON object"):
        _run(spark_session, str(tmp_path / "sink"), str(tmp_path / "checkpoints"),
             mapping=["Sum", "Total"])
