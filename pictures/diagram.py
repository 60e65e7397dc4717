"""What the pictures draw, as plain data: a pane diagram's inputs, watermark and panes, and
the batches of a run. The jobs and the demo compute them (:mod:`pipelines.pane_diagram`,
:mod:`pipelines.live.pictures`); :mod:`pictures.plots` draws them.

>>> BatchRecord(time=0.0, events=3, watermark=90.0, newest_event_time=100.0).events
3
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple


class InputPoint(NamedTuple):
    """An input element: its arrival (s since the replay began), event time, and lateness."""

    arrival: float
    event_time: float
    late: bool


class PaneMark(NamedTuple):
    """A pane placed in the diagram; ``fire_time`` is None when no tick matches its value."""

    key: Any
    value: Any
    window: Tuple[float, float]
    timing: str
    index: int
    fire_time: Optional[float]
    fire_time_latest: Optional[float]
    exact: bool


class PaneDiagram(NamedTuple):
    """Everything the pane diagram draws: inputs, watermark steps, panes, windows, keys."""

    inputs: List[InputPoint]
    watermark: List[Tuple[float, float]]
    panes: List[PaneMark]
    windows: List[Tuple[float, float]]
    keys: List[Any]
    end_time: float


class BatchRecord(NamedTuple):
    """One (micro-)batch of a run: when, how many events, the watermark after it, and the
    newest event time seen so far (None when unknown)."""

    time: float
    events: int
    watermark: Optional[float]
    newest_event_time: Optional[float]


def watermark_lag(batches: Sequence[BatchRecord]) -> List[Tuple[float, Optional[float]]]:
    """(time, newest event time - watermark) per batch; None where either is unknown.

    >>> watermark_lag([BatchRecord(0.0, 2, 90.0, 100.0), BatchRecord(1.0, 0, None, None)])
    [(0.0, 10.0), (1.0, None)]
    """
    return [(batch.time, None if batch.watermark is None or batch.newest_event_time is None
             else batch.newest_event_time - batch.watermark) for batch in batches]
