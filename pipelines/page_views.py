"""Page views: views per page in sliding event-time windows, with failed loads split off.

The four questions, answered for the views:

* **What**: the number of (successful) views per page.
* **Where**: sliding event-time windows of ``--window_seconds`` starting every
  ``--period_seconds``: each view counts in ``window / period`` overlapping windows.
* **When**: early panes every ``--early_seconds`` of processing time, the on-time pane at
  the watermark, a late pane per late view within ``--allowed_lateness``.
* **How**: accumulating.

A page load *failed* when it reported an error (``ok`` false) or took longer than
``--slow_ms`` milliseconds (default 3000: users leave before that). Failed loads are routed
(``transforms.routing.SplitBy``) into an **alert stream**, written to
``<output>-alerts.jsonl`` (or printed as ``alerts: {...}``), and are not counted as views:
each view lands in exactly one of the two streams.

Run it::

    python -m pipelines.page_views
    python -m pipelines.page_views --slow_ms 2000 --output out/page_views
    python -m pipelines.generator --kind page_views --events 500 --output views.jsonl
    python -m pipelines.page_views --input views.jsonl --output out/page_views --runner SparkRunner

Example:

>>> failure_reason(PageView("/cart", "ann", 120, False, 0.0), slow_ms=3000)
'error'
>>> failure_reason(PageView("/cart", "ann", 4500, True, 0.0), slow_ms=3000)
'slow: 4500 ms > 3000 ms'
>>> failure_reason(PageView("/cart", "ann", 120, True, 0.0), slow_ms=3000) is None
True
"""

from __future__ import annotations

import logging
from typing import Dict, Optional, Sequence

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult

from pipelines.events import PageView
from pipelines.options import job_parser, parse_job_options, positive_int, positive_seconds
from pipelines.output import WriteDeadLetters, WritePanes, WriteRecords, run_to_completion
from pipelines.job_pictures import job_plot, report_pictures
from pipelines.sources import ReadEvents
from pipelines.team_scores import late_and_early_when
from transforms.aggregations import CountCombineFn
from transforms.routing import SplitBy
from transforms.windows import sliding_windows
from triggers.accumulation import How
from triggers.model import WindowedAggregation

#: Loads slower than this many milliseconds count as failed (and alert).
DEFAULT_SLOW_MS = 3000


def failure_reason(view: PageView, slow_ms: int) -> Optional[str]:
    """Why a page load failed (``"error"``, ``"slow: ..."``), or None if it did not."""
    if not view.ok:
        return "error"
    if view.load_ms > slow_ms:
        return f"slow: {view.load_ms} ms > {slow_ms} ms"
    return None


def _alert(view: PageView, slow_ms: int) -> dict:
    return {**view._asdict(), "reason": failure_reason(view, slow_ms)}


class PageViews(beam.PTransform):
    """Split failed page loads off as alerts; count the other views per page and window.

    Input: :class:`~pipelines.events.PageView` elements stamped with their event time.
    Output: a dict with ``"views"``, ``(page, count)`` panes, and ``"alerts"``, one dict
    per failed load: the view's fields plus ``reason``.
    """

    def __init__(
        self,
        window_seconds: float = 60.0,
        period_seconds: float = 15.0,
        early_seconds: float = 0.0,
        allowed_lateness: float = 0.0,
        slow_ms: int = DEFAULT_SLOW_MS,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(label)
        if isinstance(slow_ms, bool) or not isinstance(slow_ms, int) or slow_ms <= 0:
            raise ValueError(f"slow_ms={slow_ms!r} must be a positive whole number of milliseconds")
        self._slow_ms = slow_ms
        self._aggregation = WindowedAggregation(
            what=CountCombineFn(),
            where=sliding_windows(window_seconds, period_seconds),
            when=late_and_early_when(early_seconds, allowed_lateness),
            how=How.ACCUMULATING,
        )
        #: After application: the views dropped for lateness (DroppedElement records).
        self.dropped: Optional[beam.PCollection] = None

    def expand(self, views) -> Dict[str, beam.PCollection]:
        slow_ms = self._slow_ms
        split = views | "SplitOffFailedLoads" >> SplitBy(
            failed=lambda view: failure_reason(view, slow_ms) is not None, default="served")
        counts = (split.served
                  | "KeyByPage" >> beam.Map(lambda view: (view.page, 1))
                  | "CountPerPageAndWindow" >> self._aggregation)
        alerts = split.failed | "DescribeFailure" >> beam.Map(_alert, slow_ms)
        self.dropped = self._aggregation.dropped
        return {"views": counts, "alerts": alerts}


def run(argv: Optional[Sequence[str]] = None) -> PipelineResult:
    """Parse ``argv`` (default: the command line), run the job to completion, return its result."""
    parser = job_parser(
        "page_views",
        "Views per page in sliding event-time windows (early, on-time and late panes, "
        "accumulating); failed or slow page loads are split off into an alert stream.",
        window_seconds=60, early_seconds=20, allowed_lateness=120)
    parser.add_argument("--period_seconds", type=positive_seconds, default=15.0,
                        help="a new sliding window starts every this many seconds (default: 15)")
    parser.add_argument("--slow_ms", type=positive_int, default=DEFAULT_SLOW_MS,
                        help="loads slower than this many milliseconds are failures "
                        f"(default: {DEFAULT_SLOW_MS})")
    args, beam_options = parse_job_options(parser, argv)
    pipeline = beam.Pipeline(runner=args.runner, options=beam_options)
    try:
        events_reader = ReadEvents(
            PageView, kind="page_views", source=args.source, input=args.input,
            format=args.format, csv_columns=args.csv_columns, events=args.events, seed=args.seed,
            tick_seconds=args.tick_seconds, watermark_lag_seconds=args.watermark_lag_seconds)
        events = pipeline | "ReadEvents" >> events_reader
        page_views = PageViews(args.window_seconds, args.period_seconds, args.early_seconds,
                               args.allowed_lateness, args.slow_ms)
        results = events.parsed | "PageViews" >> page_views
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    slow_ms = args.slow_ms
    plot = job_plot(args, kind="page_views", event_type=PageView,
                    pairs=lambda view: [] if failure_reason(view, slow_ms) else [(view.page, 1)],
                    window_fn=sliding_windows(args.window_seconds, args.period_seconds),
                    combine_fn=CountCombineFn(), title="page_views", value_label="views")
    _ = results["views"] | "WriteViews" >> WritePanes(args.output, value_name="views",
                                                      copy_to=plot and plot.panes_path)
    _ = results["alerts"] | "WriteAlerts" >> WriteRecords(args.output, "alerts")
    _ = events.dead_letter | "WriteDeadLetters" >> WriteDeadLetters(args.output)
    _ = page_views.dropped | "WriteDropped" >> WriteRecords(args.output, "dropped")
    return report_pictures("page_views", args, pipeline, plot, lambda: run_to_completion(
        pipeline, "page_views", note=events_reader.description))


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.WARNING)
    run()
