"""The typed events the jobs read: one ``typing.NamedTuple`` per kind of stream.

Each event carries its *event time* as ``timestamp`` (float seconds since the epoch): when it
happened at the source. Edge adaptation (``transforms.parsing.ParseJson`` / ``ParseCsv``)
turns raw records into these tuples from their annotated fields and stamps each element's
Beam timestamp from ``timestamp``; everything downstream works in event time.

Example:

>>> event = GameEvent(user="ann", team="red", score=3, timestamp=1704110400.0)
>>> event.team, event.score
('red', 3)
>>> EVENT_TYPES["game"] is GameEvent
True
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Type


class GameEvent(NamedTuple):
    """A player scored ``score`` points for ``team`` at ``timestamp`` (Streaming 102's input)."""

    user: str
    team: str
    score: int
    timestamp: float


class PageView(NamedTuple):
    """A user loaded ``page``; ``load_ms`` is how long it took, ``ok`` whether it succeeded."""

    page: str
    user: str
    load_ms: int
    ok: bool
    timestamp: float


class SensorReading(NamedTuple):
    """``sensor`` measured ``value`` at ``timestamp``."""

    sensor: str
    value: float
    timestamp: float


#: Event type per stream kind, as named on the command line (``--kind`` of the generator).
EVENT_TYPES: Dict[str, Type[tuple]] = {
    "game": GameEvent,
    "page_views": PageView,
    "sensors": SensorReading,
}
