"""Pane records compared across runners, timestamps in whole milliseconds."""

from __future__ import annotations

import math


def to_millis(record: dict) -> dict:
    """Pane timestamps to whole milliseconds: the end of a window is its end minus one unit of
    the runner's time precision (a microsecond on the DirectRunner in streaming mode, a
    millisecond through the portable runners), so only milliseconds are compared.

    >>> to_millis({"timestamp": 59.999999})["timestamp"]
    59.999
    """
    if record["timestamp"] is not None:
        record = dict(record, timestamp=math.floor(round(record["timestamp"] * 1e6) / 1e3) / 1e3)
    return record
