"""The jobs' command lines: options are validated up front, runs write documented records.

Option parsing is tested in-process (fast); a few subprocess runs prove that
``python -m pipelines.<job>`` works end to end on the DirectRunner.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import StandardOptions

from pipelines import generator
from pipelines.options import job_parser, parse_job_options
from project import PYTHON, REPO

PANE_FIELDS = {"key", "value", "window", "timestamp", "pane"}


def _parser():
    return job_parser("team_scores", "Team scores.", window_seconds=60, early_seconds=20,
                      allowed_lateness=120)


def _run(*arguments, timeout=240):
    environment = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([PYTHON, "-m", *arguments], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def _json_lines(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_defaults_replay_the_generator_in_streaming_mode():
    args, beam_options = parse_job_options(_parser(), [])
    assert (args.source, args.events, args.seed, args.output) == ("generator", 300, 42, None)
    assert (args.window_seconds, args.early_seconds, args.allowed_lateness) == (60, 20, 120)
    assert beam_options.view_as(StandardOptions).streaming
    assert type(args.runner).__name__.endswith("DirectRunner")


def test_an_input_file_is_read_as_a_batch_and_beam_options_pass_through(tmp_path):
    path = tmp_path / "game.jsonl"
    path.write_text("{}\n")
    args, beam_options = parse_job_options(
        _parser(), ["--input", str(path), "--direct_num_workers", "2", "--window_seconds=30"])
    assert (args.source, args.window_seconds) == ("file", 30)
    assert not beam_options.view_as(StandardOptions).streaming
    assert args.early_seconds == 0  # a batch has no processing time for early firings
    assert beam_options.get_all_options()["direct_num_workers"] == 2
    args, beam_options = parse_job_options(_parser(), ["--input", str(path), "--streaming"])
    assert beam_options.view_as(StandardOptions).streaming and args.early_seconds == 20


@pytest.mark.parametrize("arguments,message", [
    (["--window_seconds", "-5"], "argument --window_seconds: '-5' must be greater than 0"),
    (["--allowed_lateness", "soon"], "argument --allowed_lateness: 'soon' is not a number"),
    (["--events", "1.5"], "argument --events: '1.5' is not a whole number"),
    (["--format", "xml"], "argument --format: invalid choice: 'xml'"),
    (["--no_such_option", "3"], "unrecognized arguments: --no_such_option"),
    (["stray"], "unrecognized arguments: stray"),
    (["--input", "/nonexistent/dir/*.jsonl"], "no file matches"),
    (["--source", "file"], "--source=file needs --input"),
    (["--runner", "NoSuchRunner"], "--runner=NoSuchRunner"),
    (["--csv_columns", "a,b"], "--csv_columns applies to --format csv only"),
    (["--source", "kafka", "--input_topic", "t"], "--source kafka needs --bootstrap_servers"),
    (["--bootstrap_servers", "h:1", "--input_topic", "t", "--bootstrap_servers", "nohost"],
     "is not host:port"),
    (["--output_topic", "panes"], "--output_topic: Kafka options need --source kafka"),
    (["--input_topic", "t", "--bootstrap_servers", "h:1", "--start", "committed"],
     "--start committed reads a consumer group's offsets: pass --group_id"),
    (["--input_topic", "t", "--bootstrap_servers", "h:1", "--max_records", "0"],
     "argument --max_records: '0' must be greater than 0"),
    (["--input_topic", "t", "--bootstrap_servers", "h:1", "--plot", "x.png"],
     "python -m pipelines.live"),
    (["--input_topic", "t", "--bootstrap_servers", "h:1"], "pass --max_records N or --bounded"),
])
def test_bad_options_exit_2_with_a_message(capsys, arguments, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_job_options(_parser(), arguments)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_input_topic_selects_the_kafka_source_in_streaming_mode(capsys):
    args, beam_options = parse_job_options(_parser(), [
        "--input_topic", "events", "--bootstrap_servers", "127.0.0.1:9092",
        "--output_topic", "panes", "--max_records", "10"])
    assert (args.source, args.input_topic, args.output_topic, args.max_records) == (
        "kafka", "events", "panes", 10)
    assert (args.start, args.idle_timeout_seconds, args.bounded) == ("earliest", 10.0, False)
    assert beam_options.view_as(StandardOptions).streaming
    # Beam's DirectRunner runs a Kafka read without a processing-time clock: no early panes.
    assert args.early_seconds == 0 and "early firings disabled" in capsys.readouterr().err
    args, _ = parse_job_options(_parser(), [
        "--input_topic", "events", "--bootstrap_servers", "127.0.0.1:9092",
        "--runner", "SparkRunner"])
    assert args.early_seconds == 20


def test_help_lists_the_options_and_a_bad_option_exits_2():
    shown = _run("pipelines.team_scores", "--help")
    assert shown.returncode == 0, shown.stderr
    for option in ("--input", "--format", "--output", "--runner", "--source", "--seed",
                   "--events", "--window_seconds", "--early_seconds", "--allowed_lateness",
                   "--watermark_lag_seconds"):
        assert option in shown.stdout
    refused = _run("pipelines.sensor_average", "--count_size", "0")
    assert refused.returncode == 2
    assert "argument --count_size: '0' must be greater than 0" in refused.stderr


def test_team_scores_with_no_arguments_prints_early_on_time_and_late_panes():
    # What `make run` does, on fewer events.
    done = _run("pipelines.team_scores", "--events", "150")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for timing in ("EARLY", "ON_TIME", "LATE"):
        assert any(f" {timing} " in line and "sum=" in line for line in lines), timing
    assert "replaying 150 game events" in done.stderr


def test_team_scores_replayed_to_files_writes_panes_and_dead_letters(tmp_path):
    prefix = tmp_path / "out" / "scores"
    done = _run("pipelines.team_scores", "--events", "60", "--seed", "5",
                "--output", str(prefix))
    assert done.returncode == 0, done.stderr[-3000:]
    panes = _json_lines(tmp_path / "out" / "scores.jsonl")
    assert panes and all(set(pane) == PANE_FIELDS for pane in panes)
    assert {pane["pane"]["timing"] for pane in panes} >= {"EARLY", "ON_TIME"}
    assert all(set(pane["window"]) == {"start", "end"} for pane in panes)
    expected_rejects = sum(
        1 for record in generator.generate("game", 60, seed=5)
        if set(record.fields) != {"user", "team", "score", "timestamp"}
        or None in record.fields.values() or "n/a" in record.fields.values())
    dead_letters = tmp_path / "out" / "scores-dead-letter.jsonl"
    found = _json_lines(dead_letters) if dead_letters.exists() else []
    assert len(found) == expected_rejects
    assert all(set(letter) == {"raw", "reason", "source"} for letter in found)


def test_page_views_reads_a_generated_file_and_writes_views_and_alerts(tmp_path):
    path = tmp_path / "input.jsonl"
    assert generator.main(["--kind", "page_views", "--events", "80", "--seed", "2",
                           "--output", str(path)]) == 0
    prefix = tmp_path / "out" / "views"
    done = _run("pipelines.page_views", "--input", str(path), "--output", str(prefix),
                "--slow_ms", "800")
    assert done.returncode == 0, done.stderr[-3000:]
    panes = _json_lines(Path(f"{prefix}.jsonl"))
    assert panes and all(set(pane) == PANE_FIELDS for pane in panes)
    # A bounded input in batch: one on-time pane per page and window.
    assert {pane["pane"]["timing"] for pane in panes} == {"ON_TIME"}
    alerts = _json_lines(Path(f"{prefix}-alerts.jsonl"))
    assert alerts and all(alert["reason"] == "error" or alert["load_ms"] > 800
                          for alert in alerts)
    assert "page_views finished" in done.stderr


def test_sensor_average_count_policy_replays_a_file(tmp_path):
    path = tmp_path / "sensors.jsonl"
    assert generator.main(["--kind", "sensors", "--events", "40", "--seed", "9",
                           "--output", str(path)]) == 0
    prefix = tmp_path / "averages"
    done = _run("pipelines.sensor_average", "--input", str(path), "--source", "replay",
                "--window_policy", "count", "--count_size", "3", "--output", str(prefix))
    assert done.returncode == 0, done.stderr[-3000:]
    windows = _json_lines(Path(f"{prefix}.jsonl"))
    assert windows and all(set(record) == PANE_FIELDS for record in windows)
    assert {record["pane"]["reason"] for record in windows} <= {"count", "end_of_input", "late"}
    assert all(record["window"]["count"] == 3 for record in windows
               if record["pane"]["reason"] == "count")
