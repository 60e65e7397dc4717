"""The console leaderboard: latest pane per key, ranked per window, timings marked."""

from __future__ import annotations

import pytest

from pipelines.leaderboard import Leaderboard
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
