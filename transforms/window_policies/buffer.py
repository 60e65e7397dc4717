"""The window buffer that the lecture's window policies share, run in event-time order.

A window is a buffer with an *eviction policy* and a *trigger policy*. This module holds
the parts every policy shares:

- :class:`PolicyWindow`, the record each closed window becomes;
- :class:`WindowBuffer`, the open window of one key: tuples in order, a ``close`` that
  emits the window and evicts either everything (tumbling) or the oldest tuples (sliding);
- :class:`WindowPolicy`, the trigger decision a concrete policy makes tuple by tuple;
- :class:`ApplyWindowPolicy`, the composite that runs a policy per key on Beam state and
  timers (a stateful DoFn), so it runs on any runner that supports both.

Order. Beam does not define the order in which a stateful DoFn sees the elements of one
bundle, and runners differ. Every tuple is therefore first held in a *reorder buffer*
(bag state) and released to the policy when the watermark reaches its event timestamp
(an event-time timer, on the millisecond grid of Beam timers): tuples reach the policy
in ascending event time, ties broken by the tuple's encoded bytes. This is the lecture's
"sequence manipulation (reorder)", and it makes the windows the same on every runner.

Late tuples. Each key remembers the latest event time up to which it has released tuples
(the time its last wake-up timer fired). A tuple at or before that time would break the
key's order; it is *late*. It is never added to a window and never dropped: it is
emitted at once as its own one-tuple window with ``reason="late"`` and
``complete=False`` (and counted in the ``window_policies/late_tuples`` counter), so a
downstream step can route it (filter on ``reason``). A tuple that is behind the watermark
but after everything its key released is not late: it is taken in order.

End of input. When the watermark reaches the end of the enclosing Beam window (for the
usual global window: the end of input), every tuple still buffered is released, and a
window holding tuples that no earlier window emitted is emitted with
``reason="end_of_input"`` and ``complete=False``.

Output timestamps. Windows closed by a released tuple or a deadline are emitted by the
event-time timer of that moment and carry its timestamp: the closing tuple's timestamp
(rounded up to the millisecond), or for time windows the window's end. End-of-input
windows carry the Beam window's last millisecond; a late tuple keeps its own timestamp.
Every output therefore sits at or after the watermark hold of the timer that produced
it. (Beam's Python DirectRunner sets no such hold in streaming, apache/beam#18987: there,
what the timers emit when the watermark jumps to infinity reaches a downstream
GroupByKey after the window expired, and that GroupByKey drops it.)

Example, a policy of one's own (close the window at every negative value):

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> class UntilNegative(WindowPolicy):
...     def admit(self, buffer, item):
...         buffer.append(item)
...         if item.value < 0:
...             buffer.close("negative")
>>> with beam.Pipeline() as p:
...     windows = (p
...                | beam.Create([("a", 3), ("a", -1), ("a", 2)])
...                | beam.Map(lambda kv: beam.window.TimestampedValue(kv, abs(kv[1])))
...                | ApplyWindowPolicy(UntilNegative())
...                | beam.Map(lambda w: (w.value, w.reason)))
...     _ = assert_that(windows, equal_to([((-1,), "negative"), ((2, 3), "end_of_input")]))
"""

from __future__ import annotations

from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam import coders, typehints
from apache_beam.metrics import Metrics
from apache_beam.transforms import core
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.utils.timestamp import Timestamp

#: Why a window was emitted.
COUNT = "count"
DELTA = "delta"
PUNCTUATION = "punctuation"
TIME = "time"
END_OF_INPUT = "end_of_input"
LATE = "late"

METRICS_NAMESPACE = "window_policies"


class PolicyWindow(NamedTuple):
    """One closed window of one key.

    ``value`` is the tuple of the window's elements in policy order (ascending event time,
    ties by encoded bytes), or the ``combine_fn`` result over them when one is given.
    ``size`` is the number of elements; ``first_timestamp`` / ``last_timestamp`` are the
    event times (seconds) of the first and last element, None for an empty window.
    ``reason`` is one of count, delta, punctuation, time, end_of_input, late; ``complete``
    is False for end-of-input and late windows, whose trigger never fired.
    """

    key: Any
    value: Any
    size: int
    first_timestamp: Optional[float]
    last_timestamp: Optional[float]
    reason: str
    complete: bool


class Item(NamedTuple):
    """A buffered tuple: event time in microseconds, encoded value (the tie-break), value."""

    timestamp_micros: int
    encoded: bytes
    value: Any


class WindowBuffer:
    """The open window of one key, with the two eviction policies of the lecture.

    ``close(reason)`` emits the window and evicts everything (tumbling);
    ``close(reason, evict=n)`` evicts only the oldest ``n`` tuples (sliding). ``fresh``
    counts the tuples that no emitted window contained yet, so that the end-of-input
    window is emitted only when it holds something new.
    """

    def __init__(self, items: Sequence[Item] = (), fresh: int = 0) -> None:
        self.items: List[Item] = list(items)
        self.fresh = fresh
        self.closed: List[Tuple[Tuple[Item, ...], str, bool]] = []

    def append(self, item: Item) -> None:
        self.items.append(item)
        self.fresh += 1

    def close(self, reason: str, evict: Optional[int] = None, complete: bool = True) -> None:
        self.closed.append((tuple(self.items), reason, complete))
        self.items = [] if evict is None else self.items[evict:]
        self.fresh = 0

    def take_closed(self) -> List[Tuple[Tuple[Item, ...], str, bool]]:
        closed, self.closed = self.closed, []
        return closed


class WindowPolicy:
    """The trigger policy: sees each tuple in order and decides when the window closes."""

    def admit(self, buffer: WindowBuffer, item: Item) -> None:
        """Add ``item`` to ``buffer``, closing windows before or after as the policy says."""
        raise NotImplementedError

    def deadline_micros(self, buffer: WindowBuffer) -> Optional[int]:
        """The event time at which the open window closes without a new tuple, if any."""
        return None

    def expire(self, buffer: WindowBuffer) -> None:
        """Close the open window because the watermark reached its deadline."""


def build_window(key: Any, items: Sequence[Item], reason: str, complete: bool,
                 combine_fn: Optional[core.CombineFn]) -> PolicyWindow:
    """The :class:`PolicyWindow` for ``items``: their values, or their aggregate."""
    values = tuple(item.value for item in items)
    return PolicyWindow(
        key=key,
        value=values if combine_fn is None else combine_fn.apply(values),
        size=len(values),
        first_timestamp=items[0].timestamp_micros / 1e6 if items else None,
        last_timestamp=items[-1].timestamp_micros / 1e6 if items else None,
        reason=reason,
        complete=complete,
    )


def sort_items(items: Iterable[Item]) -> List[Item]:
    """Ascending event time, ties broken by encoded bytes: the same order on every runner."""
    return sorted(items, key=lambda item: (item.timestamp_micros, item.encoded))


_ENCODED_ITEM = coders.TupleCoder((coders.VarIntCoder(), coders.BytesCoder()))

# Timers reach the SDK in whole milliseconds (Beam's portable timer encoding), so every
# wake-up is put on the millisecond grid: rounded up, so that no tuple is released before
# the watermark has passed it, and no later than the window's last wake-up.
_MILLI = 1000


def _last_wake(window: Any) -> int:
    return window.max_timestamp().micros // _MILLI * _MILLI


def _wake_time(micros: int, window: Any) -> int:
    return min(-(-micros // _MILLI) * _MILLI, _last_wake(window))


class _OrderedWindowPolicyFn(beam.DoFn):
    """Runs a :class:`WindowPolicy` per key over tuples released in event-time order."""

    PENDING = BagStateSpec("pending", _ENCODED_ITEM)
    OPEN_WINDOW = ReadModifyWriteStateSpec(
        "open_window", coders.TupleCoder((coders.ListCoder(_ENCODED_ITEM), coders.VarIntCoder()))
    )
    WAKE_AT = ReadModifyWriteStateSpec("wake_at", coders.VarIntCoder())
    RELEASED_THROUGH = ReadModifyWriteStateSpec("released_through", coders.VarIntCoder())
    WAKE = TimerSpec("wake", TimeDomain.WATERMARK)

    def __init__(self, policy: WindowPolicy, value_coder: coders.Coder,
                 combine_fn: Optional[core.CombineFn]) -> None:
        self._policy = policy
        self._value_coder = value_coder
        self._combine_fn = combine_fn
        self._late_tuples = Metrics.counter(METRICS_NAMESPACE, "late_tuples")
        self._partial_windows = Metrics.counter(METRICS_NAMESPACE, "end_of_input_windows")

    def setup(self) -> None:
        if self._combine_fn is not None:
            self._combine_fn.setup()

    def teardown(self) -> None:
        if self._combine_fn is not None:
            self._combine_fn.teardown()

    def process(
        self,
        element: Tuple[Any, Any],
        timestamp=beam.DoFn.TimestampParam,
        window=beam.DoFn.WindowParam,
        pending=beam.DoFn.StateParam(PENDING),
        wake_at=beam.DoFn.StateParam(WAKE_AT),
        released_through=beam.DoFn.StateParam(RELEASED_THROUGH),
        wake=beam.DoFn.TimerParam(WAKE),
    ):
        key, value = element
        micros = timestamp.micros
        encoded = self._value_coder.encode(value)
        released = released_through.read()
        if released is not None and micros <= released:
            # Adding it now would reorder tuples this key has already windowed.
            self._late_tuples.inc()
            yield build_window(key, [Item(micros, encoded, value)], LATE, False, self._combine_fn)
            return
        pending.add((micros, encoded))
        wake_micros = _wake_time(micros, window)
        current = wake_at.read()
        if current is None or wake_micros < current:
            wake.set(Timestamp(micros=wake_micros))
            wake_at.write(wake_micros)

    @on_timer(WAKE)
    def on_wake(
        self,
        key=beam.DoFn.KeyParam,
        fired_at=beam.DoFn.TimestampParam,
        window=beam.DoFn.WindowParam,
        pending=beam.DoFn.StateParam(PENDING),
        open_window=beam.DoFn.StateParam(OPEN_WINDOW),
        wake_at=beam.DoFn.StateParam(WAKE_AT),
        released_through=beam.DoFn.StateParam(RELEASED_THROUGH),
        wake=beam.DoFn.TimerParam(WAKE),
    ):
        now = fired_at.micros
        at_end = now >= _last_wake(window)
        ready, waiting = [], []
        for micros, encoded in pending.read():
            (ready if micros <= now or at_end else waiting).append((micros, encoded))
        pending.clear()
        for entry in waiting:
            pending.add(entry)

        stored = open_window.read()
        buffer = WindowBuffer(
            [self._decoded(entry) for entry in stored[0]] if stored else (),
            stored[1] if stored else 0,
        )
        for item in sort_items(self._decoded(entry) for entry in ready):
            self._policy.admit(buffer, item)
        deadline = self._policy.deadline_micros(buffer)
        if deadline is not None and (deadline <= now or at_end):
            self._policy.expire(buffer)
        previous = released_through.read()
        released_through.write(now if previous is None else max(previous, now))

        if at_end:
            if buffer.fresh:
                self._partial_windows.inc()
                buffer.close(END_OF_INPUT, complete=False)
            for state in (pending, open_window, wake_at, released_through):
                state.clear()
        else:
            open_window.write(([(i.timestamp_micros, i.encoded) for i in buffer.items],
                               buffer.fresh))
            candidates = [_wake_time(micros, window) for micros, _ in waiting]
            deadline = self._policy.deadline_micros(buffer)
            if deadline is not None:
                candidates.append(_wake_time(deadline, window))
            if buffer.fresh:
                # Wakes at the end of the window to emit what no window emitted yet.
                candidates.append(_last_wake(window))
            if candidates:
                wake.set(Timestamp(micros=min(candidates)))
                wake_at.write(min(candidates))
            else:
                wake_at.clear()
        for items, reason, complete in buffer.take_closed():
            yield build_window(key, items, reason, complete, self._combine_fn)

    def _decoded(self, entry: Tuple[int, bytes]) -> Item:
        micros, encoded = entry
        return Item(micros, encoded, self._value_coder.decode(encoded))


def value_coder_of(keyed: beam.PCollection) -> coders.Coder:
    """The coder Beam would use for the values of a keyed PCollection."""
    coder = coders.registry.get_coder(keyed.element_type)
    if coder.is_kv_coder():
        return coder.value_coder()
    return coders.registry.get_coder(typehints.Any)


def as_combine_fn(combine_fn: Any) -> Optional[core.CombineFn]:
    """Validates ``combine_fn``: None, a CombineFn, or a callable over an iterable."""
    if combine_fn is None:
        return None
    if isinstance(combine_fn, core.CombineFn) or callable(combine_fn):
        return core.CombineFn.maybe_from_callable(combine_fn)
    raise TypeError(
        f"combine_fn={combine_fn!r} is neither a CombineFn nor a callable; pass e.g. "
        "beam.combiners.MeanCombineFn(), sum, or None to get the window's elements"
    )


class ApplyWindowPolicy(beam.PTransform):
    """Runs ``policy`` per key of a keyed (key, value) PCollection; emits PolicyWindows.

    The building block of CountWindow, DeltaWindow, PunctuationWindow and event-time
    TimeWindow; see the module docstring for order, lateness and timestamps.
    """

    def __init__(self, policy: WindowPolicy, combine_fn: Any = None,
                 label: Optional[str] = None) -> None:
        super().__init__(label)
        if not isinstance(policy, WindowPolicy):
            raise TypeError(f"policy={policy!r} is not a WindowPolicy")
        self._policy = policy
        self._combine_fn = as_combine_fn(combine_fn)

    def expand(self, keyed: beam.PCollection) -> beam.PCollection:
        return keyed | "OrderAndWindow" >> beam.ParDo(
            _OrderedWindowPolicyFn(self._policy, value_coder_of(keyed), self._combine_fn)
        )
