"""The code of a chain's window steps (:mod:`~runners.spark.chains.code` writes the rest):
``WindowInto`` as a loop over the element's new carriers, a last ``WindowInto(GlobalWindows)``
handing an element alone in the global window on as it is, and ``WindowInto(FixedWindows)``
adding its values to a precombine directly. Each writes into a
:class:`~runners.spark.chains.source.ChainCode`, whose names hold ``GlobalWindow``, ``NO_PANE``,
``create`` and ``receive``.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

from runners.spark.chains.source import ChainCode


def write_windows(code: ChainCode, index: int, step: Any, carrier: str,
                  value: str) -> Tuple[str, str]:
    """``WindowInto``: the value once per window its element was in, each time with a new
    carrier holding the windows of its timestamp and no pane; into the global window, an
    element alone in the global window with no pane goes on as it is."""
    windows_at = code.bind(f"windows_at_{index}", step.windows_at)
    carriers = f"carriers_{index}"
    if step.into_global:
        code.line(f"windows = {carrier}.windows")
        code.line("if (len(windows) == 1 and type(windows[0]) is GlobalWindow")
        code.line(f"        and {carrier}.pane_info == NO_PANE):")
        code.line(f"    {carriers} = ({carrier},)")
        code.line("else:")
        code.line(f"    micros = {carrier}.timestamp_micros")
        code.line(f"    {carriers} = [create({value}, micros, {windows_at}(micros)) "
                  f"for _ in windows]")
    elif step.fixed is not None:  # FixedWindows, the assignment written out
        size, offset, cache, make = step.fixed
        cache = code.bind(f"window_cache_{index}", cache)
        make = code.bind(f"make_window_{index}", make)
        code.line(f"micros = {carrier}.timestamp_micros")
        code.line(f"start = micros - (micros - {offset}) % {size}")
        code.line(f"window = {cache}.get(start)")
        code.line("if window is None:")
        code.line(f"    window = {make}(start)")
        code.line(f"if len({carrier}.windows) == 1:")
        code.line(f"    {carriers} = (create({value}, micros, [window]),)")
        code.line("else:")
        code.line(f"    {carriers} = [create({value}, micros, [window]) "
                  f"for _ in {carrier}.windows]")
    else:
        code.line(f"micros = {carrier}.timestamp_micros")
        code.line(f"{carriers} = [create({value}, micros, {windows_at}(micros)) "
                  f"for _ in {carrier}.windows]")
    new_carrier = f"carrier_{index}"
    code.open_loop(index, f"for {new_carrier} in {carriers}:")
    return new_carrier, value


def write_last_into_global(code: ChainCode, index: int, step: Any, carrier: str,
                           value: str, block_sizes: Any = None) -> None:
    """A last ``WindowInto(GlobalWindows)`` (``WriteImpl``'s, before its writing step):
    an element alone in the global window with no pane is handed on as it is, without
    the loop of :func:`_write_windows` (with ``block_sizes``, the sizes of the chain's
    output: its value is counted and appended to the block of the chain's sink, named
    ``block`` in the code's names); any other, once per window it was in."""
    windows_at = code.bind(f"windows_at_{index}", step.windows_at)
    code.line(f"windows = {carrier}.windows")
    code.line("if (len(windows) == 1 and type(windows[0]) is GlobalWindow")
    code.line(f"        and {carrier}.pane_info == NO_PANE):")
    if block_sizes is None:
        code.line(f"    receive({carrier} if {value} is {carrier}.value "
                  f"else {carrier}.with_value({value}))")
    else:
        sizes = code.bind(f"sizes_{index}", block_sizes)
        code.line(f"    seen_{index} += 1")
        code.line(f"    if seen_{index} >= next_{index}:")
        code.line(f"        next_{index} = {sizes}.sample({carrier}, {value}, seen_{index})")
        code.line("    if not block:")
        code.line(f"        open_block({carrier})")
        code.line(f"    block_append({value})")
        code.line("    if len(block) >= BLOCK_SIZE:")
        code.line("        flush_block()")
    code.line("else:")
    code.line(f"    micros = {carrier}.timestamp_micros")
    code.line("    for _ in windows:")
    code.line(f"        receive(create({value}, micros, {windows_at}(micros)))")
    code.line(f"        current = {index}")


def window_adder(code: ChainCode, index: int, combiner: Any) -> str:
    """The name of the precombine's ``add_in_window``, one for every entry (they share its
    table)."""
    add = f"add_in_window_{index}"
    if add not in code.names:
        code.bind(add, combiner.window_adder(code.names["receive"]))
    return add


def write_fixed_into_precombine(code: ChainCode, index: int, steps: Sequence[Any],
                                sizes: Any, carrier: str, value: str) -> None:
    """A ``WindowInto(FixedWindows)`` handing its values to the precombine: each value is
    added in its window directly, once per window its element was in (as the carriers of
    :func:`_write_windows` would be, each with the same one window), and its carrier
    (timestamp, window, no pane) is made only for an element whose size is sampled."""
    size, offset, cache, make = steps[index].fixed
    cache = code.bind(f"window_cache_{index}", cache)
    make = code.bind(f"make_window_{index}", make)
    sizes = code.bind(f"sizes_{index}", sizes)
    last = len(steps) - 1
    add = window_adder(code, last, steps[-1].combiner)
    code.line(f"micros = {carrier}.timestamp_micros")
    code.line(f"start = micros - (micros - {offset}) % {size}")
    code.line(f"window = {cache}.get(start)")
    code.line("if window is None:")
    code.line(f"    window = {make}(start)")
    code.open_loop(index, f"for _ in {carrier}.windows:")
    code.line(f"seen_{index} += 1")
    code.line(f"if seen_{index} >= next_{index}:")
    code.line(f"    next_{index} = {sizes}.sample(create({value}, micros, [window]), {value}, "
              f"seen_{index})")
    code.line(f"current = {last}")
    code.line(f"{add}(window, {value})")
