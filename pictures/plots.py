"""Pictures of a run, drawn with matplotlib (Agg backend: files only, no display). They
draw the plain data of :mod:`pictures.diagram`; they never run a job.

* :func:`draw_pane_diagram`: the Dataflow model's pane diagram (Streaming 102 style) from a
  :class:`~pictures.diagram.PaneDiagram` (x = processing time, y = event time; inputs,
  watermark, windows as bands, panes by timing with their values). How fire times are
  known, exactly or as a span, is explained in :mod:`pipelines.pane_diagram`.
* :func:`draw_throughput`: events per batch and watermark lag (newest event time minus
  watermark) over the run, from :class:`~pictures.diagram.BatchRecord` records: a
  replay plan's (:func:`~pipelines.pane_diagram.replay_batches`) or a streaming runner's.

A job's ``--plot PATH`` draws both (:mod:`pipelines.job_pictures`; the second figure at
``PATH-throughput.<ext>``).

Example:

>>> import os, tempfile
>>> from pictures.diagram import BatchRecord
>>> path = os.path.join(tempfile.mkdtemp(), "run.png")
>>> draw_throughput([BatchRecord(0.0, 3, 90.0, 100.0), BatchRecord(1.0, 1, 95.0, 105.0)],
...                 path) == path
True
"""

from __future__ import annotations

from typing import Optional, Sequence

from pictures.diagram import BatchRecord, PaneDiagram, watermark_lag

#: Marker and colour per pane timing (the legend uses the same).
TIMING_STYLE = {"EARLY": ("^", "#e69f00"), "ON_TIME": ("o", "#0072b2"), "LATE": ("s", "#d55e00")}



def pyplot_for_files():
    """matplotlib's pyplot on the Agg backend: files only, no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def _clock_axis(axis, origin: float) -> None:
    import datetime

    from matplotlib.ticker import FuncFormatter

    def label(value, _position):
        moment = datetime.datetime.fromtimestamp(origin + value, tz=datetime.timezone.utc)
        return moment.strftime("%H:%M:%S")

    axis.set_major_formatter(FuncFormatter(label))


def draw_pane_diagram(diagram: PaneDiagram, path: str, *, title: str = "panes",
                      value_label: str = "value", annotate: bool = True,
                      fire_time_label: Optional[str] = None,
                      xlabel: str = "processing time (s since the replay began)") -> str:
    """Draw ``diagram`` to ``path`` (PNG, SVG or PDF by extension); return ``path``.

    ``fire_time_label`` replaces the legend's note on how fire times are known (a live run
    observes them rather than infers them).
    """
    pyplot = pyplot_for_files()
    figure, axes = pyplot.subplots(figsize=(12, 8), dpi=100)
    # Event times are large numbers (seconds since the epoch): plot them relative to an origin.
    origin = min([point.event_time for point in diagram.inputs]
                 + [window[0] for window in diagram.windows] or [0.0])
    for number, (start, end) in enumerate(diagram.windows):
        axes.axhspan(start - origin, end - origin, color="#888888",
                     alpha=0.10 if number % 2 else 0.04, linewidth=0)
    on_time = [point for point in diagram.inputs if not point.late]
    late = [point for point in diagram.inputs if point.late]
    axes.scatter([p.arrival for p in on_time], [p.event_time - origin for p in on_time],
                 s=8, color="#555555", label="input (arrival, event time)", zorder=2)
    if late:
        axes.scatter([p.arrival for p in late], [p.event_time - origin for p in late], s=14,
                     color="#cc0000", marker="x", label="input behind the watermark", zorder=2)
    if diagram.watermark:
        axes.step([t for t, _ in diagram.watermark], [w - origin for _, w in diagram.watermark],
                  where="post", color="#009e73", linewidth=2, label="watermark (heuristic)")
    lanes = {key: number for number, key in enumerate(diagram.keys)}
    placed = [mark for mark in diagram.panes if mark.fire_time is not None]
    for timing, (marker, colour) in TIMING_STYLE.items():
        marks = [mark for mark in placed if mark.timing == timing]
        if not marks:
            continue
        ys = [mark.window[0] - origin + (mark.window[1] - mark.window[0])
              * (lanes[mark.key] + 1) / (len(lanes) + 1) for mark in marks]
        exact = all(mark.exact for mark in marks)
        label = f"{timing} pane " + (fire_time_label or ("(fire time exact)" if exact else
                                                          "(fired within its bar)"))
        axes.scatter([mark.fire_time for mark in marks], ys, marker=marker, color=colour, s=40,
                     label=label, zorder=4, edgecolors="black", linewidths=0.5)
        for mark, y in zip(marks, ys):
            if mark.fire_time_latest is not None and mark.fire_time_latest > mark.fire_time:
                axes.plot([mark.fire_time, mark.fire_time_latest], [y, y], color=colour,
                          linewidth=1, alpha=0.6, zorder=3)
            if annotate:
                value = f"{mark.value:.2f}" if isinstance(mark.value, float) else mark.value
                axes.annotate(f"{mark.key} {value_label}={value}", (mark.fire_time, y),
                              xytext=(4, 2), textcoords="offset points", fontsize=6)
    unplaced = len(diagram.panes) - len(placed)
    axes.set_title(f"{title}: {len(placed)} panes"
                   + (f", {unplaced} not placed (no tick matches their value)" if unplaced else ""))
    axes.set_xlabel(xlabel)
    axes.set_ylabel("event time (UTC; windows as bands, one lane per key)")
    _clock_axis(axes.yaxis, origin)
    axes.set_xlim(left=min([0.0] + [p.arrival for p in diagram.inputs]) - 1,
                  right=diagram.end_time + 1)
    axes.legend(loc="upper left", fontsize=8)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path


def draw_throughput(batches: Sequence[BatchRecord], path: str, *, title: str = "run",
                    events_label: str = "events per batch",
                    lag_label: str = "watermark lag (s)\nnewest event time - watermark") -> str:
    """Draw events per batch and watermark lag over the run to ``path``; return ``path``."""
    pyplot = pyplot_for_files()
    figure, (top, bottom) = pyplot.subplots(2, 1, figsize=(10, 6), dpi=100, sharex=True)
    times = [batch.time for batch in batches]
    top.bar(times, [batch.events for batch in batches], width=0.8, color="#0072b2")
    top.set_ylabel(events_label)
    top.set_title(f"{title}: throughput and watermark lag")
    lags = [(time, lag) for time, lag in watermark_lag(batches) if lag is not None]
    bottom.step([t for t, _ in lags], [lag for _, lag in lags], where="post", color="#009e73")
    bottom.set_ylim(bottom=0, top=max([lag for _, lag in lags] + [1.0]) * 1.2)
    bottom.set_ylabel(lag_label)
    bottom.set_xlabel("processing time (s since the run began)")
    for axes in (top, bottom):
        axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path


def companion_path(path: str, name: str) -> str:
    """``out/run.png`` -> ``out/run-<name>.png``: where a second figure goes.

    >>> companion_path("out/run.png", "throughput")
    'out/run-throughput.png'
    """
    stem, dot, extension = path.rpartition(".")
    return f"{stem}-{name}.{extension}" if dot and "/" not in extension else f"{path}-{name}"
