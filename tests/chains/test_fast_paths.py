"""The fast paths of ``runners/spark/fast_paths.py`` give what Beam's own functions give.

Each case is run through the fast path (installed on import of the runner) and through
Beam's original function (kept in ``BEAM_ORIGINALS``); results are compared by value and by
their internal fields, and an error must be the same error.
"""

from __future__ import annotations

import pytest
from apache_beam.transforms.window import (
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    TimestampedValue,
    WindowFn,
)
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Timestamp

from runners.spark.fast_paths import BEAM_ORIGINALS, install_fast_paths

install_fast_paths()  # as importing the runner's Beam internals does


def _fields(stamp: Timestamp):
    return stamp._seconds, stamp._subseconds, stamp._precision


def _outcome(function, *args, **kwargs):
    try:
        return "returned", function(*args, **kwargs)
    except Exception as error:  # the error itself is what is compared
        return "raised", (type(error), str(error))


CONSTRUCTIONS = [
    ((), {}), ((0,), {}), ((1_700_000_000,), {}), ((-1,), {}), ((-7, 3), {}),
    ((5, 1_999_999), {}), ((5, -1), {}), ((1.5,), {}), ((-0.000001,), {}), ((3, 2, 3), {}),
    ((3, 2, 9), {}), ((3, 0, 6), {}), ((0,), {"micros": 90_000_001}), ((2,), {"micros": -5}),
    ((0, 1), {"micros": 4}), ((0, 0, 3), {"micros": 4}), ((True,), {}), ((0, 0, True), {}),
    ((0, 0, 6.0), {}), (("1",), {}), ((0,), {"micros": 1.5}), ((0, 0, 10), {}),
    ((MAX_TIMESTAMP.micros // 10**6 + 10,), {}),
]


@pytest.mark.parametrize("args, kwargs", CONSTRUCTIONS)
def test_timestamp_construction_matches_beam(args, kwargs):
    def construct(init):
        stamp = Timestamp.__new__(Timestamp)
        init(stamp, *args, **kwargs)
        return _fields(stamp)

    assert _outcome(construct, Timestamp.__init__) == _outcome(
        construct, BEAM_ORIGINALS["Timestamp.__init__"])


@pytest.mark.parametrize("seconds", [
    0, 17, -17, 1.25, Timestamp(3, 5, 9), True, "x", None, 2**70,
])
def test_timestamp_of_and_micros_match_beam(seconds):
    fast = _outcome(Timestamp.of, seconds)
    beam = _outcome(BEAM_ORIGINALS["Timestamp.of"], seconds)
    if fast[0] == "raised":
        assert fast == beam
        return
    assert beam[0] == "returned" and _fields(fast[1]) == _fields(beam[1])
    assert type(fast[1]) is Timestamp
    if isinstance(seconds, Timestamp):
        assert fast[1] is seconds
    assert _outcome(lambda stamp: stamp.micros, fast[1]) == _outcome(
        BEAM_ORIGINALS["Timestamp.micros"], beam[1])


@pytest.mark.parametrize("stamp", [
    Timestamp(3, 7, 3), Timestamp(3, 7, 9), Timestamp(3, 7000, 9), Timestamp(-3, 1),
    MIN_TIMESTAMP, MAX_TIMESTAMP,
])
def test_micros_at_other_precisions_matches_beam(stamp):
    assert _outcome(lambda value: value.micros, stamp) == _outcome(
        BEAM_ORIGINALS["Timestamp.micros"], stamp)


WINDOWS = [
    IntervalWindow(0, 60), IntervalWindow(0, 60), IntervalWindow(60, 120),
    IntervalWindow(-60, 0), IntervalWindow(Timestamp(micros=1), Timestamp(micros=2)),
    IntervalWindow(MIN_TIMESTAMP, MAX_TIMESTAMP),
    IntervalWindow(Timestamp(micros=MIN_TIMESTAMP.micros - 5), MAX_TIMESTAMP),
    IntervalWindow(MIN_TIMESTAMP, Timestamp(micros=MAX_TIMESTAMP.micros + 5)),
]


def test_interval_window_hash_and_equality_match_beam():
    beam_hash, beam_eq = BEAM_ORIGINALS["IntervalWindow.__hash__"], BEAM_ORIGINALS[
        "IntervalWindow.__eq__"]
    others = WINDOWS + [GlobalWindow(), (0, 60), None]
    for first in WINDOWS:
        assert hash(first) == beam_hash(first)
        for second in others:
            assert (first == second) == beam_eq(first, second), (first, second)
            assert (first != second) == (not beam_eq(first, second)), (first, second)
    # Cut off at MIN/MAX_TIMESTAMP: windows beyond the bounds equal the bounded one.
    assert WINDOWS[5] == WINDOWS[6] == WINDOWS[7]
    assert len({WINDOWS[0], WINDOWS[1], WINDOWS[5], WINDOWS[6]}) == 2


@pytest.mark.parametrize("stamp", [0, 17, -3, 1.5, Timestamp(5), Timestamp(3, 7, 9), "x"])
def test_stamped_values_and_assign_contexts_match_beam(stamp):
    for kind, name in ((TimestampedValue, "TimestampedValue.__init__"),
                       (WindowFn.AssignContext, "AssignContext.__init__")):
        def construct(init):
            made = kind.__new__(kind)
            init(made, "value", stamp)
            fields = dict(vars(made))
            return fields.pop("timestamp"), fields

        fast, beam = _outcome(construct, kind.__init__), _outcome(construct, BEAM_ORIGINALS[name])
        if fast[0] == "raised":
            assert fast == beam
            continue
        assert type(fast[1][0]) is Timestamp and _fields(fast[1][0]) == _fields(beam[1][0])
        assert fast[1][1] == beam[1][1]


def test_global_windows_assign_matches_beam():
    context = WindowFn.AssignContext(Timestamp(5), "value")
    first, second = GlobalWindows().assign(context), GlobalWindows().assign(context)
    assert first == BEAM_ORIGINALS["GlobalWindows.assign"](GlobalWindows(), context)
    assert first[0] is GlobalWindow() and first is not second  # a new list every time
    # by keyword, as Beam's signatures allow
    assert TimestampedValue(value=1, timestamp=3).timestamp == Timestamp(3)
    assert WindowFn.AssignContext(timestamp=3, element=1, window=None).timestamp == Timestamp(3)


OPERANDS = [
    Timestamp(5), Timestamp(5), Timestamp(-5), Timestamp(5, 1), Timestamp(4, 999_999),
    Timestamp(0, 5, 3), Timestamp(5, 0, 9), Timestamp(5, 1, 9), MIN_TIMESTAMP, MAX_TIMESTAMP,
    Duration(3), Duration(micros=-1), Duration(0), 5, 4.5, None,
]


def _result(outcome):
    kind, value = outcome
    if kind == "returned" and isinstance(value, Timestamp):
        return kind, ("Timestamp", _fields(value))
    if kind == "returned" and isinstance(value, Duration):
        return kind, ("Duration", value.micros)
    return outcome


@pytest.mark.parametrize("name", ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__add__",
                                  "__sub__"])
def test_timestamp_comparisons_and_arithmetic_match_beam(name):
    compared = 0
    for first in [operand for operand in OPERANDS if isinstance(operand, Timestamp)]:
        for second in OPERANDS:
            fast = _result(_outcome(getattr(Timestamp, name), first, second))
            beam = _result(_outcome(BEAM_ORIGINALS[f"Timestamp.{name}"], first, second))
            assert fast == beam, (name, first, second)
            compared += 1
    assert compared == 10 * len(OPERANDS)


@pytest.mark.parametrize("stamp", OPERANDS[:10])
def test_predecessor_and_hash_match_beam(stamp):
    assert _fields(stamp.predecessor()) == _fields(BEAM_ORIGINALS["Timestamp.predecessor"](stamp))
    assert hash(stamp) == hash(Timestamp(stamp._seconds, stamp._subseconds, stamp._precision))
    assert len({Timestamp(5), Timestamp(5), Timestamp(5, 0, 9)}) == 1
