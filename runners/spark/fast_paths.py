"""Fast paths for the pure-Python parts of Beam's windows and timestamps that every element
crosses, installed in every process that imports the runner (driver and Python workers).

Beam 2.77's ``Timestamp`` keeps ``(seconds, subseconds, precision)`` and its hot methods are
pure Python: ``micros`` recomputes a product on each call, ``__init__`` and ``of`` check every
argument's type, and ``IntervalWindow``'s ``__hash__`` and ``__eq__`` (compiled, but reading
``MIN_TIMESTAMP.micros`` and ``MAX_TIMESTAMP.micros`` on each call: six property calls per
dictionary lookup) dominate a windowed combine, which looks up a (window, key) pair per
element. Measured on the keyed windowed sum (``python -m bench.profile``, 200k events): 6.7
``micros`` calls per event, windows and timestamps 58% of the workers' profiled CPU.

Each fast path covers the one case that matters (whole microseconds, ``int`` arguments, an
``IntervalWindow`` itself), computes exactly what Beam's code computes, and hands every
other case to Beam's own function, so results and errors are unchanged
(``tests/chains/test_fast_paths.py`` compares both on edge cases). Beam's minor version is
checked by :mod:`runners.spark.beam_internals`, which installs these.

>>> install_fast_paths()
>>> from apache_beam.utils.timestamp import Timestamp
>>> Timestamp(90).micros, Timestamp.of(90) == Timestamp(micros=90_000_000)
(90000000, True)
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from apache_beam.transforms import window
from apache_beam.utils import timestamp

_MICROS_PER_SECOND = 1_000_000
_ZERO, _SIX = 0, 6
#: Beam's own functions that the fast paths replaced, by qualified name (for the tests).
BEAM_ORIGINALS: Dict[str, Callable[..., Any]] = {}


def _initialize_the_global_window_once() -> None:
    """``GlobalWindow()`` is a singleton, but Beam 2.77 re-runs its ``__init__`` (a protobuf
    constant parsed, a Timestamp built) every time it is called: for every element a DoFn
    emits as a ``TimestampedValue`` in the global window (measured: ~1/5 of a source
    stage's time). Its end never changes: initialize it once."""
    window_class = window.GlobalWindow
    original = window_class.__init__

    def __init__(self) -> None:
        if "_end" not in self.__dict__:
            original(self)

    window_class.__init__ = __init__


def _timestamps_in_whole_microseconds() -> None:
    timestamp_class = timestamp.Timestamp
    original_init = timestamp_class.__init__
    original_of = timestamp_class.of
    original_micros = timestamp_class.micros

    def __init__(self, seconds=0, subseconds=0, precision=6, *, micros=None) -> None:
        # Timestamp(micros=...) (Beam's timestamp coder, most user code) is asked first,
        # its defaults by identity (CPython's one int 0 and 6; a float or bool is not them).
        if type(micros) is int:
            if seconds is _ZERO and subseconds is _ZERO and precision is _SIX:
                self._precision = 6
                self._seconds, self._subseconds = divmod(micros, _MICROS_PER_SECOND)
                return
        elif (micros is None and precision == 6 and type(seconds) is int
              and type(subseconds) is int and type(precision) is int):
            self._precision = 6
            self._seconds, self._subseconds = divmod(
                seconds * _MICROS_PER_SECOND + subseconds, _MICROS_PER_SECOND)
            return
        original_init(self, seconds, subseconds, precision, micros=micros)

    new = object.__new__

    def of(seconds):
        kind = type(seconds)
        if kind is timestamp_class:
            return seconds
        if kind is int:  # what __init__ makes of whole seconds, without its call
            made = new(timestamp_class)
            made._precision = 6
            made._seconds, made._subseconds = seconds, 0
            return made
        return original_of(seconds)

    def micros(self) -> int:
        if self._precision == 6:
            return self._seconds * _MICROS_PER_SECOND + self._subseconds
        return original_micros.fget(self)

    BEAM_ORIGINALS.update({"Timestamp.__init__": original_init, "Timestamp.of": original_of,
                           "Timestamp.micros": original_micros.fget})
    timestamp_class.__init__ = __init__
    timestamp_class.of = staticmethod(of)
    timestamp_class.micros = property(micros, doc=original_micros.__doc__)
    _timestamp_arithmetic(timestamp_class)


def _timestamp_arithmetic(timestamp_class: type) -> None:
    """Comparisons of two Timestamps of one precision, and whole-microsecond arithmetic with
    Durations (what a trigger driver does with window ends, lateness and holds). Beam keeps
    ``0 <= subseconds < 10**precision``, so (seconds, subseconds) order as the instants do."""
    duration_class = timestamp.Duration
    new = object.__new__

    def made(total_micros: int):
        made_timestamp = new(timestamp_class)
        made_timestamp._precision = 6
        made_timestamp._seconds, made_timestamp._subseconds = divmod(
            total_micros, _MICROS_PER_SECOND)
        return made_timestamp

    def comparison(name: str, compare: Callable[[tuple, tuple], bool]) -> None:
        original = getattr(timestamp_class, name)
        BEAM_ORIGINALS[f"Timestamp.{name}"] = original

        def compared(self, other):
            if type(other) is timestamp_class and other._precision == self._precision:
                return compare((self._seconds, self._subseconds),
                               (other._seconds, other._subseconds))
            return original(self, other)

        setattr(timestamp_class, name, compared)

    comparison("__lt__", lambda first, second: first < second)
    comparison("__le__", lambda first, second: first <= second)
    comparison("__gt__", lambda first, second: first > second)
    comparison("__ge__", lambda first, second: first >= second)
    comparison("__eq__", lambda first, second: first == second)  # __hash__ stays Beam's

    original_add, original_sub = timestamp_class.__add__, timestamp_class.__sub__
    original_predecessor = timestamp_class.predecessor
    BEAM_ORIGINALS.update({"Timestamp.__add__": original_add, "Timestamp.__sub__": original_sub,
                           "Timestamp.predecessor": original_predecessor})

    def __add__(self, other):
        if type(other) is duration_class and self._precision == 6:
            return made(self._seconds * _MICROS_PER_SECOND + self._subseconds + other.micros)
        return original_add(self, other)

    def __sub__(self, other):
        if self._precision == 6:
            kind = type(other)
            if kind is duration_class:
                return made(self._seconds * _MICROS_PER_SECOND + self._subseconds
                            - other.micros)
            if kind is timestamp_class and other._precision == 6:
                return duration_class(micros=(self._seconds - other._seconds) * _MICROS_PER_SECOND
                                      + self._subseconds - other._subseconds)
        return original_sub(self, other)

    def predecessor(self):
        if self._precision == 6:
            return made(self._seconds * _MICROS_PER_SECOND + self._subseconds - 1)
        return original_predecessor(self)

    timestamp_class.__add__ = __add__
    timestamp_class.__sub__ = __sub__
    timestamp_class.predecessor = predecessor


def _interval_windows_compared_in_microseconds() -> None:
    window_class = window.IntervalWindow
    lowest = timestamp.MIN_TIMESTAMP.micros
    highest = timestamp.MAX_TIMESTAMP.micros

    # Ends beyond MIN/MAX_TIMESTAMP compare as if cut off there, as in Beam's own methods.
    def __hash__(self) -> int:
        start, end = self._start_micros, self._end_micros
        return hash((start if start > lowest else lowest, end if end < highest else highest))

    def __eq__(self, other) -> bool:
        if type(self) != type(other):
            return False
        start, end = self._start_micros, self._end_micros
        other_start, other_end = other._start_micros, other._end_micros
        return ((start if start > lowest else lowest)
                == (other_start if other_start > lowest else lowest)
                and (end if end < highest else highest)
                == (other_end if other_end < highest else highest))

    BEAM_ORIGINALS.update({"IntervalWindow.__hash__": window_class.__hash__,
                           "IntervalWindow.__eq__": window_class.__eq__})
    window_class.__hash__ = __hash__
    window_class.__eq__ = __eq__


def _stamping_in_the_global_window() -> None:
    """A DoFn that stamps its output (``TimestampedValue``) costs, per element, in Beam's
    output handler: the value's ``Timestamp.of``, an ``AssignContext`` (another ``of``) and
    ``GlobalWindows.assign`` (``GlobalWindow()``: the singleton's ``__new__`` and
    ``__init__``). Each is given its result directly when it is already there: the
    ``Timestamp`` itself, the one ``GlobalWindow`` in a new list."""
    timestamp_class = timestamp.Timestamp
    stamped_class = window.TimestampedValue
    of = timestamp_class.of
    context_class = window.WindowFn.AssignContext

    # Beam's parameter names, which callers may pass by keyword (they shadow the modules).
    def stamped_init(self, value, timestamp) -> None:
        self.value = value
        self.timestamp = timestamp if type(timestamp) is timestamp_class else of(timestamp)

    def context_init(self, timestamp, element=None, window=None) -> None:
        self.timestamp = timestamp if type(timestamp) is timestamp_class else of(timestamp)
        self.element = element
        self.window = window

    the_global_window = window.GlobalWindow()

    def assign(self, assign_context):
        return [the_global_window]

    BEAM_ORIGINALS.update({"TimestampedValue.__init__": stamped_class.__init__,
                           "AssignContext.__init__": context_class.__init__,
                           "GlobalWindows.assign": window.GlobalWindows.assign})
    stamped_class.__init__ = stamped_init
    context_class.__init__ = context_init
    window.GlobalWindows.assign = assign


def install_fast_paths() -> None:
    """Install every fast path of this module (once per process: the mark is on Beam's
    module, so later calls, even from a reloaded copy of this one, do nothing)."""
    if getattr(timestamp, "fast_paths_by_spark_runner", False):
        return
    timestamp.fast_paths_by_spark_runner = True
    _initialize_the_global_window_once()
    _timestamps_in_whole_microseconds()
    _interval_windows_compared_in_microseconds()
    _stamping_in_the_global_window()
