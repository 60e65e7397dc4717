"""The loop of a chain of steps, written as one Python function per chain.

A chain is cheap only if a step costs the call of its function and little more: Beam's
operations are compiled (Cython) and cost ~0.2-0.4 us per step per element; the same
hand-over written as one Python closure per step costs more than that (measured: 8
identity Maps, 9.2-9.9 us per element through Beam's operations, 9.7-12.5 us through
closures; 3.5 us written out as below, where Beam's operations took 6.9 us that run).
So the chain is written out as the code a person would write for it, one function, with
the steps' functions called in nested blocks (a ``for`` per step that may output several
values), and compiled once per operation:

    def chain(carrier, value):                  # Map(parse) | Filter(keep) | FlatMap(split)
        nonlocal current, seen_0, next_0, ...
        try:
            current = 0
            value_0 = function_0(value)
            carrier_0 = carrier
            if isinstance(value_0, SPECIAL): ...   # TimestampedValue, WindowedValue, ...
            seen_0 += 1                            # counted into step 0's PCollection
            if seen_0 >= next_0: next_0 = sizes_0.sample(carrier_0, value_0, seen_0)
            current = 1
            if not function_1(value_0): return
            ...
            for value_2 in results_2:
                ...
                receive(...)                       # the next Beam operation
                current = 2
        except BaseException as error:
            raise_with_step(error, current)

``current`` is the index of the step whose code runs (the user's function, its
generator resumed by ``for``, the handling of its results, or, for the last step, the
Beam operation it hands on to, as in Beam), for the metrics container and for the step
named in an error. :func:`chain_function` returns the function and its source.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

from apache_beam.transforms.window import GlobalWindow, TimestampedValue

from runners.spark.beam_internals import PANE_INFO_UNKNOWN, create_windowed_value

# Python allows 20 statically nested blocks: a chain's ``for`` loops and its ``try`` stay
# under that (planning chains at most planning.MAX_CHAIN_STEPS steps).


class ChainCode:
    """The source of one chain's function, written step by step."""

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.names: Dict[str, Any] = {}
        self.counted: List[int] = []  # indices of steps whose outputs the chain counts
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


def chain_function(steps: Sequence[Any], counted: Sequence[Any], receive: Callable,
                   special: Tuple[type, ...],
                   raise_with_step: Callable) -> Tuple[Callable, Any, str]:
    """The chain's function ``chain(carrier, value)``, the pair of functions
    ``(counts(), running())``: the elements counted so far into each counted step's
    output, and the index of the step running now; and the chain's source.

    ``steps`` are the operation's steps (``kind``, ``function``, ``args``, ``kwargs``,
    ``check_output``, ``check_first_output``, ``resolve``, ``windows_at`` (None unless the
    step's WindowFn is a standard one), ``into_global`` as the kind needs);
    ``counted[i]`` samples the sizes of step i's outputs (``sample(carrier, value, seen)``
    returns the count at which to sample next), for every step but the last; ``receive``
    takes the chain's output elements (a last precombine step's ``combiner`` flushes to it).
    """
    code = ChainCode()
    code.bind("SPECIAL", special)
    code.bind("receive", receive)
    code.bind("TimestampedValue", TimestampedValue)
    code.bind("GlobalWindow", GlobalWindow)
    code.bind("NO_PANE", PANE_INFO_UNKNOWN)
    code.bind("create", create_windowed_value)
    carrier, value = "carrier", "value"
    precombine = steps[-1].kind == "precombine"
    for index, step in enumerate(steps[:-1] if precombine else steps):
        carrier, value = _write_step(code, index, step, carrier, value)
        if index < len(counted):
            sizes = code.bind(f"sizes_{index}", counted[index])
            code.counted.append(index)
            code.line(f"seen_{index} += 1")
            code.line(f"if seen_{index} >= next_{index}:")
            code.line(f"    next_{index} = {sizes}.sample({carrier}, {value}, seen_{index})")
    if precombine:  # the chain's outputs are the precombine's flushes
        last = len(steps) - 1
        add = code.bind(f"add_{last}", steps[-1].combiner.adder(receive))
        code.line(f"current = {last}")
        code.line(f"{add}({carrier}, {value})")
    else:
        code.line(f"receive({carrier} if {value} is {carrier}.value "
                  f"else {carrier}.with_value({value}))")
    code.close_loops()
    return _compile(code, raise_with_step)


def _write_step(code: ChainCode, index: int, step: Any, carrier: str,
                value: str) -> Tuple[str, str]:
    kind = step.kind
    if kind == "windows":
        return _write_windows(code, index, step, carrier, value)
    function = code.bind(f"function_{index}", step.function)
    code.line(f"current = {index}")
    out = f"value_{index}"
    if kind == "Map":
        code.line(f"{out} = {function}({value})")
    elif kind == "MapTuple":
        code.line(f"{out} = {function}(*{value})")
    elif kind == "Filter":
        code.line(f"if not {function}({value}):")
        code.skip()
        code.line(f"{out} = {value}")
    else:
        results = f"results_{index}"
        if kind == "FlatMapTuple":
            code.line(f"{results} = {function}(*tuple({value}))")
        elif step.args or step.kwargs:
            arguments = code.bind(f"arguments_{index}", step.args)
            keywords = code.bind(f"keywords_{index}", step.kwargs)
            code.line(f"{results} = {function}({value}, *{arguments}, **{keywords})")
        else:
            code.line(f"{results} = {function}({value})")
        if step.check_output:
            check = code.bind(f"check_{index}", step.check_first_output)
            code.line(f"if {check}.pending:")
            code.line(f"    {check}({results})")
        code.line(f"if {results} is None:")
        code.skip()
        code.open_loop(index, f"for {out} in {results}:")
    new_carrier = f"carrier_{index}"
    resolve = code.bind(f"resolve_{index}", step.resolve)
    code.line(f"{new_carrier} = {carrier}")
    code.line(f"if isinstance({out}, SPECIAL):")
    if step.windows_at is not None:
        # A value stamped with its event time, the common case, is resolved here (what
        # resolve does for it, without its call).
        windows_at = code.bind(f"windows_at_{index}", step.windows_at)
        code.line(f"    if type({out}) is TimestampedValue:")
        code.line(f"        micros = {out}.timestamp.micros")
        code.line(f"        {new_carrier} = create({out}.value, micros, {windows_at}(micros))")
        code.line(f"        if len({carrier}.windows) != 1:")
        code.line(f"            {new_carrier}.windows *= len({carrier}.windows)")
        code.line("    else:")
        code.line(f"        {new_carrier} = {resolve}({carrier}, {out})")
        code.line(f"        if {new_carrier} is None:")
        code.skip(depth=3)
    else:
        code.line(f"    {new_carrier} = {resolve}({carrier}, {out})")
        code.line(f"    if {new_carrier} is None:")
        code.skip(depth=2)
    code.line(f"    {out} = {new_carrier}.value")
    return new_carrier, out


def _write_windows(code: ChainCode, index: int, step: Any, carrier: str,
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


def _compile(code: ChainCode, raise_with_step: Callable) -> Tuple[Callable, Any, str]:
    counters = [f"seen_{index}, next_{index}" for index in code.counted]
    cells = ["current"] + [f"seen_{index}" for index in code.counted] + [
        f"next_{index}" for index in code.counted]
    body = "\n".join(code.lines)
    source = "\n".join([
        "def make_chain():",
        "    current = 0",
        *[f"    {pair} = 0, 1" for pair in counters],
        "    def chain(carrier, value):",
        f"        nonlocal {', '.join(cells)}",
        "        try:",
        body,
        "        except BaseException as error:",
        "            raise_with_step(error, current)",
        "    def counts():",
        f"        return [{', '.join(f'seen_{index}' for index in code.counted)}]",
        "    def running():",
        "        return current",
        "    return chain, counts, running",
    ])
    namespace = dict(code.names, raise_with_step=raise_with_step)
    exec(compile(source, "<chained steps>", "exec"), namespace)  # noqa: S102 - our own code
    chain, counts, running = namespace["make_chain"]()
    return chain, (counts, running), source
