"""The SparkRunner's per-batch streaming report, read back: progress and figures of a live run.

``--streaming_report FILE`` makes the SparkRunner's streaming loop append one JSON object per
micro-batch to FILE (see :mod:`runners.spark.streaming.loop` for every field). This module
reads it while the job writes it (:class:`ReportTail`: only complete lines, from where it
stopped) and turns each line into a :class:`BatchReport`: the batch number, when it ended,
how many elements entered the keyed steps and at what rate, how long it took, and the
watermark of the job's last keyed step with its lag behind the batch clock.

Example:

>>> line = ('{"batch": 3, "time": 100.5, "clock": 100.0, "input_elements": 40, "rate": 39.5, '
...         '"millis": 120, "watermark_lag_seconds": 2.5}')
>>> report = parse_report_line(line)
>>> report.batch, report.rate, report.watermark, report.lag, report.watermark_age
(3, 39.5, 97.5, 2.5, 3.0)
"""

from __future__ import annotations

import json
import os
from typing import List, NamedTuple, Optional


class BatchReport(NamedTuple):
    """One micro-batch: ``time`` and ``clock`` in seconds since the epoch (wall time at the end
    of the batch, and the batch's processing time); ``watermark`` is the last keyed step's
    output watermark (``clock - lag``), None while it is at either end of time."""

    batch: int
    time: float
    clock: float
    input_elements: int
    rate: float
    millis: int
    watermark: Optional[float]
    lag: Optional[float]

    @property
    def watermark_age(self) -> Optional[float]:
        """Wall time at the end of the batch minus the watermark (None while unknown).

        The report's ``lag`` is measured from the batch's clock, taken when the batch starts;
        records that arrived while the batch read them can carry later event times, so that
        lag may be negative. Against the batch's end it is not (events are not from the
        future), which is what a live run's progress line and figure show.
        """
        return None if self.watermark is None else self.time - self.watermark


def parse_report_line(line: str) -> Optional[BatchReport]:
    """A :class:`BatchReport` from one report line; None for a blank or unreadable line."""
    try:
        entry = json.loads(line)
        lag = entry.get("watermark_lag_seconds")
        lag = None if lag is None else float(lag)
        clock = float(entry["clock"])
        return BatchReport(int(entry["batch"]), float(entry["time"]), clock,
                           int(entry.get("input_elements", 0)), float(entry.get("rate", 0.0)),
                           int(entry.get("millis", 0)), None if lag is None else clock - lag, lag)
    except (ValueError, KeyError, TypeError):
        return None


def read_report(path: str) -> List[BatchReport]:
    """Every batch in the report file at ``path`` (none if it does not exist yet)."""
    tail = ReportTail(path)
    return tail.read()


class ReportTail:
    """Reads a report file as it grows: each :meth:`read` returns the batches added since."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""

    def read(self) -> List[BatchReport]:
        """The complete lines written since the last call, parsed (a torn last line waits)."""
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as handle:
            handle.seek(self._offset)
            text = handle.read()
            self._offset = handle.tell()
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()  # "" after a complete last line
        return [report for report in map(parse_report_line, lines) if report is not None]


__all__ = ["BatchReport", "ReportTail", "parse_report_line", "read_report"]
