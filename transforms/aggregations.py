"""The *what*: aggregations as CombineFns, per key and over a whole PCollection.

Every aggregation here is a :class:`~apache_beam.transforms.core.CombineFn`, so a runner can
*lift* it: compute partial accumulators before the shuffle (``add_input``), merge them after
it (``merge_accumulators``) and extract the result once per pane (``extract_output``). This
is the lecture's "early volume reduction": only one small accumulator per key and bundle
crosses the network, not every element.

What an aggregation returns for a window with no elements (only ever asked for by
``CombineGlobally`` in the global window, which emits a value for empty input):

========================  ==========================  ================================
aggregation               CombineFn                   empty input
========================  ==========================  ================================
sum                       :class:`SumFn`              ``0``
count                     ``CountCombineFn``          ``0``
mean                      ``MeanCombineFn``           ``nan`` (Beam's choice)
min / max                 :class:`MinFn` / MaxFn      ``None`` (there is no least value)
top n                     ``TopCombineFn``            ``[]``
========================  ==========================  ================================

The ``*Globally`` composites emit that empty-input default only when the input uses Beam's
default windowing (the global window, default trigger). In any other windowing an empty
window has no pane at all, so they combine ``without_defaults()``; the choice is made in
``expand()`` from the input's windowing, so the same composite works before and after a
``WindowInto``.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     scores = p | beam.Create([("red", 3), ("blue", 2), ("red", 4)])
...     _ = assert_that(scores | SumPerKey(), equal_to([("red", 7), ("blue", 2)]))
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Tuple

import apache_beam as beam
from apache_beam.transforms.combiners import CountCombineFn, MeanCombineFn, TopCombineFn

__all__ = [
    "SumFn",
    "MinFn",
    "MaxFn",
    "CountCombineFn",
    "MeanCombineFn",
    "TopCombineFn",
    "SumPerKey",
    "CountPerKey",
    "MeanPerKey",
    "MinPerKey",
    "MaxPerKey",
    "TopPerKey",
    "SumGlobally",
    "CountGlobally",
    "MeanGlobally",
    "MinGlobally",
    "MaxGlobally",
    "TopGlobally",
]


class SumFn(beam.CombineFn):
    """Sum of numeric inputs; ``0`` for no inputs.

    The accumulator is the running sum itself, so it is already as compact as it gets.

    >>> SumFn().apply([1, 2, 3.5])
    6.5
    """

    #: Sums of numbers can be retracted (negated and added downstream): see
    #: ``triggers.validation.is_retractable``. Min and max are left undeclared because
    #: with a ``key`` they may return values that cannot be negated.
    retractable = True

    def create_accumulator(self) -> Any:
        return 0

    def add_input(self, accumulator: Any, element: Any) -> Any:
        return accumulator + element

    def add_inputs(self, accumulator: Any, elements: Iterable[Any]) -> Any:
        return accumulator + sum(elements)

    def merge_accumulators(self, accumulators: Iterable[Any]) -> Any:
        return sum(accumulators)

    def extract_output(self, accumulator: Any) -> Any:
        return accumulator


class _ExtremeFn(beam.CombineFn):
    """The least (or greatest) input under ``key``; ``None`` for no inputs.

    The accumulator is ``()`` (nothing seen yet) or ``(value,)``: a tuple rather than a
    sentinel object, because accumulators are encoded between lifted stages and a sentinel
    would lose its identity on the way.
    """

    # Chooses the preferred of two values under the key: min or max.
    _choose: Callable[..., Any] = staticmethod(min)

    def __init__(self, key: Optional[Callable[[Any], Any]] = None) -> None:
        super().__init__()
        if key is not None and not callable(key):
            raise TypeError(f"key must be a callable or None, got {key!r}")
        self._key = key

    def _better(self, first: Any, second: Any) -> Any:
        if self._key is None:
            return self._choose(first, second)
        return self._choose(first, second, key=self._key)

    def create_accumulator(self) -> Tuple[Any, ...]:
        return ()

    def add_input(self, accumulator: Tuple[Any, ...], element: Any) -> Tuple[Any, ...]:
        if not accumulator:
            return (element,)
        return (self._better(accumulator[0], element),)

    def merge_accumulators(self, accumulators: Iterable[Tuple[Any, ...]]) -> Tuple[Any, ...]:
        merged: Tuple[Any, ...] = ()
        for accumulator in accumulators:
            if accumulator:
                merged = self.add_input(merged, accumulator[0])
        return merged

    def extract_output(self, accumulator: Tuple[Any, ...]) -> Any:
        return accumulator[0] if accumulator else None


class MinFn(_ExtremeFn):
    """Least input (optionally under ``key``); ``None`` for no inputs.

    >>> MinFn().apply([3, 1, 2]), MinFn().apply([])
    (1, None)
    """

    _choose = staticmethod(min)


class MaxFn(_ExtremeFn):
    """Greatest input (optionally under ``key``); ``None`` for no inputs.

    >>> MaxFn(key=len).apply(["ab", "abc", "a"])
    'abc'
    """

    _choose = staticmethod(max)


def _top_fn(n: int, key: Optional[Callable[[Any], Any]], reverse: bool) -> TopCombineFn:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int >= 1 (how many elements to keep), got {n!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1 (how many elements to keep), got {n}")
    if key is not None and not callable(key):
        raise TypeError(f"key must be a callable or None, got {key!r}")
    return TopCombineFn(n, key=key, reverse=reverse)


class _PerKey(beam.PTransform):
    """Combine the values of each key (and window) of ``(key, value)`` pairs with a CombineFn."""

    def __init__(self, combine_fn: beam.CombineFn, label: Optional[str] = None) -> None:
        super().__init__(label)
        self._combine_fn = combine_fn

    def expand(self, pcoll):
        return pcoll | "CombinePerKey" >> beam.CombinePerKey(self._combine_fn)


class _Globally(beam.PTransform):
    """Combine all elements of each window with a CombineFn.

    Only Beam's default windowing gets the empty-input default (a pane for an empty
    PCollection); in any other windowing an empty window emits nothing, since there is no
    window to emit it in, and Beam refuses defaults there.
    """

    def __init__(self, combine_fn: beam.CombineFn, label: Optional[str] = None) -> None:
        super().__init__(label)
        self._combine_fn = combine_fn

    def expand(self, pcoll):
        combine = beam.CombineGlobally(self._combine_fn)
        if not pcoll.windowing.is_default():
            # A triggered global window or any other WindowFn: defaults would be wrong
            # (a side input fires once) or rejected by Beam (non-global windows).
            combine = combine.without_defaults()
        return pcoll | "CombineGlobally" >> combine


class SumPerKey(_PerKey):
    """``(key, number)`` -> ``(key, sum)`` per key and window."""

    def __init__(self, label: Optional[str] = None) -> None:
        super().__init__(SumFn(), label)


class CountPerKey(_PerKey):
    """``(key, anything)`` -> ``(key, number of elements)`` per key and window."""

    def __init__(self, label: Optional[str] = None) -> None:
        super().__init__(CountCombineFn(), label)


class MeanPerKey(_PerKey):
    """``(key, number)`` -> ``(key, arithmetic mean as float)`` per key and window."""

    def __init__(self, label: Optional[str] = None) -> None:
        super().__init__(MeanCombineFn(), label)


class MinPerKey(_PerKey):
    """``(key, value)`` -> ``(key, least value)`` per key and window (optionally by ``key``)."""

    def __init__(
        self, key: Optional[Callable[[Any], Any]] = None, label: Optional[str] = None
    ) -> None:
        super().__init__(MinFn(key), label)


class MaxPerKey(_PerKey):
    """``(key, value)`` -> ``(key, greatest value)`` per key and window (optionally by ``key``)."""

    def __init__(
        self, key: Optional[Callable[[Any], Any]] = None, label: Optional[str] = None
    ) -> None:
        super().__init__(MaxFn(key), label)


class TopPerKey(_PerKey):
    """``(key, value)`` -> ``(key, [n greatest values, greatest first])`` per key and window.

    ``key`` ranks values (like ``sorted``'s key); ``reverse=True`` keeps the n smallest,
    smallest first. Raises ValueError unless ``n >= 1``.
    """

    def __init__(
        self,
        n: int,
        key: Optional[Callable[[Any], Any]] = None,
        reverse: bool = False,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(_top_fn(n, key, reverse), label)


class SumGlobally(_Globally):
    """Sum of all numbers per window; ``0`` for an empty PCollection in the global window."""

    def __init__(self, label: Optional[str] = None) -> None:
        super().__init__(SumFn(), label)


class CountGlobally(_Globally):
    """Number of elements per window; ``0`` for an empty PCollection in the global window."""

    def __init__(self, label: Optional[str] = None) -> None:
        super().__init__(CountCombineFn(), label)


class MeanGlobally(_Globally):
    """Mean of all numbers per window; ``nan`` for an empty PCollection in the global window."""

    def __init__(self, label: Optional[str] = None) -> None:
        super().__init__(MeanCombineFn(), label)


class MinGlobally(_Globally):
    """Least element per window; ``None`` for an empty PCollection in the global window."""

    def __init__(
        self, key: Optional[Callable[[Any], Any]] = None, label: Optional[str] = None
    ) -> None:
        super().__init__(MinFn(key), label)


class MaxGlobally(_Globally):
    """Greatest element per window; ``None`` for an empty PCollection in the global window."""

    def __init__(
        self, key: Optional[Callable[[Any], Any]] = None, label: Optional[str] = None
    ) -> None:
        super().__init__(MaxFn(key), label)


class TopGlobally(_Globally):
    """The n greatest elements per window, greatest first; ``[]`` for an empty global window.

    ``key`` ranks elements; ``reverse=True`` keeps the n smallest. Raises ValueError unless
    ``n >= 1``.
    """

    def __init__(
        self,
        n: int,
        key: Optional[Callable[[Any], Any]] = None,
        reverse: bool = False,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(_top_fn(n, key, reverse), label)
