"""Count-based windows: a window closes after a number of tuples, per key.

Tumbling, ``CountWindow(size)``: every ``size`` tuples of a key form one window; the
window fires when its ``size``-th tuple arrives and evicts everything.

Sliding, ``CountWindow(size, slide=s)``: the buffer holds the last ``size`` tuples; it
fires whenever it is full, i.e. at the ``size``-th tuple and then every ``s`` tuples,
and evicts the oldest ``s``. Consecutive windows share ``size - s`` tuples; every window
the trigger fires holds exactly ``size`` tuples. ``slide == size`` is the tumbling case.

Tuples are counted in event-time order (see :mod:`transforms.window_policies.buffer`).
End of input: if tuples arrived since the last firing, the buffer is emitted once more
with ``reason="end_of_input"`` and ``complete=False`` (for a sliding window it then also
holds the retained ``size - s`` older tuples, as a sliding window would); nothing is
dropped, and no window repeats tuples without a new one.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     windows = (p
...                | beam.Create([("a", n) for n in range(5)])
...                | beam.Map(lambda kv: beam.window.TimestampedValue(kv, kv[1]))
...                | CountWindow(2)
...                | beam.Map(lambda w: (w.value, w.reason)))
...     _ = assert_that(windows, equal_to([((0, 1), "count"), ((2, 3), "count"),
...                                        ((4,), "end_of_input")]))
"""

from __future__ import annotations

from typing import Any, Optional

import apache_beam as beam

from transforms.window_policies.buffer import (
    COUNT,
    ApplyWindowPolicy,
    Item,
    WindowBuffer,
    WindowPolicy,
)

__all__ = ["CountWindow"]


def _require_count(name: str, value: Any, upper: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r} must be an int number of tuples, e.g. {name}=3")
    if value < 1 or (upper is not None and value > upper):
        allowed = ">= 1" if upper is None else f"between 1 and size={upper}"
        raise ValueError(f"{name}={value} must be {allowed}")
    return value


class CountPolicy(WindowPolicy):
    """Fires when the buffer holds ``size`` tuples; then evicts the oldest ``slide``."""

    def __init__(self, size: int, slide: int) -> None:
        self.size = size
        self.slide = slide

    def admit(self, buffer: WindowBuffer, item: Item) -> None:
        buffer.append(item)
        if len(buffer.items) == self.size:
            buffer.close(COUNT, evict=self.slide)


class CountWindow(beam.PTransform):
    """Count-based tumbling (``slide=None``) or sliding windows over keyed tuples.

    Args:
      size: tuples per window (>= 1).
      slide: for a sliding window, the number of new tuples between firings
        (1 <= slide <= size); None means tumbling (``slide = size``).
      combine_fn: None to emit each window's elements, or a CombineFn (or callable) to
        emit their aggregate in :attr:`PolicyWindow.value`.
    """

    def __init__(self, size: int, slide: Optional[int] = None, combine_fn: Any = None,
                 label: Optional[str] = None) -> None:
        super().__init__(label)
        self.size = _require_count("size", size)
        self.slide = size if slide is None else _require_count("slide", slide, upper=size)
        self._apply = ApplyWindowPolicy(CountPolicy(self.size, self.slide), combine_fn)

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return keyed | "CountPolicy" >> self._apply
