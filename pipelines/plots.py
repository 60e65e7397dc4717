"""Pictures of a replayed run, drawn with matplotlib (Agg backend: files only, no display).

* :func:`draw_pane_diagram`: the Dataflow model's pane diagram (Streaming 102 style) from a
  :class:`~pipelines.pane_diagram.PaneDiagram` (x = processing time, y = event time; inputs,
  watermark, windows as bands, panes by timing with their values). How fire times are
  known, exactly or as a span, is explained in :mod:`pipelines.pane_diagram`.
* :func:`draw_throughput`: events per batch and watermark lag (newest event time minus
  watermark) over the run, from :class:`~pipelines.pane_diagram.BatchRecord` records: a
  replay plan's (:func:`~pipelines.pane_diagram.replay_batches`) or a streaming runner's.
* :class:`ReplayPlot`: a job's ``--plot PATH`` (both figures; the second at
  ``PATH-throughput.<ext>``).

Example:

>>> import os, tempfile
>>> from pipelines.pane_diagram import BatchRecord
>>> path = os.path.join(tempfile.mkdtemp(), "run.png")
>>> draw_throughput([BatchRecord(0.0, 3, 90.0, 100.0), BatchRecord(1.0, 1, 95.0, 105.0)],
...                 path) == path
True
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from apache_beam.transforms.core import CombineFn
from apache_beam.transforms.window import WindowFn

from pipelines.pane_diagram import (
    BatchRecord,
    Elements,
    PaneDiagram,
    pane_diagram,
    replay_batches,
    typed_elements,
    watermark_lag,
)
from pipelines.replay import ReplayStep

#: Marker and colour per pane timing (the legend uses the same).
TIMING_STYLE = {"EARLY": ("^", "#e69f00"), "ON_TIME": ("o", "#0072b2"), "LATE": ("s", "#d55e00")}



def _pyplot():
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
    pyplot = _pyplot()
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
    pyplot = _pyplot()
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


class ReplayPlot:
    """A job's ``--plot PATH``: collect its panes during the run, draw both figures after.

    Give :attr:`panes_path` to ``WritePanes(..., copy_to=...)``; after the run,
    :meth:`draw` writes the pane diagram to ``PATH`` and throughput and watermark lag to
    ``PATH`` with ``-throughput`` before its extension, and returns both paths.
    """

    def __init__(self, path: str, steps: Sequence[ReplayStep], *, elements: Elements,
                 window_fn: WindowFn, combine_fn: CombineFn, tick_seconds: float,
                 title: str, value_label: str = "value",
                 late_firings_per_element: bool = False) -> None:
        import os
        import tempfile

        if not isinstance(path, str) or not path:
            raise ValueError(f"plot path must be a non-empty file name, got {path!r}")
        self.path = path
        self._steps = list(steps)
        self._elements, self._window_fn, self._combine_fn = elements, window_fn, combine_fn
        self._tick_seconds, self._title, self._value_label = tick_seconds, title, value_label
        self._late_firings_per_element = late_firings_per_element
        self._directory = tempfile.mkdtemp(prefix="pane-plot-")
        #: Where the run writes a copy of its described panes (JSON lines).
        self.panes_path = os.path.join(self._directory, "panes.jsonl")

    def draw(self) -> List[str]:
        """Read the run's panes, draw both figures, remove the pane copy; return the paths."""
        import json
        import os
        import shutil

        panes = []
        if os.path.exists(self.panes_path):
            with open(self.panes_path, encoding="utf-8") as handle:
                panes = [json.loads(line) for line in handle if line.strip()]
        shutil.rmtree(self._directory, ignore_errors=True)
        directory = os.path.dirname(self.path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        diagram = pane_diagram(self._steps, panes, elements=self._elements,
                               window_fn=self._window_fn, combine_fn=self._combine_fn,
                               tick_seconds=self._tick_seconds,
                               late_firings_per_element=self._late_firings_per_element)
        throughput = companion_path(self.path, "throughput")
        return [draw_pane_diagram(diagram, self.path, title=self._title,
                                  value_label=self._value_label),
                draw_throughput(replay_batches(self._steps), throughput, title=self._title)]


def replay_steps(args: Any, kind: str) -> List[ReplayStep]:
    """The replay plan a job's options describe (``--source generator`` or ``replay``)."""
    from pipelines.generator import generate
    from pipelines.replay import plan_replay
    from pipelines.sources import read_replay_records

    if args.source == "generator":
        records = generate(kind, args.events, args.seed)
    elif args.source == "replay":
        records = read_replay_records(args.input)
    else:
        raise ValueError(f"--plot draws a replayed stream, not --source {args.source}")
    return plan_replay(records, tick_seconds=args.tick_seconds,
                       watermark_lag_seconds=args.watermark_lag_seconds)


def job_plot(args: Any, *, kind: str, event_type: type,
             pairs: Callable[[Any], Iterable[Tuple[Any, Any]]], window_fn: WindowFn,
             combine_fn: CombineFn, title: str, value_label: str) -> Optional[ReplayPlot]:
    """The :class:`ReplayPlot` a job's ``--plot`` asks for, or None without ``--plot``.

    ``pairs(event)`` gives the job's ``(key, value)`` inputs to its aggregation (none for an
    event it filters out); ``window_fn`` and ``combine_fn`` are its *where* and *what*.
    """
    if not getattr(args, "plot", None):
        return None
    return ReplayPlot(args.plot, replay_steps(args, kind),
                      elements=typed_elements(event_type, pairs), window_fn=window_fn,
                      combine_fn=combine_fn, tick_seconds=args.tick_seconds, title=title,
                      value_label=value_label,
                      # The jobs' when (late_and_early_when): a LATE pane per late element.
                      late_firings_per_element=args.allowed_lateness > 0)


def report_pictures(job: str, args: Any, pipeline: Any, plot: Optional[ReplayPlot],
                    run: Callable[[], Any]) -> Any:
    """A job's pictures around its run: ``--graph`` before (the graph needs no run), then
    ``run()``, then ``--plot``; each file written is named on stderr. Returns ``run()``'s result.
    """
    import sys

    if getattr(args, "graph", None):
        from runners.spark.graph import write_pipeline_graph

        files = write_pipeline_graph(pipeline, args.graph, args.runner, pipeline.options)
        print(f"{job}: pipeline graph: {', '.join(files)}", file=sys.stderr, flush=True)
    result = run()
    if plot is not None:
        print(f"{job}: pictures: {', '.join(plot.draw())}", file=sys.stderr, flush=True)
    return result
