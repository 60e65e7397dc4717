"""Beam's Nexmark in the benchmark: its event files are what ``ParseJsonEventFn`` reads, in
Nexmark's proportions, and the four workloads give the reference answer on hand-written
RDDs and DataFrames, on Beam's DirectRunner and on our SparkRunner (answers only: timings
belong to ``python -m bench``).

The DirectRunner and the SparkRunner here run the benchmark's own pipelines on the test
run's shared session (they are the engines the benchmark compares, not the runner under
test of ``make_pipeline``).
"""

from __future__ import annotations

import collections
import glob
import json

import pytest
from apache_beam.testing.benchmarks.nexmark.models import nexmark_model
from apache_beam.testing.benchmarks.nexmark.nexmark_util import ParseJsonEventFn

from bench.__main__ import main as bench_main
from bench.answers import reference_answer
from bench.baselines import run_dataframe, run_pyspark
from bench.beam_jobs import run_beam
from bench.nexmark import events as nexmark_events
from bench.nexmark.events import (
    BASE_TIME_MILLIS,
    EventFiles,
    all_event_lines,
    event_lines,
)
from bench.nexmark.queries import Q2, WINDOWED_SUM, WORKLOADS, canonical_line
from bench.workloads import EventSet, describe_difference

#: Enough events for a few of q2's bids (about one bid in 120) and several 10 s windows.
SMALL = EventSet(events=3000, seed=7, shard_count=3)


@pytest.fixture(scope="module")
def spark_session():
    """The test run's shared SparkSession when the runner's fixtures provide one, else ours."""
    from bench.session import bench_session, ship_bench

    try:
        from spark_fixtures import shared_spark_session
    except ImportError:
        return bench_session("local[2]", parallelism=2)
    session = shared_spark_session()
    ship_bench(session.sparkContext)
    return session


def _parsed(line):
    [model] = list(ParseJsonEventFn().process(line))
    return model


def test_events_are_nexmark_s_proportions_and_parse_with_beam_s_parser():
    lines = list(event_lines(seed=3, first=0, count=5000))
    models = [_parsed(line) for line in lines]

    kinds = collections.Counter(type(model).__name__ for model in models)
    assert kinds == {"Person": 100, "Auction": 300, "Bid": 4600}
    # Event n is at BASE + n // 10 millis: 10,000 events a second.
    assert [model.date_time.micros // 1000 for model in models[::1000]] == [
        BASE_TIME_MILLIS + n // 10 for n in range(0, 5000, 1000)]
    bids = [model for model in models if isinstance(model, nexmark_model.Bid)]
    auction_ids = {model.id for model in models if isinstance(model, nexmark_model.Auction)}
    assert all(100 <= bid.price <= 100_000_000 for bid in bids)
    # Bids go to auctions created so far (or at most 10 ahead, Nexmark's lead).
    assert all(bid.auction <= max(auction_ids) + 10 for bid in bids)


def test_events_depend_on_the_seed_not_on_how_the_files_are_cut(tmp_path):
    whole = list(all_event_lines(EventSet(2500, seed=5, shard_count=1)))
    pattern = nexmark_events.write_event_files(EventSet(2500, seed=5, shard_count=4),
                                               str(tmp_path))
    from_files = [line.rstrip("\n") for path in sorted(glob.glob(pattern))
                  for line in open(path, encoding="utf-8")]

    assert from_files == whole
    assert whole != list(all_event_lines(EventSet(2500, seed=6)))


def test_event_files_are_written_once_and_removed(monkeypatch):
    written = []
    real_write = nexmark_events.write_event_files

    def write_event_files(event_set, directory):
        written.append(real_write(event_set, directory))
        return written[-1]

    monkeypatch.setattr(nexmark_events, "write_event_files", write_event_files)
    with EventFiles() as files:
        assert files.pattern(SMALL) == files.pattern(SMALL)
        assert len(written) == 1 and glob.glob(written[0])
    assert not glob.glob(written[0])


def test_answers_are_taken_from_values_not_formatting():
    assert canonical_line(Q2, "{'auction_id': 1107, 'price': 5}") == canonical_line(
        Q2, "{'price': 5, 'auction_id': 1107}")
    assert canonical_line(WINDOWED_SUM, "[1107,1700000000000,12]") != canonical_line(
        WINDOWED_SUM, "[1107,1700000010000,12]")
    answer = reference_answer(WINDOWED_SUM, SMALL)
    assert answer.lines > 10 and reference_answer(Q2, SMALL).lines > 0


@pytest.mark.spark
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_engine_gives_the_reference_answer(workload, spark_session, tmp_path):
    from runners.spark import SparkRunner

    expected = reference_answer(workload, SMALL)
    with EventFiles(str(tmp_path)) as files:
        inputs = files.pattern(SMALL)
        answers = {
            "rdd": run_pyspark(workload, SMALL, spark_session.sparkContext, inputs=inputs),
            "dataframe": run_dataframe(workload, SMALL, spark_session, inputs=inputs),
            # run_beam checks that Nexmark's monitors counted every event and result.
            "direct": run_beam(workload, SMALL, "DirectRunner", inputs=inputs,
                               scratch_dir=str(tmp_path)),
            "spark": run_beam(workload, SMALL, SparkRunner(spark_session),
                              ["--spark_parallelism=2"], inputs=inputs,
                              scratch_dir=str(tmp_path)),
        }

    assert {engine: describe_difference(expected, answer)
            for engine, answer in answers.items()} == dict.fromkeys(answers, "")


@pytest.mark.spark
def test_the_command_line_runs_nexmark(spark_session, tmp_path):
    status = bench_main(["--events", "400", "--warmup-events", "0", "--only", "pyspark",
                         "--workloads", ",".join(WORKLOADS), "--results-dir", str(tmp_path)])

    assert status == 0
    [results] = list(tmp_path.glob("*.jsonl"))
    runs = [json.loads(line) for line in results.read_text().splitlines()]
    assert {(run["workload"], run["engine"]) for run in runs if run.get("kind") != "ratio"} == {
        (workload, engine) for workload in WORKLOADS for engine in ("python", "pyspark")}
    assert all(run["agrees"] for run in runs if run.get("kind") != "ratio")
