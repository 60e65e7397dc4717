"""Runner-native window assignment for the standard non-merging WindowFns.

Beam's SDK harness executes ``WindowInto`` as a generic DoFn that calls
``WindowFn.assign`` with an ``AssignContext``: for ``FixedWindows`` that is half a dozen
``Timestamp`` objects and a new ``IntervalWindow`` per element, the largest single cost of
a windowed aggregation (measured: about a third of the fused stage's time). Runners may
assign windows natively, and for the three standard WindowFns the assignment is plain
integer arithmetic on the element's timestamp in microseconds, which is what this module
does, reusing one window object per window (windows are immutable values).

The result is the element exactly as Beam's ``WindowIntoDoFn`` emits it: same value, same
timestamp, the windows ``assign`` would return (a fresh list per element, as Beam's
output handling may extend it in place), pane ``PANE_INFO_UNKNOWN``, and one output per
window the input element was in (Beam invokes that DoFn once per input window).

Into the global window, an element already in the global window alone and with no pane
(what a source or a ``ParDo`` emits) is exactly what the assignment would give: it is
handed on as it is (every ``WriteToText`` re-windows into the global window first; that
saves a new element per element written).

Only the standard URNs are swapped (:func:`use_native_window_assignment`): a user's own
WindowFn, even a subclass of ``FixedWindows``, is pickled under another URN and keeps
Beam's generic path.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from apache_beam.transforms.core import Windowing
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    SlidingWindows,
)
from apache_beam.utils.timestamp import Timestamp

from runners.spark.beam_internals import (
    PANE_INFO_UNKNOWN,
    BeamTransformFactory,
    NameContext,
    beam_runner_api_pb2,
    common_urns,
    create_windowed_value,
    operation_specs,
    operations,
)

#: The runner-private URN the swapped ``WindowInto`` transforms carry in worker descriptors.
NATIVE_ASSIGN_WINDOWS_URN = "beam:transform:spark_runner:assign_windows:v1"

_NATIVE_WINDOW_FNS = frozenset([
    common_urns.fixed_windows.urn,
    common_urns.sliding_windows.urn,
    common_urns.global_windows.urn,
])
#: Cached windows per operation; beyond this many, the cache starts again (bounded memory
#: for long inputs with many small windows).
_WINDOW_CACHE_LIMIT = 4096

WindowsAt = Callable[[int], List[Any]]


def use_native_window_assignment(descriptor: Any) -> int:
    """Swap, in a ``ProcessBundleDescriptor``, every ``WindowInto`` of a standard
    non-merging WindowFn for the native operation; returns how many were swapped."""
    swapped = 0
    for transform in descriptor.transforms.values():
        if assigns_natively(transform):
            transform.spec.urn = NATIVE_ASSIGN_WINDOWS_URN
            swapped += 1
    return swapped


def assigns_natively(transform: Any) -> bool:
    """Whether a transform is a ``WindowInto`` of a standard non-merging WindowFn."""
    if transform.spec.urn != common_urns.primitives.ASSIGN_WINDOWS.urn:
        return False
    # The payload is a WindowIntoPayload; its window_fn field is WindowingStrategy's.
    strategy = beam_runner_api_pb2.WindowingStrategy.FromString(transform.spec.payload)
    return strategy.window_fn.urn in _NATIVE_WINDOW_FNS


def windows_at_function(window_fn: Any) -> WindowsAt:
    """A function from a timestamp in microseconds to the windows ``window_fn`` assigns.

    >>> windows_at = windows_at_function(FixedWindows(60))
    >>> windows_at(90 * 10**6) == FixedWindows(60).assign(
    ...     FixedWindows.AssignContext(Timestamp(90)))
    True
    """
    kind = type(window_fn)
    if kind is GlobalWindows:
        global_window = GlobalWindow()
        return lambda micros: [global_window]
    if kind is FixedWindows:
        return _fixed(window_fn.size.micros, window_fn.offset.micros)
    if kind is SlidingWindows:
        return _sliding(window_fn.size.micros, window_fn.period.micros, window_fn.offset.micros)
    raise TypeError(f"no native window assignment for {window_fn!r}")


def fixed_windows_parts(window_fn: Any) -> Optional[Tuple[int, int, Dict[int, Any], Any]]:
    """For ``FixedWindows``: its size and offset in microseconds, a cache of its windows by
    start, and the function that makes (and caches) the window starting at a time; None
    for any other WindowFn. For code that inlines the assignment (a chain of steps).

    >>> size, offset, cache, window = fixed_windows_parts(FixedWindows(60))
    >>> start = 90 * 10**6 - (90 * 10**6 - offset) % size
    >>> window(start) is cache[start], window(start) == IntervalWindow(60, 120)
    (True, True)
    """
    if type(window_fn) is not FixedWindows:
        return None
    size = window_fn.size.micros
    window = _window_cache(size)
    return size, window_fn.offset.micros, window.cache, window


def _window_cache(size: int) -> Callable[[int], Any]:
    cache: Dict[int, Any] = {}

    def window(start: int) -> Any:
        found = cache.get(start)
        if found is None:
            if len(cache) >= _WINDOW_CACHE_LIMIT:
                cache.clear()
            found = cache[start] = IntervalWindow(
                Timestamp(micros=start), Timestamp(micros=start + size))
        return found

    window.cache = cache
    return window


def _fixed(size: int, offset: int) -> WindowsAt:
    window = _window_cache(size)

    def windows_at(micros: int) -> List[Any]:
        return [window(micros - (micros - offset) % size)]

    return windows_at


def _sliding(size: int, period: int, offset: int) -> WindowsAt:
    window = _window_cache(size)

    def windows_at(micros: int) -> List[Any]:
        last_start = micros - (micros - offset) % period
        return [window(start) for start in range(last_start, micros - size, -period)]

    return windows_at


class _NativeAssignWindows(operations.FlattenOperation):
    """Re-windows each element with ``windows_at`` (set right after construction)."""

    windows_at: WindowsAt
    into_global = False  # the WindowFn is GlobalWindows

    def process(self, windowed_value) -> None:
        with self.scoped_process_state:
            windows = windowed_value.windows
            if (self.into_global and len(windows) == 1 and type(windows[0]) is GlobalWindow
                    and windowed_value.pane_info == PANE_INFO_UNKNOWN):
                self.output(windowed_value)
                return
            micros = windowed_value.timestamp_micros
            value = windowed_value.value
            for _ in windowed_value.windows:
                self.output(create_windowed_value(value, micros, self.windows_at(micros)))


@BeamTransformFactory.register_urn(NATIVE_ASSIGN_WINDOWS_URN, beam_runner_api_pb2.WindowingStrategy)
def _create_native_assign_windows(factory, transform_id, transform_proto, parameter, consumers):
    windowing = Windowing.from_runner_api(parameter, factory.context)
    operation = _NativeAssignWindows(
        NameContext(transform_proto.unique_name, transform_id),
        operation_specs.WorkerFlatten(None, [factory.get_only_output_coder(transform_proto)]),
        factory.counter_factory,
        factory.state_sampler,
    )
    operation.windows_at = windows_at_function(windowing.windowfn)
    operation.into_global = type(windowing.windowfn) is GlobalWindows
    return factory.augment_oldstyle_op(operation, transform_proto.unique_name, consumers)
