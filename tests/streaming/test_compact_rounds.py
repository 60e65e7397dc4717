"""A round runs in one of two ways on a local master, with the same panes: in one Spark task
(*compact*: a round whose sources hold little, every TestStream round of the model tests) or
as Spark stages with shuffles (every other round, and every round on a cluster:
``runners/spark/streaming/compact_round.py``). The model tests prove the compact way against
the DirectRunner; these run a cross-section of the same proofs the other way
(``--streaming_compact_rounds=false``), and check which way a round ran.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing import test_stream as streams
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, TimestampedValue

from spark_fixtures import spark_session  # noqa: F401 (fixture)

#: (module, test) of model proofs that take only ``make_pipeline``: windows of each kind,
#: early / on-time / late panes, merging sessions, a stateful DoFn with timers,
#: processing-time timers, side inputs that wait, a Reshuffle, dropped late data.
PROOFS = [
    ("model/test_triggers", "test_early_on_time_and_late_panes"),
    ("model/test_triggers", "test_sessions_merge_and_keep_firing"),
    ("model/test_triggers", "test_early_firings_every_period_of_processing_time"),
    ("model/test_lateness", "test_each_sliding_window_counts_its_own_drop"),
    ("conformance/test_conformance_streaming",
     "test_late_data_merging_into_a_fired_session_fires_a_late_pane"),
    ("conformance/test_conformance_streaming", "test_batch_elements_flushes_on_its_processing_time_timer"),
    ("conformance/test_conformance_pipeline",
     "test_reshuffle_keeps_early_on_time_and_late_panes_in_streaming"),
    ("conformance/test_side_input_readiness",
     "test_a_main_element_waits_for_every_pane_of_its_side_window"),
    ("runner/test_spark_runner_features", "test_stateful_dofn_with_event_time_timers"),
]


def _proof(path: str):
    """A test function of another area's module, imported by its bare name (as pytest does,
    and as the Spark workers unpickle its DoFns)."""
    folder, module = path.split("/")
    directory = str(Path(__file__).resolve().parents[1] / folder)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return importlib.import_module(module)


@pytest.fixture
def distributed_pipeline(spark_session):
    """``make_pipeline`` on the SparkRunner with every round run as Spark stages."""
    from runners.spark import SparkRunner

    def make(streaming: bool = False, **options) -> test_pipeline.TestPipeline:
        return test_pipeline.TestPipeline(runner=SparkRunner(spark_session), blocking=True,
                            options=PipelineOptions(streaming=streaming,
                                                    streaming_compact_rounds=False, **options))

    return make


@pytest.mark.parametrize("proof", PROOFS, ids=[name for _, name in PROOFS])
def test_a_model_proof_holds_with_every_round_run_as_spark_stages(proof, distributed_pipeline):
    path, name = proof
    getattr(_proof(path), name)(distributed_pipeline)


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "as-stages"])
def test_the_report_says_which_way_each_round_ran(spark_session, tmp_path, compact):
    from runners.spark import SparkRunner

    stream = (streams.TestStream()
              .add_elements([TimestampedValue(("a", 1), 1), TimestampedValue(("b", 2), 2)])
              .add_elements([TimestampedValue(("a", 3), 3)])
              .advance_watermark_to(10)
              .advance_watermark_to_infinity())
    report = tmp_path / "report.jsonl"
    options = PipelineOptions(streaming=True, streaming_report=str(report),
                              streaming_compact_rounds=compact)
    with beam.Pipeline(runner=SparkRunner(spark_session), options=options) as pipeline:
        sums = (pipeline | stream | beam.WindowInto(FixedWindows(10))
                | "Sum" >> beam.CombinePerKey(sum))
        assert_that(sums, equal_to([("a", 4), ("b", 2)]))
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    rounds = sum(line["rounds"] for line in lines)
    assert rounds >= 3
    assert sum(line["compact_rounds"] for line in lines) == (rounds if compact else 0)
