"""The benchmark's workloads give the same answers on hand-written PySpark, on Beam's
DirectRunner and in a plain Python loop (answers only: timings belong to ``python -m bench``);
``parse_filter_project``'s input files are written once per event set and removed at the end.

The DirectRunner here is the benchmark's own comparison engine, not the runner under test,
so it is named directly rather than taken from the ``make_pipeline`` fixture.
"""

from __future__ import annotations

import glob
import json

import pytest

import bench.bids
from bench.__main__ import main as bench_main
from bench.baselines import run_pyspark
from bench.beam_jobs import run_beam
from bench.bids import bid_lines, keep_bid, parse_bid
from bench.report import format_table
from bench.workloads import (
    GLOBAL_SUM,
    KEYED_WINDOWED_SUM,
    PARSE_FILTER_PROJECT,
    TEAMS,
    WINDOW_SECONDS,
    WORKLOADS,
    EventSet,
    describe_difference,
    generate_shard,
)
from bench.answers import reference_answer

SMALL = EventSet(events=2000, seed=7, shard_count=4)


@pytest.fixture(scope="module")
def spark_context():
    """The test run's shared SparkSession when the runner's fixtures provide one (a process
    holds one SparkContext, and theirs carries settings their tests need), else our own."""
    from bench.session import bench_session, ship_bench

    try:
        from spark_fixtures import shared_spark_session
    except ImportError:
        return bench_session("local[2]", parallelism=2).sparkContext
    spark_context = shared_spark_session().sparkContext
    ship_bench(spark_context)
    return spark_context


def test_events_are_reproducible_and_well_formed():
    first = [event for shard in SMALL.shards() for event in generate_shard(*shard)]
    again = [event for shard in SMALL.shards() for event in generate_shard(*shard)]
    other_seed = EventSet(2000, seed=8, shard_count=4)
    different = [event for shard in other_seed.shards() for event in generate_shard(*shard)]

    assert first == again and first != different
    assert len(first) == 2000
    assert {team for team, _, _ in first} <= set(TEAMS)
    assert all(1 <= score <= 100 and isinstance(event_time, int) for _, score, event_time in first)


def test_bids_are_derived_from_the_events_and_about_one_in_eight_is_kept():
    events = [event for shard in SMALL.shards() for event in generate_shard(*shard)]
    bids = [parse_bid(line) for shard in SMALL.shards() for line in bid_lines(*shard)]

    assert [(bid.channel, bid.date_time) for bid in bids] == [
        (team, event_time) for team, _, event_time in events]
    assert 1 / 10 < sum(map(keep_bid, bids)) / len(bids) < 1 / 6


def test_reference_answer_windows_are_fixed_and_aligned():
    answer = reference_answer(KEYED_WINDOWED_SUM, SMALL)

    assert all(start % WINDOW_SECONDS == 0 for _, start in answer)
    assert sum(answer.values()) == reference_answer(GLOBAL_SUM, SMALL)


@pytest.mark.spark
@pytest.mark.parametrize("workload", WORKLOADS)
def test_pyspark_and_direct_runner_agree(workload, spark_context, tmp_path):
    expected = reference_answer(workload, SMALL)

    from_pyspark = run_pyspark(workload, SMALL, spark_context, partitions=2)
    from_direct = run_beam(workload, SMALL, "DirectRunner", scratch_dir=str(tmp_path))

    assert describe_difference(expected, from_pyspark) == ""
    assert describe_difference(expected, from_direct) == ""


def test_a_wrong_answer_is_described():
    expected = {("team-00", 0): 5, ("team-01", 0): 7}

    difference = describe_difference(expected, {("team-00", 0): 6, ("team-02", 0): 1})

    assert "missing 1" in difference and "unexpected 1" in difference and "1 wrong" in difference


def test_invalid_sizes_are_rejected():
    with pytest.raises(ValueError, match="events"):
        EventSet(events=-1)
    with pytest.raises(ValueError, match="shard_count"):
        EventSet(events=10, shard_count=0)
    with pytest.raises(SystemExit):
        bench_main(["--only", "flink"])


@pytest.mark.spark
def test_command_line_records_and_checks_every_run(spark_context, tmp_path, capsys):
    status = bench_main(["--events", "500", "--warmup-events", "0", "--only", "pyspark,direct",
                         "--workloads", GLOBAL_SUM, "--results-dir", str(tmp_path)])

    assert status == 0
    [results] = list(tmp_path.glob("*.jsonl"))
    records = [json.loads(line) for line in results.read_text().splitlines()]
    runs = {record["engine"]: record for record in records if record.get("kind") != "ratio"}
    assert set(runs) == {"python", "pyspark", "direct"}
    assert all(run["status"] == "ok" and run["agrees"] and run["events"] == 500
               for run in runs.values())
    assert [record["ratio"] for record in records if record.get("kind") == "ratio"] == [
        "pyspark/direct"]
    assert "hand-written PySpark" in capsys.readouterr().out
    assert "NO" in format_table([{**runs["direct"], "agrees": False}])


@pytest.mark.spark
def test_parse_filter_project_files_are_written_once_and_removed(spark_context, tmp_path,
                                                                  monkeypatch):
    written = []  # (events, pattern) of each event set written
    real_write = bench.bids.write_bid_files

    def write_bid_files(event_set, directory):
        written.append((event_set.events, real_write(event_set, directory)))
        return written[-1][1]

    monkeypatch.setattr(bench.bids, "write_bid_files", write_bid_files)

    status = bench_main(["--events", "600", "--warmup-events", "300",
                         "--only", "pyspark,dataframe", "--workloads", PARSE_FILTER_PROJECT,
                         "--results-dir", str(tmp_path)])

    assert status == 0
    # The warm-up's and the measured set's, once each though two engines read them; removed.
    assert sorted(events for events, _ in written) == [300, 600]
    assert not any(glob.glob(pattern) for _, pattern in written)
    [results] = list(tmp_path.glob("*.jsonl"))
    runs = [json.loads(line) for line in results.read_text().splitlines()]
    assert {run["engine"] for run in runs if run.get("kind") != "ratio"} == {
        "python", "pyspark", "dataframe"}
    assert all(run["agrees"] for run in runs if run.get("kind") != "ratio")
