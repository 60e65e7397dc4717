"""Splitting and merging: the lecture's 1:N routing and M:1 merging processing elements.

* :class:`SplitBy` routes each element to the *first* named output whose predicate holds,
  and every element that matches none to a default output, so nothing is dropped.
* :class:`Merge` flattens several PCollections into one.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     split = p | beam.Create([1, 5, 50]) | SplitBy(small=lambda n: n < 10)
...     _ = assert_that(split.small, equal_to([1, 5]), label="small")
...     _ = assert_that(split.other, equal_to([50]), label="other")
...     merged = (split.small, split.other) | Merge()
...     _ = assert_that(merged, equal_to([1, 5, 50]), label="merged")
"""

from __future__ import annotations

import keyword
from typing import Any, Callable, Dict, Mapping, Optional

import apache_beam as beam
from apache_beam import pvalue

__all__ = ["SplitBy", "Merge"]

# Attribute names an outputs tuple already has; an output named so would be unreachable
# as an attribute.
_RESERVED_NAMES = frozenset(name for name in dir(pvalue.DoOutputsTuple)) | {
    "pipeline",
    "producer",
}


def _check_output_name(name: Any, role: str) -> None:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"{role} name {name!r} must be a Python identifier, so that it can be read as an "
            "attribute of the result"
        )
    if name.startswith("_") or name in _RESERVED_NAMES:
        raise ValueError(
            f"{role} name {name!r} is reserved by Beam's outputs tuple or private; rename it"
        )


class _RouteFn(beam.DoFn):
    def __init__(self, predicates: Dict[str, Callable[[Any], bool]]) -> None:
        self._predicates = list(predicates.items())

    def process(self, element):
        for name, predicate in self._predicates:
            try:
                matches = predicate(element)
            except Exception as error:
                # Re-raised with the output's name: otherwise the failure names only a lambda.
                raise RuntimeError(
                    f"SplitBy predicate {name!r} raised {type(error).__name__}: {error} "
                    f"on element {element!r}"
                ) from error
            if matches:
                yield pvalue.TaggedOutput(name, element)
                return
        yield element  # the main output is the default one


class SplitBy(beam.PTransform):
    """Route each element to the first named output whose predicate is true.

    Predicates are tried in order (keyword order, or the mapping's order); an element
    matching none goes to the ``default`` output (``"other"``). The result is Beam's outputs
    tuple: read outputs as attributes (``split.big``) or items (``split["big"]``); iterating
    it yields the default output first, then the named ones in order.

    >>> SplitBy({"even": lambda n: n % 2 == 0}, default="odd")  # doctest: +ELLIPSIS
    <...SplitBy...>
    """

    def __init__(
        self,
        predicates: Optional[Mapping[str, Callable[[Any], bool]]] = None,
        /,
        *,
        default: str = "other",
        label: Optional[str] = None,
        **named_predicates: Callable[[Any], bool],
    ) -> None:
        super().__init__(label)
        if predicates is not None and named_predicates:
            raise TypeError("give predicates either as one mapping or as keywords, not both")
        if predicates is not None and not isinstance(predicates, Mapping):
            raise TypeError(f"predicates must be a mapping name -> function, got {predicates!r}")
        chosen = dict(predicates if predicates is not None else named_predicates)
        if not chosen:
            raise ValueError("SplitBy needs at least one named predicate, e.g. big=lambda x: x > 9")
        _check_output_name(default, "default output")
        for name, predicate in chosen.items():
            _check_output_name(name, "output")
            if name == default:
                raise ValueError(
                    f"output {name!r} has the same name as the default output; pass "
                    "default=<another name>"
                )
            if not callable(predicate):
                raise TypeError(f"predicate for output {name!r} is not callable: {predicate!r}")
        self._predicates = chosen
        self._default = default

    def expand(self, pcoll):
        return pcoll | "Route" >> beam.ParDo(_RouteFn(self._predicates)).with_outputs(
            *self._predicates, main=self._default
        )


class Merge(beam.PTransform):
    """Flatten a tuple, list or dict (its values) of PCollections into one PCollection.

    All inputs must share one WindowFn: elements keep their timestamps and windows, and a
    merge of differently windowed inputs would have no single windowing; re-window first.
    Raises ValueError for no inputs.
    """

    def __ror__(self, left, label=None):
        # Beam reads a list on the left of | as data to Create; a list of PCollections is
        # meant as inputs, exactly as a tuple is.
        if isinstance(left, list) and all(isinstance(each, pvalue.PValue) for each in left):
            left = tuple(left)
        return super().__ror__(left, label)

    def expand(self, pcolls):
        if isinstance(pcolls, pvalue.PValue):
            raise TypeError(
                f"Merge takes a tuple, list or dict of PCollections, got the single {pcolls}; "
                "write (first, second) | Merge()"
            )
        inputs = list(pcolls.values()) if isinstance(pcolls, dict) else list(pcolls)
        if not inputs:
            raise ValueError("Merge needs at least one PCollection to merge")
        for each in inputs:
            if not isinstance(each, pvalue.PCollection):
                raise TypeError(f"Merge merges PCollections, got {each!r}")
        windowfn = inputs[0].windowing.windowfn
        for each in inputs[1:]:
            if each.windowing.windowfn != windowfn:
                raise ValueError(
                    f"Merge inputs have different windows ({windowfn!r} and "
                    f"{each.windowing.windowfn!r}); apply the same WindowInto to every input"
                )
        return tuple(inputs) | "Flatten" >> beam.Flatten()
