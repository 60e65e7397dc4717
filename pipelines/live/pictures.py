"""The pictures of a live run (``make run``): its pane diagram and its throughput and lag.

A replayed run infers when each pane fired (:mod:`pipelines.pane_diagram`); a live run
*observes* it: a pane is drawn when the leaderboard's consumer read it from the output topic
(at most a poll after the job wrote it). The inputs are the events the producer sent (at
their send time, and event time), the watermark is the job's, batch by batch, from its
``--streaming_report``. An input is drawn as late when its event time was already behind
that watermark when it was sent.

Example (the data behind the figures):

>>> from pipelines.generator import GeneratedRecord
>>> from pipelines.live.report import BatchReport
>>> reports = [BatchReport(0, 101.0, 100.8, 5, 5.0, 80, 95.0, 5.8),
...            BatchReport(1, 102.0, 101.8, 3, 3.0, 70, 99.0, 2.8)]
>>> sent = [(101.5, GeneratedRecord(96.0, 101.5, {"team": "red", "score": 2})),
...         (101.6, GeneratedRecord(90.0, 101.6, {"team": "red", "score": 1}))]
>>> panes = [(102.5, {"key": "red", "value": 3, "window": {"start": 90.0, "end": 100.0},
...                   "pane": {"timing": "ON_TIME", "index": 0}})]
>>> diagram = live_pane_diagram(sent, panes, reports, started=100.0)
>>> [(round(p.arrival, 3), p.late) for p in diagram.inputs], diagram.watermark
([(1.5, False), (1.6, True)], [(1.0, 95.0), (2.0, 99.0)])
>>> [(m.key, m.timing, m.fire_time) for m in diagram.panes]
[('red', 'ON_TIME', 2.5)]
>>> [(b.time, b.events, b.watermark) for b in report_batches(reports, started=100.0)]
[(1.0, 5, 95.0), (2.0, 3, 99.0)]
"""

from __future__ import annotations

import bisect
from typing import Any, List, Sequence, Tuple

from pictures.diagram import BatchRecord, InputPoint, PaneDiagram, PaneMark
from pipelines.generator import GeneratedRecord
from pipelines.live.report import BatchReport


def live_pane_diagram(sent: Sequence[Tuple[float, GeneratedRecord]],
                      panes: Sequence[Tuple[float, dict]], reports: Sequence[BatchReport],
                      *, started: float) -> PaneDiagram:
    """The pane diagram's marks of a live run; times are seconds since ``started``."""
    marks = [(report.time - started, report.watermark) for report in reports
             if report.watermark is not None]
    times = [time for time, _ in marks]

    def watermark_at(moment: float):
        position = bisect.bisect_right(times, moment) - 1
        return marks[position][1] if position >= 0 else None

    inputs = []
    for sent_at, record in sent:
        arrival = sent_at - started
        watermark = watermark_at(arrival)
        inputs.append(InputPoint(arrival, record.event_time,
                                 watermark is not None and record.event_time < watermark))
    described = [(seen - started, pane) for seen, pane in panes
                 if isinstance(pane.get("window"), dict) and "start" in pane["window"]]
    pane_marks = [PaneMark(pane["key"], pane["value"],
                           (pane["window"]["start"], pane["window"]["end"]),
                           pane["pane"]["timing"], pane["pane"]["index"], seen, None, True)
                  for seen, pane in described]
    ends = [point.arrival for point in inputs] + [mark.fire_time for mark in pane_marks] + times
    return PaneDiagram(inputs, marks, pane_marks, sorted({mark.window for mark in pane_marks}),
                       sorted({mark.key for mark in pane_marks}, key=str),
                       max(ends) if ends else 0.0)


def report_batches(reports: Sequence[BatchReport], *, started: float) -> List[BatchRecord]:
    """One :class:`BatchRecord` per batch: elements in, watermark, and the wall time at the
    batch's end as the newest time (event time follows the wall clock in a live run, so the
    figure's lag is :attr:`BatchReport.watermark_age`)."""
    return [BatchRecord(report.time - started, report.input_elements, report.watermark,
                        report.time if report.watermark is not None else None)
            for report in reports]


def draw_live_pictures(path: str, producer: Any, panes: Sequence[Tuple[float, dict]],
                       reports: Sequence[BatchReport], started: float) -> List[str]:
    """Draw both figures of a live run (``path`` and ``path`` + ``-throughput``)."""
    import os

    from pictures.plots import companion_path, draw_pane_diagram, draw_throughput

    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    diagram = live_pane_diagram(producer.sent, panes, reports, started=started)
    return [
        draw_pane_diagram(diagram, path, title="make run: team_scores on Kafka and Spark",
                          value_label="sum", annotate=len(diagram.panes) <= 60,
                          fire_time_label="(as read from the output topic)",
                          xlabel="processing time (s since the run began)"),
        draw_throughput(report_batches(reports, started=started),
                        companion_path(path, "throughput"), title="make run",
                        events_label="elements into keyed steps per batch",
                        lag_label="watermark lag (s)\nwall time at batch end - watermark"),
    ]


__all__ = ["draw_live_pictures", "live_pane_diagram", "report_batches"]
