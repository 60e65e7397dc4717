"""A console leaderboard: per window, keys ranked by their latest pane's value.

Panes arrive one by one as a job fires them (records shaped as
:class:`triggers.panes.DescribePanes` emits them). :class:`Leaderboard` keeps, per window
and key, the *latest* pane (the highest pane index: accumulating panes refine each other,
so a later pane replaces an earlier one, even if a runner delivers them out of order) and
renders every window as a ranked table, newest window first, each row marked with its
pane's timing: ``~`` early (speculative), ``=`` on time, ``+`` late (a correction).

It is pure: no clock, no I/O, no Beam; a live view (``make run``) feeds it panes and prints
:meth:`Leaderboard.render` when it changes.

Example:

>>> board = Leaderboard(value_name="sum")
>>> for key, value, timing, index in [("red", 5, "EARLY", 0), ("blue", 7, "EARLY", 0),
...                                   ("red", 9, "ON_TIME", 1)]:
...     _ = board.update({"key": key, "value": value, "window": {"start": 0.0, "end": 60.0},
...                   "pane": {"timing": timing, "index": index}})
>>> print(board.render())
[00:00:00, 00:01:00)
   1. red           sum=9      = ON_TIME #1
   2. blue          sum=7      ~ EARLY   #0
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from pipelines.output import clock_text

#: The mark each pane timing gets in a row.
TIMING_MARKS = {"EARLY": "~", "ON_TIME": "=", "LATE": "+", "UNKNOWN": "?"}

_GLOBAL = (float("-inf"), float("inf"))


def _window_key(window: Any) -> Tuple[float, float]:
    """A sortable (start, end) for a described window; the global window spans everything."""
    if isinstance(window, dict) and "start" in window:
        start = float("-inf") if window["start"] is None else float(window["start"])
        end = float("inf") if window["end"] is None else float(window["end"])
        return start, end
    if window == "global":
        return _GLOBAL
    raise ValueError(f"window {window!r} is not a described interval window or 'global'; "
                     "feed records as DescribePanes emits them")


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _rank_key(row: Tuple[str, dict]) -> Tuple[Any, ...]:
    key, pane = row
    value = pane["value"]
    # Numbers rank highest first; anything else after them, by its text; ties by key.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, -value, key)
    return (1, str(value), key)


class Leaderboard:
    """Per-window rankings of the latest pane per key, rendered as text.

    ``value_name`` labels the value (``sum=93``); ``max_windows`` keeps only the newest
    windows in the rendering (None: all); ``top`` shows at most that many keys per window.
    """

    def __init__(self, value_name: str = "value", max_windows: Optional[int] = None,
                 top: Optional[int] = None) -> None:
        for name, limit in (("max_windows", max_windows), ("top", top)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                      or limit <= 0):
                raise ValueError(f"{name}={limit!r} must be a positive whole number or None")
        if not isinstance(value_name, str) or not value_name:
            raise ValueError(f"value_name={value_name!r} must be a non-empty label")
        self._value_name = value_name
        self._max_windows = max_windows
        self._top = top
        self._panes: Dict[Tuple[float, float], Dict[str, dict]] = {}

    def update(self, record: dict) -> bool:
        """Take one pane record; return True if the board changed.

        A pane replaces the key's pane in its window unless it is older (lower index).
        """
        window = _window_key(record["window"])
        key = "-" if record["key"] is None else str(record["key"])
        pane = record["pane"]
        entry = {"value": record["value"], "timing": pane.get("timing", "UNKNOWN"),
                 "index": pane.get("index", 0)}
        panes = self._panes.setdefault(window, {})
        current = panes.get(key)
        if current is not None and current["index"] > entry["index"]:
            return False
        if current == entry:
            return False
        panes[key] = entry
        return True

    def update_all(self, records: Iterable[dict]) -> bool:
        """Take many pane records in order; return True if any changed the board."""
        changed = False
        for record in records:
            changed = self.update(record) or changed
        return changed

    def rankings(self) -> List[Tuple[Tuple[float, float], List[Tuple[int, str, dict]]]]:
        """(window, [(rank, key, pane)]) per window, newest window first (the data render shows)."""
        windows = sorted(self._panes, reverse=True)
        if self._max_windows is not None:
            windows = windows[: self._max_windows]
        result = []
        for window in windows:
            rows = sorted(self._panes[window].items(), key=_rank_key)
            if self._top is not None:
                rows = rows[: self._top]
            result.append((window, [(rank, key, pane)
                                    for rank, (key, pane) in enumerate(rows, start=1)]))
        return result

    def render(self) -> str:
        """The board as text: a header per window, then one ranked row per key."""
        lines = []
        for window, rows in self.rankings():
            if lines:
                lines.append("")
            lines.append("global window" if window == _GLOBAL
                         else f"[{clock_text(window[0])}, {clock_text(window[1])})")
            for rank, key, pane in rows:
                value = f"{self._value_name}={_format_value(pane['value'])}"
                mark = TIMING_MARKS.get(pane["timing"], "?")
                lines.append(f"{rank:>4}. {key:<12}  {value:<9}  {mark} "
                             f"{pane['timing']:<7} #{pane['index']}".rstrip())
        return "\n".join(lines)
