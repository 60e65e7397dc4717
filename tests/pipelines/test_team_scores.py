"""TeamScores: early, on-time and late panes of per-team sums, accumulating (Streaming 102)."""

from __future__ import annotations


import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from pipelines.events import GameEvent
from pipelines.team_scores import TeamScores
from transforms.parsing import ParseJson
from triggers.panes import DescribePanes, pane_record
from pane_times import to_millis


def _event(team, score, at):
    return TimestampedValue(GameEvent(f"{team}_player", team, score, float(at)), at)


def _pane(team, total, timing, index, *, window=(0, 10), is_last=False):
    return pane_record(team, total, window=window, timestamp=window[1] - 0.001, timing=timing,
                       index=index, is_first=index == 0, is_last=is_last)


def test_early_on_time_and_late_panes_accumulate(make_pipeline):
    stream = (test_stream.TestStream()
              .add_elements([_event("red", 3, 1), _event("blue", 1, 2)])
              .advance_processing_time(6)                   # early panes (5 s period)
              .add_elements([_event("red", 4, 5)])
              .advance_watermark_to(10)                     # on time: [0, 10) complete
              .add_elements([_event("red", 2, 4)])          # late, within 20 s lateness
              .advance_watermark_to(31)                     # [0, 10) expires at 10 + 20
              .add_elements([_event("red", 100, 3)])        # too late: dropped
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        panes = (p | stream
                 | TeamScores(window_seconds=10, early_seconds=5, allowed_lateness=20)
                 | DescribePanes()
                 | beam.Map(to_millis))
        assert_that(panes, equal_to([
            _pane("red", 3, "EARLY", 0),
            _pane("red", 7, "ON_TIME", 1),
            _pane("red", 9, "LATE", 2),
            _pane("blue", 1, "EARLY", 0),
            _pane("blue", 1, "ON_TIME", 1),
        ]))


def test_without_early_firings_one_on_time_pane_per_team_and_window(make_pipeline):
    stream = (test_stream.TestStream()
              .add_elements([_event("red", 3, 1), _event("red", 4, 12)])
              .advance_processing_time(30)                  # no early trigger: nothing fires
              .add_elements([_event("blue", 5, 14)])
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        panes = (p | stream
                 | TeamScores(window_seconds=10, early_seconds=0, allowed_lateness=0)
                 | DescribePanes()
                 | beam.Map(to_millis))
        # Beam's trigger driver does not flag the on-time pane as the last one, even without
        # allowed lateness: the window's end is signalled by the watermark, not by the pane.
        assert_that(panes, equal_to([
            _pane("red", 3, "ON_TIME", 0),
            _pane("red", 4, "ON_TIME", 0, window=(10, 20)),
            _pane("blue", 5, "ON_TIME", 0, window=(10, 20)),
        ]))


def test_parsed_json_feeds_team_scores_and_bad_records_become_dead_letters(make_pipeline):
    lines = ['{"user": "a", "team": "red", "score": 2, "timestamp": 3}',
             '{"user": "b", "team": "red", "score": "many", "timestamp": 4}',
             '{"user": "c", "team": "blue", "score": 6, "timestamp": 15}']
    with make_pipeline() as p:
        parsed = p | beam.Create(lines) | ParseJson(GameEvent)
        panes = (parsed.parsed | TeamScores(window_seconds=10) | DescribePanes()
                 | beam.Map(to_millis))
        assert_that(panes, equal_to([
            _pane("red", 2, "ON_TIME", 0),
            _pane("blue", 6, "ON_TIME", 0, window=(10, 20)),
        ]), label="panes")
        assert_that(parsed.dead_letter | beam.Map(lambda letter: letter.raw),
                    equal_to([lines[1]]), label="dead letters")


@pytest.mark.parametrize("arguments", [
    dict(window_seconds=0), dict(window_seconds=-1), dict(early_seconds=-1),
    dict(allowed_lateness=-5),
])
def test_invalid_settings_fail_at_construction(arguments):
    with pytest.raises((ValueError, TypeError)):
        TeamScores(**arguments)
