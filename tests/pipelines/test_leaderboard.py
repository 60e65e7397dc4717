"""The console leaderboard: latest pane per key, ranked per window, timings marked."""

from __future__ import annotations

import pytest

from pipelines.live.leaderboard import Leaderboard
from triggers.panes import pane_record

FIRST = (0, 60)
SECOND = (60, 120)


def _pane(key, value, window, timing, index):
    return pane_record(key, value, window=window, timestamp=window[1] - 0.001, timing=timing,
                       index=index, is_first=index == 0, is_last=False)


STREAM = [
    _pane("red", 5, FIRST, "EARLY", 0),
    _pane("blue", 7, FIRST, "EARLY", 0),
    _pane("green", 2, FIRST, "EARLY", 0),
    _pane("red", 9, FIRST, "ON_TIME", 1),
    _pane("blue", 8, FIRST, "ON_TIME", 1),
    _pane("green", 2, FIRST, "ON_TIME", 1),
    _pane("amber", 4, SECOND, "EARLY", 0),
    _pane("green", 12, FIRST, "LATE", 2),
]


def test_latest_panes_ranked_per_window_newest_window_first():
    board = Leaderboard(value_name="sum")
    assert board.update_all(STREAM)
    assert board.render() == "\n".join([
        "[00:01:00, 00:02:00)",
        "   1. amber         sum=4      ~ EARLY   #0",
        "",
        "[00:00:00, 00:01:00)",
        "   1. green         sum=12     + LATE    #2",
        "   2. red           sum=9      = ON_TIME #1",
        "   3. blue          sum=8      = ON_TIME #1",
    ])


def test_the_board_after_each_pane():
    board = Leaderboard(value_name="sum")
    renders = []
    for record in STREAM[:4]:
        board.update(record)
        renders.append(board.render().splitlines()[1:])
    assert renders == [
        ["   1. red           sum=5      ~ EARLY   #0"],
        ["   1. blue          sum=7      ~ EARLY   #0",
         "   2. red           sum=5      ~ EARLY   #0"],
        ["   1. blue          sum=7      ~ EARLY   #0",
         "   2. red           sum=5      ~ EARLY   #0",
         "   3. green         sum=2      ~ EARLY   #0"],
        ["   1. red           sum=9      = ON_TIME #1",
         "   2. blue          sum=7      ~ EARLY   #0",
         "   3. green         sum=2      ~ EARLY   #0"],
    ]


def test_an_older_pane_arriving_late_does_not_replace_a_newer_one():
    board = Leaderboard()
    assert board.update(_pane("red", 9, FIRST, "ON_TIME", 1))
    assert not board.update(_pane("red", 5, FIRST, "EARLY", 0))
    assert not board.update(_pane("red", 9, FIRST, "ON_TIME", 1))  # a duplicate changes nothing
    assert board.render().splitlines()[1] == "   1. red           value=9    = ON_TIME #1"


def test_ties_rank_by_key_floats_and_non_numbers_render():
    board = Leaderboard(value_name="mean")
    board.update_all([_pane("b", 2.5, FIRST, "ON_TIME", 0), _pane("a", 2.5, FIRST, "ON_TIME", 0),
                      _pane("c", "n/a", FIRST, "ON_TIME", 0)])
    assert board.render().splitlines()[1:] == [
        "   1. a             mean=2.50  = ON_TIME #0",
        "   2. b             mean=2.50  = ON_TIME #0",
        "   3. c             mean=n/a   = ON_TIME #0",
    ]


def test_max_windows_and_top_limit_the_rendering():
    board = Leaderboard(value_name="sum", max_windows=1, top=1)
    board.update_all(STREAM)
    board.update(_pane("red", 6, SECOND, "EARLY", 0))
    assert board.render() == "[00:01:00, 00:02:00)\n   1. red           sum=6      ~ EARLY   #0"


def test_global_window_and_keyless_panes():
    board = Leaderboard(value_name="count")
    board.update(pane_record(None, 3, window="global", timestamp=None, timing="ON_TIME",
                             index=0, is_first=True, is_last=True))
    assert board.render() == "global window\n   1. -             count=3    = ON_TIME #0"


@pytest.mark.parametrize("arguments", [{"max_windows": 0}, {"top": -1}, {"top": True},
                                       {"value_name": ""}])
def test_bad_arguments_raise_at_construction(arguments):
    with pytest.raises(ValueError, match=next(iter(arguments))):
        Leaderboard(**arguments)


def test_a_record_without_a_described_window_is_refused():
    with pytest.raises(ValueError, match="DescribePanes"):
        Leaderboard().update({"key": "k", "value": 1, "window": [0, 60],
                              "pane": {"timing": "EARLY", "index": 0}})


# ---- the live console of `make run` (pipelines.live.console) ----------------------------

from pipelines.live.console import LiveView, RunSummary, format_summary, progress_line  # noqa: E402


def test_the_live_view_counts_panes_by_timing_and_renders_the_board_under_the_progress():
    view = LiveView(windows=1, top=2)
    changed = [view.add_pane(pane) for pane in STREAM]
    assert changed == [True] * len(STREAM)
    assert view.panes_by_timing == {"EARLY": 4, "ON_TIME": 3, "LATE": 1}
    screen = view.render("PROGRESS")
    lines = screen.splitlines()
    assert lines[0] == "PROGRESS"
    assert "~ early" in lines[1] and "= on-time" in lines[1] and "+ late" in lines[1]
    # Only the newest window, its two leaders; the late green pane is in the older window.
    assert lines[3:] == ["[00:01:00, 00:02:00)", "   1. amber         sum=4      ~ EARLY   #0"]
    # Totals over all windows take each window's latest pane.
    assert view.totals() == [("green", 12), ("red", 9), ("blue", 8), ("amber", 4)]


def test_the_live_view_keeps_the_newest_pane_when_an_older_one_arrives_after_it():
    view = LiveView()
    view.add_pane(_pane("red", 9, FIRST, "ON_TIME", 1))
    assert view.add_pane(_pane("red", 5, FIRST, "EARLY", 0)) is False
    assert view.totals() == [("red", 9)]
    assert view.panes_by_timing == {"EARLY": 1, "ON_TIME": 1, "LATE": 0}


def test_the_progress_line_shows_every_figure_and_dashes_before_the_first_batch():
    line = progress_line(elapsed=61.4, batches=42, produced=1234, produced_rate=20.5,
                         read_rate=19.25, watermark=3600.0 + 75, lag=2.25,
                         panes={"EARLY": 3, "ON_TIME": 2, "LATE": 1})
    assert line == ("[  61 s] batches 42 | produced 1234 (20.5/s) | keyed in 19.2/s | watermark "
                    "01:01:15 (lag 2.2 s) | panes: 3 early, 2 on time, 1 late")
    waiting = progress_line(elapsed=3, batches=None, produced=0, produced_rate=0.0,
                            read_rate=None, watermark=None, lag=None, panes={})
    assert "batches - " in waiting and "keyed in - " in waiting and "watermark - |" in waiting


def test_the_summary_names_every_figure_and_the_processes_left():
    summary = RunSummary(seconds=75.2, produced=1500, malformed_sent=15,
                         panes_by_timing={"EARLY": 40, "ON_TIME": 24, "LATE": 7},
                         dead_letters=15, dropped=3, batches=60, read_rate=20.04,
                         totals=[("red", 900), ("blue", 850), ("green", 10)], pids=[10, 11],
                         pids_left=[11], stopped_by="Ctrl-C (SIGINT)")
    text = format_summary(summary, top=2)
    assert text.splitlines()[0] == "summary (stopped by Ctrl-C (SIGINT), after 75 s)"
    assert "events produced:  1500 (15 malformed on purpose)" in text
    assert "panes:            71 (40 early, 24 on time, 7 late)" in text
    assert "dropped as late:  3" in text and "dead letters:     15" in text
    assert "batches:          60 (20.0 elements/s into keyed steps)" in text
    assert "1. red 900  2. blue 850" in text and "green" not in text
    assert text.splitlines()[-1] == "  processes started: 10, 11; still running: 11"
