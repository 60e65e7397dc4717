"""What ``make run`` prints: a progress line, the live leaderboard, and the closing summary.

Pure text, no I/O and no clock (the caller passes times), so that it is tested as data:

* :func:`progress_line`: one line per refresh: elapsed time, micro-batches done, events
  produced (and per second), elements per second into the job's keyed steps (GroupByKey and
  stateful steps: each event enters a few), the job's watermark and how far it trails the
  wall clock, panes by timing;
* :class:`LiveView`: takes panes as they arrive from the output topic (described panes, as
  :class:`triggers.panes.DescribePanes` makes them), keeps counts and a
  :class:`~pipelines.live.leaderboard.Leaderboard`, and renders the screen;
* :class:`RunSummary` / :func:`format_summary`: the figures of the whole run;
  :func:`pane_latencies` estimates each pane's produce-to-pane latency.

Example:

>>> view = LiveView(windows=2, top=3)
>>> view.add_pane({"key": "red", "value": 9, "window": {"start": 0.0, "end": 10.0},
...                "pane": {"timing": "ON_TIME", "index": 1}})
True
>>> print(progress_line(elapsed=12.0, batches=5, produced=240, produced_rate=20.0,
...                     read_rate=19.5, watermark=8.0, lag=4.0, panes=view.panes_by_timing))
[  12 s] batches 5 | produced 240 (20.0/s) | keyed in 19.5/s | watermark 00:00:08 (lag 4.0 s) | panes: 0 early, 1 on time, 0 late
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from pipelines.live.leaderboard import TIMING_MARKS, Leaderboard
from pipelines.output import clock_text

TIMINGS = ("EARLY", "ON_TIME", "LATE")


def progress_line(*, elapsed: float, batches: Optional[int], produced: int,
                  produced_rate: float, read_rate: Optional[float], watermark: Optional[float],
                  lag: Optional[float], panes: Dict[str, int]) -> str:
    """One progress line; None values (no batch report yet) print as ``-``."""
    batch = "-" if batches is None else str(batches)
    read = "-" if read_rate is None else f"{read_rate:.1f}/s"
    lagging = "" if lag is None else f" (lag {lag:.1f} s)"
    watermark_text = clock_text(watermark, missing="-", millis=False)
    counts = ", ".join(f"{panes.get(timing, 0)} {timing.lower().replace('_', ' ')}"
                       for timing in TIMINGS)
    return (f"[{elapsed:4.0f} s] batches {batch} | produced {produced} ({produced_rate:.1f}/s) | "
            f"keyed in {read} | watermark {watermark_text}{lagging} | panes: {counts}")


class LiveView:
    """The live leaderboard: the newest ``windows`` windows, ``top`` teams each."""

    def __init__(self, windows: int = 3, top: int = 4, value_name: str = "sum") -> None:
        self.board = Leaderboard(value_name=value_name, max_windows=windows, top=top)
        self.panes_by_timing: Dict[str, int] = {timing: 0 for timing in TIMINGS}
        #: Latest pane value per (key, window): the final per-window scores at the end.
        self.latest: Dict[Tuple[str, Tuple[float, float]], Tuple[int, float]] = {}

    def add_pane(self, record: dict) -> bool:
        """Take one pane from the output topic; True if the leaderboard changed."""
        timing = record["pane"].get("timing", "UNKNOWN")
        self.panes_by_timing[timing] = self.panes_by_timing.get(timing, 0) + 1
        window = record["window"]
        if isinstance(window, dict) and "start" in window:
            slot = (str(record["key"]), (window["start"], window["end"]))
            index = record["pane"].get("index", 0)
            if slot not in self.latest or self.latest[slot][0] <= index:
                self.latest[slot] = (index, record["value"])
        return self.board.update(record)

    def totals(self) -> List[Tuple[str, float]]:
        """Every key's total over all windows (latest pane of each), highest first."""
        totals: Dict[str, float] = {}
        for (key, _window), (_index, value) in self.latest.items():
            totals[key] = totals.get(key, 0) + value
        return sorted(totals.items(), key=lambda item: (-item[1], item[0]))

    def render(self, progress: str) -> str:
        """The screen: the progress line, a legend, and the leaderboard."""
        legend = "  ".join(f"{mark} {timing.lower().replace('_', '-')}"
                           for timing, mark in TIMING_MARKS.items() if timing in TIMINGS)
        board = self.board.render() or "(waiting for the first pane)"
        return f"{progress}\nteam_scores, per window (newest first): {legend}\n\n{board}\n"


class RunSummary(NamedTuple):
    """The figures of a finished live run."""

    seconds: float
    produced: int
    malformed_sent: int
    panes_by_timing: Dict[str, int]
    dead_letters: Optional[int]
    dropped: Optional[int]
    batches: int
    read_rate: Optional[float]
    totals: Sequence[Tuple[str, float]]
    pids: Sequence[int]
    pids_left: Sequence[int]
    stopped_by: str
    #: p50 of the batches after the first (which starts Spark's workers), milliseconds
    batch_millis_p50: Optional[float] = None
    #: p50 of the seconds between the ends of consecutive batches (the board's refresh)
    refresh_seconds_p50: Optional[float] = None
    #: seconds from the start of the first batch to the first pane seen
    first_pane_seconds: Optional[float] = None
    #: p50 over panes of :func:`pane_latencies`, seconds
    pane_latency_seconds_p50: Optional[float] = None


def median(values: Sequence[float]) -> Optional[float]:
    """The middle value (the mean of the two middle ones), None for no values.

    >>> median([3.0, 1.0, 2.0]), median([4, 1, 2, 3]), median([])
    (2.0, 2.5, None)
    """
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def pane_latencies(sent: Sequence[Tuple[float, str, float, float]],
                   panes: Sequence[Tuple[float, dict]]) -> List[float]:
    """Per pane, seconds from producing the newest event its value includes to seeing it.

    ``sent`` holds (time sent, key, window start, value) of every valid event, ``panes``
    (time seen, pane) with accumulating sums. A micro-batch reads what was produced before
    it started, so a pane's sum covers the key's events in the order they were sent: the
    newest event it includes is the first at which the running sum reaches the pane's
    value. (Events dropped as too late make that an underestimate by their share.)

    >>> sent = [(10.0, "red", 0.0, 3), (11.0, "red", 0.0, 4), (12.0, "blue", 0.0, 1)]
    >>> pane = {"key": "red", "value": 7, "window": {"start": 0.0, "end": 10.0}}
    >>> pane_latencies(sent, [(12.5, pane)])
    [1.5]
    """
    events: Dict[Tuple[str, float], List[Tuple[float, float]]] = {}
    for sent_at, key, start, value in sorted(sent):
        events.setdefault((key, round(start, 3)), []).append((sent_at, value))
    latencies = []
    for seen, pane in panes:
        window = pane.get("window")
        if not isinstance(window, dict) or "start" not in window:
            continue
        running = 0.0
        for sent_at, value in events.get((str(pane["key"]), round(window["start"], 3)), []):
            running += value
            if running >= pane["value"]:
                latencies.append(seen - sent_at)
                break
    return latencies


def format_summary(summary: RunSummary, top: int = 4) -> str:
    """The closing summary, one figure per line.

    >>> print(format_summary(RunSummary(20.0, 400, 4, {"EARLY": 9, "ON_TIME": 8, "LATE": 2},
    ...                                 4, 1, 15, 21.5, [("red", 90), ("blue", 70)], [11, 12],
    ...                                 [], "the end of the run", 1210.0, 1.3, 3.2, 2.4)))
    summary (stopped by the end of the run, after 20 s)
      events produced:  400 (4 malformed on purpose)
      panes:            19 (9 early, 8 on time, 2 late)
      dead letters:     4
      dropped as late:  1 (past the allowed lateness)
      batches:          15 (21.5 elements/s into keyed steps)
      batch time:       p50 1210 ms (after the first); a batch ended every 1.3 s (p50)
      first pane:       3.2 s after the first batch started
      produce-to-pane:  p50 2.4 s (a pane seen minus the newest event it includes sent)
      top teams (all windows): 1. red 90  2. blue 70
      processes started: 11, 12; still running: none
    """
    panes = summary.panes_by_timing
    total = sum(panes.values())
    counts = ", ".join(f"{panes.get(timing, 0)} {timing.lower().replace('_', ' ')}"
                       for timing in TIMINGS)
    dropped = "unknown" if summary.dropped is None else str(summary.dropped)
    rate = "-" if summary.read_rate is None else f"{summary.read_rate:.1f}"
    leaders = "  ".join(f"{rank}. {key} {value:g}"
                        for rank, (key, value) in enumerate(summary.totals[:top], start=1))
    left = ", ".join(map(str, summary.pids_left)) or "none"
    return "\n".join([
        f"summary (stopped by {summary.stopped_by}, after {summary.seconds:.0f} s)",
        f"  events produced:  {summary.produced} ({summary.malformed_sent} malformed on purpose)",
        f"  panes:            {total} ({counts})",
        f"  dead letters:     {'unknown' if summary.dead_letters is None else summary.dead_letters}",
        f"  dropped as late:  {dropped} (past the allowed lateness)",
        f"  batches:          {summary.batches} ({rate} elements/s into keyed steps)",
        f"  batch time:       p50 {_figure(summary.batch_millis_p50, '.0f', ' ms')} (after the "
        f"first); a batch ended every {_figure(summary.refresh_seconds_p50, '.1f', ' s')} (p50)",
        f"  first pane:       {_figure(summary.first_pane_seconds, '.1f', ' s')} after the first "
        f"batch started",
        f"  produce-to-pane:  p50 {_figure(summary.pane_latency_seconds_p50, '.1f', ' s')} (a pane "
        f"seen minus the newest event it includes sent)",
        f"  top teams (all windows): {leaders or '-'}",
        f"  processes started: {', '.join(map(str, summary.pids))}; still running: {left}",
    ])


def _figure(value: Optional[float], spec: str, unit: str) -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


__all__ = ["LiveView", "RunSummary", "format_summary", "median", "pane_latencies",
           "progress_line", "TIMINGS"]
