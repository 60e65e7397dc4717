"""The source of one function of a chain, as :mod:`~runners.spark.chains.code` and
:mod:`~runners.spark.chains.window_code` write it, step by step.

>>> code = ChainCode({})
>>> code.open_loop(0, "for value_0 in results_0:")
>>> code.skip()
>>> code.close_loops()
>>> [line.strip() for line in code.lines]
['for value_0 in results_0:', 'current = 0', 'continue', 'current = 0']
"""

from __future__ import annotations

from typing import Any, Dict, List

# Python allows 20 statically nested blocks: a chain's ``for`` loops and its ``try`` stay
# under that (planning opens at most planning.MAX_CHAIN_BLOCKS of them in a chain).


class ChainCode:
    """The source of one function of a chain, written step by step; ``names`` are the
    objects the code refers to, shared by the chain's functions."""

    def __init__(self, names: Dict[str, Any]) -> None:
        self.lines: List[str] = []
        self.names = names
        self.loops: List[int] = []  # owners of the enclosing for loops, innermost last

    def bind(self, name: str, value: Any) -> str:
        self.names[name] = value
        return name

    def line(self, text: str) -> None:
        self.lines.append("    " * (len(self.loops) + 3) + text)

    def skip(self, depth: int = 1) -> None:
        """Stop this value's way down the chain (``depth`` levels into the current block):
        on to the next value of the innermost loop (its owner's code runs again), or the
        end of the element."""
        indent = "    " * depth
        if self.loops:
            self.line(f"{indent}current = {self.loops[-1]}")
            self.line(f"{indent}continue")
        else:
            self.line(f"{indent}return")

    def open_loop(self, owner: int, header: str) -> None:
        self.line(header)
        self.loops.append(owner)

    def close_loops(self) -> None:
        while self.loops:
            self.line(f"current = {self.loops[-1]}")
            self.loops.pop()
