"""A lifted combine's first phase at the end of a chain of steps.

Beam lifts ``CombinePerKey`` into a per-bundle precombine (``PGBKCVOperation``: one
accumulator per window and key, flushed at the end of the bundle), the shuffle, and the
merge. The precombine's per-element path is a lookup of ``(window, key)`` in a table
(hashing the window: for an ``IntervalWindow`` a Python function) and a call of the
CombineFn's ``add_input``. At the end of a chain (:mod:`runners.spark.chains.planning`) the
chain's function adds each value to the table directly, and:

- finds a window's table by the window object itself first (the chain's ``WindowInto``
  hands out one object per window), so a window is hashed once per table, not once per
  element;
- adds an ``int`` to a running total for ``CombinePerKey(sum)`` (Beam's accumulator for
  ``sum`` is a list it sums every 10 values; for ints any order of additions gives the
  same sum, so the accumulator flushed, ``[total]``, is what Beam's compacted one is).

What is flushed is what ``PGBKCVOperation`` flushes: each key's compacted accumulator, in
its window, at the window's end (``OUTPUT_AT_EOW``, the only timestamp combiner chained),
or in the global window for default windowing; a table holding ``max_keys`` keys is
flushed whole (Beam flushes a tenth of it: only how many partial accumulators reach the
shuffle differs, not what the merge makes of them).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

from apache_beam.transforms.core import CombineFn
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from runners.spark.beam_internals import WindowedValue, combine_key_limit

#: Windows remembered by identity per table; beyond, the memo starts again.
_IDENTITY_MEMO_LIMIT = 4096
_GLOBAL_WINDOWS = (GlobalWindow(),)


class ChainedPrecombine:
    """The precombine's table and its per-element ``add(carrier, value)``."""

    def __init__(self, combine_fn: Any, windowing: Any) -> None:
        self.combine_fn = combine_fn
        self.is_default_windowing = windowing.is_default()
        self.max_keys = combine_key_limit(combine_fn)
        self.compact = (None if type(combine_fn).compact is CombineFn.compact
                        else combine_fn.compact)
        self.summing = getattr(combine_fn, "_fn", None) is sum
        self.tables: Dict[Any, Dict[Any, list]] = {}
        self.by_identity: Dict[int, Tuple[Any, Dict[Any, list]]] = {}
        self.keys = 0

    def adder(self, output: Callable[[Any], None]) -> Callable[[Any, Any], None]:
        """The per-element function ``add(carrier, value)``; ``output`` receives flushed
        elements."""
        add_in_window = self.window_adder(output)
        default_windowing = self.is_default_windowing

        def add(carrier, value) -> None:
            for window in (_GLOBAL_WINDOWS if default_windowing else carrier.windows):
                add_in_window(window, value)

        return add

    def window_adder(self, output: Callable[[Any], None]) -> Callable[[Any, Any], None]:
        """``add_in_window(window, value)``: ``value`` added in one ``window`` of its
        element (the global window for default windowing): what ``add`` does for each
        window, for a chain that knows its element's window without a carrier."""
        tables, by_identity = self.tables, self.by_identity
        create, add_input = self.combine_fn.create_accumulator, self.combine_fn.add_input
        summing, max_keys = self.summing, self.max_keys

        def add_in_window(window, value) -> None:
            key, element = value
            found = by_identity.get(id(window))
            if found is not None and found[0] is window:
                table = found[1]
            else:
                table = tables.get(window)
                if table is None:
                    table = tables[window] = {}
                if len(by_identity) >= _IDENTITY_MEMO_LIMIT:
                    by_identity.clear()
                by_identity[id(window)] = (window, table)  # holds it: its id stays its
            entry = table.get(key)
            if entry is None:
                if self.keys >= max_keys:
                    self.flush(output)
                    add_in_window(window, value)
                    return
                self.keys += 1
                entry = table[key] = [create()]
            accumulator = entry[0]
            if (summing and type(element) is int and len(accumulator) == 1
                    and type(accumulator[0]) is int):
                accumulator[0] += element
            else:
                entry[0] = add_input(accumulator, element)

        return add_in_window

    def flush(self, output: Callable[[Any], None]) -> None:
        """Hand on every accumulator (as PGBKCVOperation's ``output_key``) and empty the
        table (in place: the adder holds it)."""
        tables = list(self.tables.items())
        self.tables.clear()
        self.by_identity.clear()
        self.keys = 0
        compact = self.compact
        for window, table in tables:
            for key, entry in table.items():
                accumulator = entry[0] if compact is None else compact(entry[0])
                if self.is_default_windowing:
                    output(WindowedValue((key, accumulator), MIN_TIMESTAMP, _GLOBAL_WINDOWS))
                else:
                    output(WindowedValue((key, accumulator), window.max_timestamp(), (window,)))
