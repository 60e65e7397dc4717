"""A job's pictures: ``--graph`` (the runner's fused stages) before its run, ``--plot`` (the
pane diagram and throughput of a replayed run) after it. The job side: it knows the replay
and collects the run's panes; :mod:`pictures.plots` draws.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from apache_beam.transforms.core import CombineFn
from apache_beam.transforms.window import WindowFn

from pictures.plots import companion_path, draw_pane_diagram, draw_throughput
from pipelines.pane_diagram import Elements, pane_diagram, replay_batches, typed_elements
from pipelines.replay import ReplayStep


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
