"""One step of a chain as the chain's loop calls it, built from its ``PTransform`` proto in
the task: what to call per element and with which arguments, how Beam's output handler
treats what it returns, and its DoFn's bundle and lifecycle methods.

A ``ParDo``'s call is Beam's: its function (the user's own for ``Map``, ``Filter``,
``MapTuple`` and ``FlatMapTuple``, whose wrappers only call it; the DoFn's ``process``
otherwise) with the arguments Beam's invoker gives it (:func:`process_arguments`: the
element, its timestamp, window and pane, and the transform's extra arguments); once per
window of its element when it asks for the window. A ``WindowInto`` and a lifted
combine's precombine are steps of their own kinds.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Callable, Optional, Tuple

from apache_beam.transforms.core import CombineFn, Windowing
from apache_beam.transforms.window import FixedWindows, GlobalWindows, SlidingWindows

from runners.spark.beam_internals import (
    MetricsContainer,
    NameContext,
    TaggedOutput,
    TimestampedValue,
    WindowedValue,
    WindowFn,
    beam_runner_api_pb2,
    bundle_methods,
    dofn_data,
    is_callable_wrapper,
    process_arguments,
    process_asks_for_window,
    process_is_generator,
    proto_utils,
    unwrapped_function,
)
from runners.spark.chains.planning import PAR_DO_URN, PRECOMBINE_URN
from runners.spark.chains.precombine import ChainedPrecombine
from runners.spark.chains.window_assignment import fixed_windows_parts, windows_at_function

_LOGGER = logging.getLogger(__name__)
_STANDARD_WINDOW_FNS = (GlobalWindows, FixedWindows, SlidingWindows)
#: What a step's function may return that Beam's output handler does not simply wrap.
SPECIAL_RESULTS = (TaggedOutput, WindowedValue, TimestampedValue)


def with_step_name(error: BaseException, step_name: str) -> BaseException:
    """``error`` as Beam's ``DoFnRunner`` re-raises a step's exception (Beam 2.77): the same
    type with `` [while running 'step']`` appended to its first argument (a RuntimeError
    naming it when that cannot be built), marked so no enclosing step names itself too;
    raised from the ``except`` block that caught the original, which is chained."""
    annotation = f" [while running '{step_name}']"
    try:
        tagged = type(error)(error.args[0] + annotation, *error.args[1:])
        tagged._tagged_with_step = True
    except Exception:  # noqa: BLE001 - Beam falls back the same way for any failure
        tagged = RuntimeError(
            traceback.format_exception_only(type(error), error)[-1].strip() + annotation)
        tagged._tagged_with_step = True
    tagged = tagged.with_traceback(error.__traceback__)
    _LOGGER.exception(tagged)
    return tagged


class _FirstOutputCheck:
    """Beam refuses a ``str``, ``bytes`` or ``dict`` returned by a user DoFn's ``process``
    (not Map's, not a generator's), looking at the first call only."""

    def __init__(self) -> None:
        self.pending = True

    def __call__(self, results: Any) -> None:
        self.pending = False
        if isinstance(results, (str, bytes, dict)):
            raise TypeError(
                f"Returning a {type(results).__name__} from a ParDo or FlatMap is not "
                f"allowed. Please use list({results!r}) if you really want this behavior.")


class ChainedStep:
    """One chained step (``kind``: ``Map``, ``Filter``, ``MapTuple``, ``FlatMapTuple``,
    ``process``, ``windows`` or ``precombine``), from its ``PTransform`` proto."""

    def __init__(self, factory: Any, transform_id: str, transform: Any) -> None:
        self.transform_id = transform_id
        self.name = transform.unique_name
        self.output_tag, self.output = next(iter(transform.outputs.items()))
        self.metrics = MetricsContainer(NameContext(self.name, transform_id).metrics_name())
        self.dofn: Any = None
        self.start_bundle: Optional[Callable[[], Any]] = None
        self.finish_bundle: Optional[Callable[[], Any]] = None
        self.per_window = False
        if transform.spec.urn == PAR_DO_URN:
            self._par_do(factory, transform)
        elif transform.spec.urn == PRECOMBINE_URN:
            payload = proto_utils.parse_Bytes(transform.spec.payload,
                                              beam_runner_api_pb2.CombinePayload)
            self.kind = "precombine"
            self.combine_fn = CombineFn.from_runner_api(payload.combine_fn, factory.context)
            self.combiner = ChainedPrecombine(self.combine_fn,
                                              factory.get_input_windowing(transform))
        else:  # a WindowInto (the planning chains no other kind)
            windowing = Windowing.from_runner_api(
                beam_runner_api_pb2.WindowingStrategy.FromString(transform.spec.payload),
                factory.context)
            self.kind = "windows"
            self.windows_at = windows_at_function(windowing.windowfn)
            self.into_global = type(windowing.windowfn) is GlobalWindows
            self.fixed = fixed_windows_parts(windowing.windowfn)

    def _par_do(self, factory: Any, transform: Any) -> None:
        payload = proto_utils.parse_Bytes(transform.spec.payload,
                                          beam_runner_api_pb2.ParDoPayload)
        dofn, args, kwargs, _, windowing = dofn_data(payload)
        if windowing is None:  # as the SDK harness does: the main input's windowing
            input_pcollection = next(iter(transform.inputs.values()))
            windowing = factory.context.windowing_strategies.get_by_id(
                factory.descriptor.pcollections[input_pcollection].windowing_strategy_id)
        self.dofn = dofn
        self.window_fn = windowing.windowfn
        self.windows_at = (windows_at_function(self.window_fn)
                           if type(self.window_fn) in _STANDARD_WINDOW_FNS else None)
        self.arguments, self.keywords = process_arguments(dofn, args, kwargs)
        self.per_window = process_asks_for_window(dofn)
        self.start_bundle, self.finish_bundle = bundle_methods(dofn)
        unwrapped = unwrapped_function(dofn)
        if unwrapped is not None and (unwrapped[0] in ("Map", "Filter") or (
                self.arguments == [("element", None)] and not self.keywords)):
            self.kind, self.function = unwrapped
        else:
            self.kind, self.function = "process", dofn.process
        self.check_output = not (is_callable_wrapper(dofn) or process_is_generator(dofn))
        self.check_first_output = _FirstOutputCheck()

    def _untagged(self, result: Any) -> Tuple[Optional[str], Any]:
        """A ``TaggedOutput``'s tag and value; (None, ``result``) for any other result."""
        if not isinstance(result, TaggedOutput):
            return None, result
        if not isinstance(result.tag, str):
            raise TypeError(f"In {self.name}, tag {result.tag} is not a string")
        return result.tag, result.value

    def resolve(self, carrier: Any, result: Any) -> Optional[WindowedValue]:
        """What Beam's output handler makes of a ``TaggedOutput``, ``WindowedValue`` or
        ``TimestampedValue`` result: the new element (None: sent to an undeclared output,
        which Beam drops)."""
        tag, result = self._untagged(result)
        if isinstance(result, WindowedValue):
            element = result
            if len(carrier.windows) != 1:
                element.windows *= len(carrier.windows)
        elif isinstance(result, TimestampedValue):
            if self.windows_at is not None:  # a standard WindowFn: what assign gives
                timestamp = result.timestamp  # kept, as Beam's output handler keeps it
                element = WindowedValue(result.value, timestamp,
                                        self.windows_at(timestamp.micros))
            else:
                element = WindowedValue(result.value, result.timestamp, self.window_fn.assign(
                    WindowFn.AssignContext(result.timestamp, result.value)))
            if len(carrier.windows) != 1:
                element.windows *= len(carrier.windows)
        else:
            element = carrier.with_value(result)
        if tag is not None and tag != self.output_tag:
            return None
        return element

    def finish_bundle_output(self, result: Any) -> Optional[WindowedValue]:
        """What Beam's output handler makes of what ``finish_bundle`` outputs: a
        ``WindowedValue``, maybe tagged (None: sent to an undeclared output, dropped)."""
        tag, result = self._untagged(result)
        if not isinstance(result, WindowedValue):
            raise RuntimeError("Finish Bundle should only output WindowedValue type but got "
                               f"{type(result)}")
        if tag is not None and tag != self.output_tag:
            return None
        return result
