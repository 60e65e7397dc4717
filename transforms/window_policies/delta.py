"""Delta-based windows: a window closes when an attribute moves too far from its start.

``DeltaWindow(attribute, threshold)``: per key, the first tuple of a window fixes the
reference value ``attribute(first)``. A later tuple ``x`` with
``abs(attribute(x) - attribute(first)) > threshold`` closes the window *without* ``x``
(``reason="delta"``) and opens the next window, of which ``x`` is the first tuple and the
new reference. A move of exactly ``threshold`` stays in the window.

``attribute`` is a field name (read as an attribute, or as a key of a dict value) or a
function of the value; it must give a number. Tuples are compared in event-time order
(see :mod:`transforms.window_policies.buffer`). End of input: the open window is emitted
with ``reason="end_of_input"`` and ``complete=False``.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> prices = [10, 11, 13, 12, 20]
>>> with beam.Pipeline() as p:
...     windows = (p
...                | beam.Create(list(enumerate(prices)))
...                | beam.MapTuple(lambda n, price: beam.window.TimestampedValue(
...                    ("ibm", {"price": price}), n))
...                | DeltaWindow("price", threshold=2)
...                | beam.Map(lambda w: ([v["price"] for v in w.value], w.reason)))
...     _ = assert_that(windows, equal_to([([10, 11], "delta"), ([13, 12], "delta"),
...                                        ([20], "end_of_input")]))
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Callable, Optional, Union

import apache_beam as beam

from transforms.window_policies.buffer import (
    DELTA,
    ApplyWindowPolicy,
    Item,
    WindowBuffer,
    WindowPolicy,
)

__all__ = ["DeltaWindow"]


def _attribute_reader(attribute: Union[str, Callable[[Any], Real]]) -> Callable[[Any], Real]:
    if callable(attribute):
        return attribute
    if isinstance(attribute, str) and attribute:
        def read(value: Any) -> Any:
            if isinstance(value, dict):
                return value[attribute]
            return getattr(value, attribute)
        return read
    raise TypeError(
        f"attribute={attribute!r} must be a field name (str) or a function of the value, "
        "e.g. DeltaWindow('price', threshold=2) or DeltaWindow(lambda v: v.price, 2)"
    )


class DeltaPolicy(WindowPolicy):
    """Closes the window before a tuple whose attribute moved more than the threshold."""

    def __init__(self, attribute: Union[str, Callable[[Any], Real]], threshold: float) -> None:
        self.attribute = attribute
        self.threshold = threshold
        self._read = _attribute_reader(attribute)

    def _measure(self, item: Item) -> float:
        measured = self._read(item.value)
        if isinstance(measured, bool) or not isinstance(measured, Real):
            raise TypeError(
                f"DeltaWindow attribute {self.attribute!r} gave {measured!r} for "
                f"{item.value!r}; it must give a number"
            )
        return measured

    def admit(self, buffer: WindowBuffer, item: Item) -> None:
        measured = self._measure(item)
        if buffer.items and abs(measured - self._measure(buffer.items[0])) > self.threshold:
            buffer.close(DELTA)
        buffer.append(item)


class DeltaWindow(beam.PTransform):
    """Delta-based windows over keyed tuples; the closing tuple opens the next window.

    Args:
      attribute: field name or function giving the number the delta is measured on.
      threshold: largest allowed absolute difference from the window's first tuple (> 0).
      combine_fn: None to emit each window's elements, or a CombineFn (or callable).
    """

    def __init__(self, attribute: Union[str, Callable[[Any], Real]], threshold: float,
                 combine_fn: Any = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        if isinstance(threshold, bool) or not isinstance(threshold, Real):
            raise TypeError(f"threshold={threshold!r} must be a number, e.g. threshold=2.5")
        if not threshold > 0 or not math.isfinite(threshold):
            raise ValueError(f"threshold={threshold} must be a finite number > 0")
        self._apply = ApplyWindowPolicy(DeltaPolicy(attribute, threshold), combine_fn)

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return keyed | "DeltaPolicy" >> self._apply
