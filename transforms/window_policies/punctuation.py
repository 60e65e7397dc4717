"""Punctuation-based windows: a special tuple closes the window.

``PunctuationWindow(is_punctuation, include_punctuation=False)``: per key, tuples are
collected until one for which ``is_punctuation(value)`` is true; that tuple closes the
window (``reason="punctuation"``). With ``include_punctuation=False`` (the default) the
punctuation is a marker only: it is in no window. With ``include_punctuation=True`` it is
the last element of the window it closes. A punctuation that finds the window empty
(e.g. two punctuations in a row) still closes it: an empty window (``size=0``,
timestamps None) is emitted, so every punctuation is visible downstream.

Tuples are seen in event-time order (see :mod:`transforms.window_policies.buffer`).
End of input: a non-empty open window is emitted with ``reason="end_of_input"`` and
``complete=False``.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     windows = (p
...                | beam.Create(list(enumerate(["x", "y", "|", "z"])))
...                | beam.MapTuple(lambda n, v: beam.window.TimestampedValue(("a", v), n))
...                | PunctuationWindow(lambda v: v == "|")
...                | beam.Map(lambda w: (w.value, w.reason)))
...     _ = assert_that(windows, equal_to([(("x", "y"), "punctuation"), (("z",), "end_of_input")]))
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import apache_beam as beam

from transforms.window_policies.buffer import (
    PUNCTUATION,
    ApplyWindowPolicy,
    Item,
    WindowBuffer,
    WindowPolicy,
)

__all__ = ["PunctuationWindow"]


class PunctuationPolicy(WindowPolicy):
    """Closes the window at each punctuation tuple, which it includes or leaves out."""

    def __init__(self, is_punctuation: Callable[[Any], bool], include_punctuation: bool) -> None:
        self.is_punctuation = is_punctuation
        self.include_punctuation = include_punctuation

    def admit(self, buffer: WindowBuffer, item: Item) -> None:
        if not self.is_punctuation(item.value):
            buffer.append(item)
            return
        if self.include_punctuation:
            buffer.append(item)
        buffer.close(PUNCTUATION)


class PunctuationWindow(beam.PTransform):
    """Punctuation-based windows over keyed tuples.

    Args:
      is_punctuation: predicate on the value; true marks a punctuation tuple.
      include_punctuation: whether the punctuation is the last element of the window it
        closes (True) or in no window (False, the default).
      combine_fn: None to emit each window's elements, or a CombineFn (or callable).
    """

    def __init__(self, is_punctuation: Callable[[Any], bool], include_punctuation: bool = False,
                 combine_fn: Any = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        if not callable(is_punctuation):
            raise TypeError(
                f"is_punctuation={is_punctuation!r} must be a predicate on the value, "
                "e.g. PunctuationWindow(lambda value: value == 'EOB')"
            )
        if not isinstance(include_punctuation, bool):
            raise TypeError(f"include_punctuation={include_punctuation!r} must be True or False")
        self._apply = ApplyWindowPolicy(
            PunctuationPolicy(is_punctuation, include_punctuation), combine_fn
        )

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return keyed | "PunctuationPolicy" >> self._apply
