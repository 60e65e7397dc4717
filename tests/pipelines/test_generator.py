"""The generator makes reproducible, out-of-order, partly late input; the replay streams it."""

from __future__ import annotations

import io
import json

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window

from pipelines import generator
from pipelines.events import GameEvent, PageView, SensorReading
from pipelines.generator import GeneratedRecord, generate, read_json_lines, write_records
from pipelines.replay import Replay, late_records, plan_replay
from transforms.parsing import ParseCsv, ParseJson
from triggers.panes import DescribePanes, pane_record


def _lines(records):
    return [record.to_json() for record in records]


@pytest.mark.parametrize("kind", ["game", "page_views", "sensors"])
def test_same_seed_same_output_different_seed_different(kind):
    first = _lines(generate(kind, 200, seed=5))
    assert first == _lines(generate(kind, 200, seed=5))
    assert first != _lines(generate(kind, 200, seed=6))
    assert len(first) == 200


def test_records_are_in_arrival_order_but_event_times_are_not():
    records = generate("game", 300, seed=42)
    arrivals = [record.arrival_time for record in records]
    assert arrivals == sorted(arrivals)
    assert all(record.arrival_time >= record.event_time for record in records)
    event_times = [record.event_time for record in records]
    swapped = sum(1 for before, after in zip(event_times, event_times[1:]) if after < before)
    assert swapped > 10, "a realistic stream has events out of order"


def test_some_records_arrive_behind_the_replay_watermark():
    records = generate("game", 300, seed=42)
    late = late_records(records, watermark_lag_seconds=10)
    # About late_fraction (5%) are held up 30-240 s, far beyond a 10 s watermark lag.
    assert 5 <= len(late) <= 40
    assert all(record.arrival_time - record.event_time > 10 for record in late)
    assert not late_records(generate("game", 300, seed=42, late_fraction=0.0,
                                     mean_delay_seconds=0.0), watermark_lag_seconds=10)


@pytest.mark.parametrize("kind,event_type", [
    ("game", GameEvent), ("page_views", PageView), ("sensors", SensorReading)])
def test_generated_events_parse_except_exactly_the_malformed_ones(make_pipeline, kind, event_type):
    records = generate(kind, 60, seed=3, malformed_fraction=0.2)
    fields = set(event_type._fields)
    well_formed = [r for r in records if set(r.fields) == fields and "n/a" not in r.fields.values()
                   and None not in r.fields.values()]
    assert 0 < len(well_formed) < len(records)
    with make_pipeline() as p:
        result = p | beam.Create([r.event_json() for r in records]) | ParseJson(event_type)
        assert_that(result.parsed, equal_to([event_type(**r.fields) for r in well_formed]),
                    label="parsed")
        assert_that(result.dead_letter | beam.Map(lambda letter: letter.raw),
                    equal_to([r.event_json() for r in records if r not in well_formed]),
                    label="dead letters")


def test_csv_output_parses_with_the_generator_columns(make_pipeline):
    records = generate("page_views", 20, seed=8, malformed_fraction=0.0)
    out = io.StringIO()
    assert write_records(records, out, kind="page_views", format="csv") == 20
    columns = generator.csv_columns("page_views")
    with make_pipeline() as p:
        result = (p | beam.Create(out.getvalue().splitlines())
                  | ParseCsv(PageView, columns=columns, ignore_extra_fields=True))
        assert_that(result.parsed, equal_to([PageView(**r.fields) for r in records]))


def test_json_lines_round_trip_and_strip_arrival_time():
    records = generate("sensors", 30, seed=2)
    out = io.StringIO()
    write_records(records, out, kind="sensors")
    back = read_json_lines(out.getvalue().splitlines() + ["not json at all"])
    assert back[:-1] == records
    assert back[-1].raw == "not json at all" and back[-1].event_json() == "not json at all"
    line = records[0].to_json()
    assert "arrival_time" in json.loads(line)
    assert json.loads(generator.strip_arrival_time(line)) == records[0].fields


def test_generator_command_line_writes_the_requested_events(tmp_path, capsys):
    path = tmp_path / "sensors.jsonl"
    assert generator.main(["--kind", "sensors", "--events", "12", "--seed", "4",
                           "--output", str(path)]) == 0
    lines = path.read_text().splitlines()
    assert lines == _lines(generate("sensors", 12, seed=4))
    with pytest.raises(SystemExit) as exit_info:
        generator.main(["--events", "-3"])
    assert exit_info.value.code == 2
    assert "--events=-3 must not be negative" in capsys.readouterr().err


@pytest.mark.parametrize("arguments,message", [
    (dict(kind="chess", events=1, seed=1), "not a stream kind"),
    (dict(kind="game", events=-1, seed=1), "non-negative"),
    (dict(kind="game", events=1, seed=1, late_fraction=2), "between 0 and 1"),
    (dict(kind="game", events=1, seed=1, rate=0), "positive"),
])
def test_generator_rejects_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        generate(**arguments)


def test_replay_plan_advances_the_watermark_heuristically():
    records = generate("game", 200, seed=11)
    steps = plan_replay(records, tick_seconds=2.0, watermark_lag_seconds=10)
    times = [step.processing_time for step in steps]
    assert times == sorted(set(times)) and all(t % 2.0 == 0 for t in times)
    assert sum(len(step.records) for step in steps) == 200
    newest, watermark = float("-inf"), float("-inf")
    for step in steps:
        newest = max([newest] + [record.event_time for record in step.records])
        if step.watermark is not None:
            assert step.watermark == newest - 10 and step.watermark > watermark
            watermark = step.watermark
        else:
            assert newest - 10 <= watermark
    with pytest.raises(ValueError, match="tick_seconds"):
        plan_replay(records, tick_seconds=0)


def _record(event_time, arrival_time, value):
    return GeneratedRecord(event_time, arrival_time, {"key": "a", "value": value,
                                                      "timestamp": event_time})


# Windows [100, 110), [110, 120), [120, 130), [160, 170); watermark = newest event - 5.
REPLAYED = [
    _record(100, 100, 1),    # tick 0: watermark 95
    _record(104, 101, 2),    # tick 1: watermark 99
    _record(112, 113, 4),    # tick 13: watermark 107
    _record(121, 122, 8),    # tick 22: watermark 116 -> [100, 110) on time
    _record(105, 125, 16),   # tick 25: late for [100, 110), within the allowed lateness
    _record(125, 127, 32),   # tick 27: watermark 120 -> [110, 120) on time
    _record(160, 170, 64),   # tick 70: watermark 155 -> [120, 130) on time; [100, 110) expires
    _record(102, 176, 128),  # tick 76: later than the allowed lateness: dropped
]


def test_replay_names_the_late_records():
    late = late_records(REPLAYED, watermark_lag_seconds=5)
    assert [record.fields["value"] for record in late] == [16, 128]


def test_replay_gives_on_time_and_late_panes_and_drops_what_is_too_late(make_pipeline):
    with make_pipeline(streaming=True) as p:
        panes = (p
                 | Replay(REPLAYED, tick_seconds=1, watermark_lag_seconds=5)
                 | beam.Map(json.loads)
                 | beam.Map(lambda record: (record["key"], record["value"]))
                 | beam.WindowInto(window.FixedWindows(10),
                                   trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                                   accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                                   allowed_lateness=30)
                 | beam.CombinePerKey(sum)
                 | DescribePanes())
        assert_that(panes, equal_to([
            pane_record("a", 3, window=(100, 110), timestamp=109.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 19, window=(100, 110), timestamp=109.999999, timing="LATE",
                        index=1, is_first=False, is_last=False),
            pane_record("a", 4, window=(110, 120), timestamp=119.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 40, window=(120, 130), timestamp=129.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
            pane_record("a", 64, window=(160, 170), timestamp=169.999999, timing="ON_TIME",
                        index=0, is_first=True, is_last=False),
        ]))
