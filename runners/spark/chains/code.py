"""The loop of a chain of steps, written as one Python function per chain.

A chain is cheap only if a step costs the call of its function and little more: Beam's
operations are compiled (Cython) and cost ~0.2-0.4 us per step per element; the same
hand-over written as one Python closure per step costs more than that (measured: 8
identity Maps, 9.2-9.9 us per element through Beam's operations, 9.7-12.5 us through
closures; 3.5 us written out as below, where Beam's operations took 6.9 us that run).
So the chain is written out as the code a person would write for it, one function, with
the steps' functions called in nested blocks (a ``for`` per step that may output several
values, and one over the element's windows for a step invoked once per window), and
compiled once per operation:

    def chain(carrier, value):      # Map(parse) | Filter(keep) | ParDo(Monitor) | FlatMap
        nonlocal current, seen_0, next_0, ...
        try:
            current = 0
            value_0 = function_0(value)
            carrier_0 = carrier
            if type(value_0) not in ORDINARY and is_special(value_0):
                ...                                # TimestampedValue, WindowedValue, ...
            seen_0 += 1                            # counted into step 0's PCollection
            if seen_0 >= next_0: next_0 = sizes_0.sample(carrier_0, value_0, seen_0)
            current = 1
            if not function_1(value_0): return
            ...
            results_2 = function_2(value_1, carrier_1.timestamp)   # process(e, t=Timestamp)
            for value_2 in results_2:
                ...
                receive(...)                       # the next Beam operation
                current = 2
        except BaseException as error:
            raise_with_step(error, current)

``current`` is the index of the step whose code runs (the user's function, its
generator resumed by ``for``, the handling of its results, or, for the last step, the
Beam operation it hands on to, as in Beam), for the metrics container and for the step
named in an error. A step's ``process`` parameters are bound from the element's carrier as
Beam's invoker binds them: ``carrier.timestamp`` (one ``Timestamp`` per carrier, made once
and shared by every step reading it; a carrier made of a ``TimestampedValue`` holds that
value's own ``Timestamp``, as the ``WindowedValue`` of Beam's output handler does, so the
next step asking for it gets the step's object and none is made again from microseconds),
``carrier.pane_info``, and the window of the
invocation; a step asking for the window runs once per window of an element in several,
each time with a carrier of its own holding that window alone (and no pane, as Beam's).

The steps whose DoFn has a ``finish_bundle`` get an entry of their own, ``after_<i>``: the
same code from the step after them on, for the elements that method outputs.
:func:`chain_function` returns the functions and their source.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

from apache_beam.transforms.window import GlobalWindow, GlobalWindows, TimestampedValue

from runners.spark.beam_internals import (
    PANE_INFO_UNKNOWN,
    WindowedValue,
    create_windowed_value,
)
from runners.spark.chains.source import ChainCode
from runners.spark.chains.window_code import (
    window_adder,
    write_fixed_into_precombine,
    write_last_into_global,
    write_windows,
)


@dataclasses.dataclass
class ChainFunctions:
    """What :func:`chain_function` compiles for a chain."""

    chain: Callable[[Any, Any], None]  # (carrier, value) of an element entering the chain
    chain_values: Callable[[Any, Any], None]  # (carrier, values): each value, in order
    after: Dict[int, Callable[[Any, Any], None]]  # step index -> entry after that step
    counts: Callable[[], List[int]]  # elements counted so far into each counted output
    running: Callable[[], int]  # the index of the step running now
    running_cell: Any  # the closure cell holding that index (``cell_contents``)
    enter: Callable[[int], None]  # make a step the one running (for its bundle methods)
    source: str


def chain_function(steps: Sequence[Any], counted: Sequence[Any], receive: Callable,
                   special: Tuple[type, ...], raise_with_step: Callable,
                   entries: Sequence[int] = (), sink: Any = None) -> ChainFunctions:
    """The chain's functions (:class:`ChainFunctions`) and their source.

    ``steps`` are the operation's steps (``kind``, ``function``, ``arguments``,
    ``keywords``, ``per_window``, ``check_output``, ``check_first_output``, ``resolve``,
    ``windows_at`` (None unless the step's WindowFn is a standard one), ``into_global``,
    ``fixed`` as the kind needs); ``counted[i]`` samples the sizes of step i's outputs
    (``sample(carrier, value, seen)`` returns the count at which to sample next), for
    every step but the last; ``receive`` takes the chain's output elements (a last
    precombine step's ``combiner`` flushes to it). ``entries``: the steps after which the
    chain can be entered (each but the last, and not a precombine). ``sink``: a
    :class:`~runners.spark.chains.blocks.BlockSink` that takes, a block at a time, what a
    last ``WindowInto(GlobalWindows)`` hands on alone in the global window with no pane
    (``counted`` then holds one more: the chain's output, counted here).
    """
    ordinary: Set[type] = set()
    names: Dict[str, Any] = {
        "ORDINARY": ordinary, "is_special": _special_check(ordinary, special),
        "receive": receive, "TimestampedValue": TimestampedValue,
        "GlobalWindow": GlobalWindow, "NO_PANE": PANE_INFO_UNKNOWN,
        "create": create_windowed_value, "WindowedValue": WindowedValue,
    }
    if sink is not None:
        block = sink.value_block()
        names.update(block=block, block_append=block.append, open_block=sink.open_block,
                     flush_block=sink.flush_block, BLOCK_SIZE=sink.BLOCK_SIZE)
    bodies = {"chain": ("carrier, value", _body(ChainCode(names), steps, counted, start=0))}
    # The same code in a loop over a block of values of one carrier.
    block_code = ChainCode(names)
    block_code.open_loop(0, "for value in values:")
    bodies["chain_values"] = ("carrier, values", _body(block_code, steps, counted, start=0))
    for index in entries:
        bodies[f"after_{index}"] = ("carrier, value", _body(
            ChainCode(names), steps, counted, start=index + 1, count_first=index))
    return _compile(names, bodies, len(counted), raise_with_step)


def _special_check(ordinary: Set[type], special: Tuple[type, ...]) -> Callable[[Any], bool]:
    """``is_special(value)``: whether a step's result is one Beam's output handler treats
    apart, by its type as Beam's compiled handler checks it (a subclass of ``special``;
    an instance's own ``__class__`` is not asked); the type of a result that is not is
    remembered in ``ordinary``, which the chain checks first (a set lookup, where
    ``isinstance`` with three classes costs three times as much an output)."""

    def is_special(value: Any) -> bool:
        kind = type(value)
        if issubclass(kind, special):
            return True
        ordinary.add(kind)
        return False

    return is_special


def _body(code: ChainCode, steps: Sequence[Any], counted: Sequence[Any], start: int,
          count_first: int = -1) -> List[str]:
    """The lines of a function running ``steps[start:]`` on ``(carrier, value)``, counted
    first into the output of step ``count_first`` (when it is a counted one)."""
    carrier, value = "carrier", "value"
    precombine = steps[-1].kind == "precombine"
    end = len(steps) - 1 if precombine else len(steps)
    if 0 <= count_first < len(counted):
        _count(code, count_first, counted[count_first], carrier, value)
    fixed_into_precombine = (
        precombine and start < end and steps[end - 1].kind == "windows"
        and steps[end - 1].fixed is not None
        and not steps[-1].combiner.is_default_windowing)
    global_last = (not precombine and start < end and steps[-1].kind == "windows"
                   and steps[-1].into_global)
    for index in range(start, end - 1 if fixed_into_precombine or global_last else end):
        carrier, value = _write_step(code, index, steps[index], carrier, value)
        if index < len(counted):
            _count(code, index, counted[index], carrier, value)
    if global_last:
        output_sizes = counted[end - 1] if "block" in code.names else None
        write_last_into_global(code, end - 1, steps[-1], carrier, value, output_sizes)
    elif fixed_into_precombine:
        write_fixed_into_precombine(code, end - 1, steps, counted[end - 1], carrier, value)
    elif precombine:  # the chain's outputs are the precombine's flushes
        last = len(steps) - 1
        combiner = steps[-1].combiner
        code.line(f"current = {last}")
        if combiner.is_default_windowing:  # each value in the global window alone
            add = window_adder(code, last, combiner)
            window = code.bind(f"global_window_{last}", GlobalWindow())
            code.line(f"{add}({window}, {value})")
        else:
            add = f"add_{last}"
            if add not in code.names:  # one adder for every entry: they share its table
                code.bind(add, combiner.adder(code.names["receive"]))
            code.line(f"{add}({carrier}, {value})")
    elif not global_last:
        code.line(f"receive({carrier} if {value} is {carrier}.value "
                  f"else {carrier}.with_value({value}))")
    code.close_loops()
    return code.lines





def _count(code: ChainCode, index: int, sizes: Any, carrier: str, value: str) -> None:
    sizes = code.bind(f"sizes_{index}", sizes)
    code.line(f"seen_{index} += 1")
    code.line(f"if seen_{index} >= next_{index}:")
    code.line(f"    next_{index} = {sizes}.sample({carrier}, {value}, seen_{index})")


def _arguments(code: ChainCode, index: int, step: Any, carrier: str, value: str,
               window: str) -> str:
    """The call's arguments, as Beam's invoker passes them (``step.arguments``: ``(name,
    None)`` for what the element gives, ``(None, constant)`` for the others)."""
    parts = []
    for position, (name, constant) in enumerate(step.arguments):
        if name == "element":
            parts.append(value)
        elif name == "timestamp":
            parts.append(f"{carrier}.timestamp")
        elif name == "pane":
            parts.append(f"{carrier}.pane_info")
        elif name == "window":
            parts.append(window)
        else:
            parts.append(code.bind(f"argument_{index}_{position}", constant))
    if step.keywords:
        parts.append("**" + code.bind(f"keywords_{index}", step.keywords))
    return ", ".join(parts)


def _write_step(code: ChainCode, index: int, step: Any, carrier: str,
                value: str) -> Tuple[str, str]:
    kind = step.kind
    if kind == "windows":
        return write_windows(code, index, step, carrier, value)
    function = code.bind(f"function_{index}", step.function)
    code.line(f"current = {index}")
    window = ""
    if step.per_window:  # Beam's PerWindowInvoker: once per window, each alone
        windows, window = f"windows_{index}", f"window_{index}"
        code.line(f"{windows} = {carrier}.windows")
        code.line(f"if len({windows}) == 1:")
        code.line(f"    invocations_{index} = (({carrier}, {windows}[0]),)")
        code.line("else:")
        code.line(f"    timestamp_{index} = {carrier}.timestamp")
        code.line(f"    invocations_{index} = [(WindowedValue({value}, timestamp_{index}, "
                  f"(window,)), window) for window in {windows}]")
        code.open_loop(index, f"for invoked_{index}, {window} in invocations_{index}:")
        carrier = f"invoked_{index}"
    arguments = _arguments(code, index, step, carrier, value, window)
    out = f"value_{index}"
    if kind == "Map":
        code.line(f"{out} = {function}({arguments})")
    elif kind == "MapTuple":
        code.line(f"{out} = {function}(*{value})")
    elif kind == "Filter":
        code.line(f"if not {function}({arguments}):")
        code.skip()
        code.line(f"{out} = {value}")
    else:
        results = f"results_{index}"
        if kind == "FlatMapTuple":
            code.line(f"{results} = {function}(*tuple({value}))")
        else:
            code.line(f"{results} = {function}({arguments})")
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
    if step.windows_at is not None:
        # A value stamped with its event time, the common case, is resolved here (what
        # resolve does for it, without its call), before asking is_special.
        windows_at = code.bind(f"windows_at_{index}", step.windows_at)
        code.line(f"if type({out}) not in ORDINARY:")
        code.line(f"    if type({out}) is TimestampedValue:")
        if type(step.window_fn) is GlobalWindows:  # its one window, without a call
            window = code.bind("the_global_window", GlobalWindow())
            code.line(f"        {new_carrier} = WindowedValue({out}.value, {out}.timestamp, "
                      f"[{window}])")
        else:
            code.line(f"        {new_carrier} = WindowedValue({out}.value, {out}.timestamp, "
                      "None)")
            code.line(f"        {new_carrier}.windows = "
                      f"{windows_at}({new_carrier}.timestamp_micros)")
        code.line(f"        if len({carrier}.windows) != 1:")
        code.line(f"            {new_carrier}.windows *= len({carrier}.windows)")
        code.line(f"        {out} = {new_carrier}.value")
        code.line(f"    elif is_special({out}):")
        code.line(f"        {new_carrier} = {resolve}({carrier}, {out})")
        code.line(f"        if {new_carrier} is None:")
        code.skip(depth=3)
        code.line(f"        {out} = {new_carrier}.value")
    else:
        code.line(f"if type({out}) not in ORDINARY and is_special({out}):")
        code.line(f"    {new_carrier} = {resolve}({carrier}, {out})")
        code.line(f"    if {new_carrier} is None:")
        code.skip(depth=2)
        code.line(f"    {out} = {new_carrier}.value")
    return new_carrier, out



def _compile(names: Dict[str, Any], bodies: Dict[str, Tuple[str, List[str]]], counted: int,
             raise_with_step: Callable) -> ChainFunctions:
    """Compile each of ``bodies`` (name -> (parameters, lines)) as a function sharing the
    chain's cells: ``current`` and ``seen_<i>``/``next_<i>`` of the ``counted`` outputs."""
    cells = ["current"] + [f"seen_{index}" for index in range(counted)] + [
        f"next_{index}" for index in range(counted)]
    source = ["def make_chain():", "    current = 0"]
    source += [f"    seen_{index}, next_{index} = 0, 1" for index in range(counted)]
    for name, (parameters, body) in bodies.items():
        source += [
            f"    def {name}({parameters}):",
            f"        nonlocal {', '.join(cells)}",
            "        try:",
            *body,
            "        except BaseException as error:",
            "            raise_with_step(error, current)",
        ]
    source += [
        "    def counts():",
        f"        return [{', '.join(f'seen_{index}' for index in range(counted))}]",
        "    def running():",
        "        return current",
        "    def enter(index):",
        "        nonlocal current",
        "        current = index",
        f"    return {{{', '.join(f'{name!r}: {name}' for name in bodies)}}}, "
        "counts, running, enter",
    ]
    text = "\n".join(source)
    namespace = dict(names, raise_with_step=raise_with_step)
    exec(compile(text, "<chained steps>", "exec"), namespace)  # noqa: S102 - our own code
    functions, counts, running, enter = namespace["make_chain"]()
    after = {int(name.split("_")[1]): function for name, function in functions.items()
             if name.startswith("after_")}
    running_cell = running.__closure__[running.__code__.co_freevars.index("current")]
    return ChainFunctions(functions["chain"], functions["chain_values"], after, counts,
                          running, running_cell, enter, text)
