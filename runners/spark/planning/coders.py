"""Windowed values with microsecond timestamps, on the streaming runner's data plane.

Imported by :mod:`runners.spark.worker.components`, so every process that builds a stage's coders
knows this coder's URN, whichever task it runs.

Beam's portable windowed-value and timer coders (``beam:coder:windowed_value:v1``,
``beam:coder:timer:v1``) keep timestamps in
milliseconds: a pane at a window's end, ``9.999999``, would reach the next stage as
``9.999``, and a TestStream test would see other panes than on the DirectRunner (which never
encodes). In streaming, the runner rewrites every windowed-value coder of the plan to this
one: the same layout, with the timestamp as signed 64-bit microseconds. Only the runner and
its own SDK harness read these bytes, so nothing outside is affected.
"""

from __future__ import annotations

from typing import Any

from apache_beam.coders import coders
from apache_beam.utils import windowed_value

from runners.spark.beam_internals import (
    BooleanCoderImpl,
    PaneInfoCoderImpl,
    StreamCoderImpl,
    TupleSequenceCoderImpl,
)

#: The coder URN the streaming plan uses instead of ``beam:coder:windowed_value:v1``.
MICROS_WINDOWED_VALUE_URN = "beam:coder:spark_runner:windowed_value_micros:v1"
#: ... and instead of ``beam:coder:timer:v1`` (a timer at ``end + 1us`` must not fire at
#: ``end``: a DoFn comparing its timer's timestamp would re-arm it forever).
MICROS_TIMER_URN = "beam:coder:spark_runner:timer_micros:v1"


class MicrosWindowedValueCoderImpl(StreamCoderImpl):
    """Timestamp (int64 micros), windows, pane, value: exact to the microsecond."""

    def __init__(self, value_impl: Any, window_impl: Any) -> None:
        self._value = value_impl
        self._windows = TupleSequenceCoderImpl(window_impl)
        self._pane = PaneInfoCoderImpl()

    def encode_to_stream(self, value: Any, out: Any, nested: bool) -> None:
        out.write_bigendian_int64(value.timestamp_micros)
        self._windows.encode_to_stream(value.windows, out, True)
        self._pane.encode_to_stream(value.pane_info, out, True)
        self._value.encode_to_stream(value.value, out, nested)

    def decode_from_stream(self, in_stream: Any, nested: bool) -> Any:
        timestamp = in_stream.read_bigendian_int64()
        windows = self._windows.decode_from_stream(in_stream, True)
        pane_info = self._pane.decode_from_stream(in_stream, True)
        value = self._value.decode_from_stream(in_stream, nested)
        return windowed_value.create(value, timestamp, windows, pane_info)


class MicrosWindowedValueCoder(coders.WindowedValueCoder):
    """A ``WindowedValueCoder`` whose timestamps keep their microseconds."""

    def _create_impl(self) -> MicrosWindowedValueCoderImpl:
        return MicrosWindowedValueCoderImpl(
            self.wrapped_value_coder.get_impl(), self.window_coder.get_impl())

    def to_runner_api_parameter(self, context):
        return MICROS_WINDOWED_VALUE_URN, None, self._get_component_coders()


@coders.Coder.register_urn(MICROS_WINDOWED_VALUE_URN, None)
def _from_runner_api(unused_payload, components, unused_context) -> MicrosWindowedValueCoder:
    return MicrosWindowedValueCoder(components[0], components[1])


class MicrosTimerCoderImpl(StreamCoderImpl):
    """Beam's timer layout (``TimerCoderImpl``) with int64 microsecond timestamps."""

    def __init__(self, key_impl: Any, window_impl: Any) -> None:
        self._key = key_impl
        self._tag = coders.StrUtf8Coder().get_impl()
        self._windows = TupleSequenceCoderImpl(window_impl)
        self._bool = BooleanCoderImpl()
        self._pane = PaneInfoCoderImpl()

    def encode_to_stream(self, value: Any, out: Any, nested: bool) -> None:
        self._key.encode_to_stream(value.user_key, out, True)
        self._tag.encode_to_stream(value.dynamic_timer_tag, out, True)
        self._windows.encode_to_stream(value.windows, out, True)
        self._bool.encode_to_stream(value.clear_bit, out, True)
        if not value.clear_bit:
            out.write_bigendian_int64(value.fire_timestamp.micros)
            out.write_bigendian_int64(value.hold_timestamp.micros)
            self._pane.encode_to_stream(value.paneinfo, out, True)

    def decode_from_stream(self, in_stream: Any, nested: bool) -> Any:
        from apache_beam.transforms import userstate
        from apache_beam.utils.timestamp import Timestamp

        user_key = self._key.decode_from_stream(in_stream, True)
        tag = self._tag.decode_from_stream(in_stream, True)
        windows = self._windows.decode_from_stream(in_stream, True)
        clear_bit = self._bool.decode_from_stream(in_stream, True)
        if clear_bit:
            return userstate.Timer(user_key=user_key, dynamic_timer_tag=tag, windows=windows,
                                   clear_bit=True, fire_timestamp=None, hold_timestamp=None,
                                   paneinfo=None)
        fire = Timestamp(micros=in_stream.read_bigendian_int64())
        hold = Timestamp(micros=in_stream.read_bigendian_int64())
        return userstate.Timer(user_key=user_key, dynamic_timer_tag=tag, windows=windows,
                               clear_bit=False, fire_timestamp=fire, hold_timestamp=hold,
                               paneinfo=self._pane.decode_from_stream(in_stream, True))


class MicrosTimerCoder(coders.FastCoder):
    """Beam's timer coder with microsecond timestamps."""

    def __init__(self, key_coder: Any, window_coder: Any) -> None:
        self._key_coder = key_coder
        self._window_coder = window_coder

    def _get_component_coders(self):
        return [self._key_coder, self._window_coder]

    def _create_impl(self) -> MicrosTimerCoderImpl:
        return MicrosTimerCoderImpl(self._key_coder.get_impl(), self._window_coder.get_impl())

    def is_deterministic(self) -> bool:
        return self._key_coder.is_deterministic() and self._window_coder.is_deterministic()

    def __eq__(self, other: Any) -> bool:
        return (type(self) == type(other) and self._key_coder == other._key_coder
                and self._window_coder == other._window_coder)

    def __hash__(self) -> int:
        return hash(type(self)) + hash(self._key_coder) + hash(self._window_coder)


coders.Coder.register_structured_urn(MICROS_TIMER_URN, MicrosTimerCoder)


def use_microsecond_timestamps(components: Any, windowed_value_urn: str,
                               timer_urn: str) -> None:
    """Rewrite, in place, every windowed-value and timer coder of ``components``."""
    for coder in components.coders.values():
        if coder.spec.urn == windowed_value_urn:
            coder.spec.urn = MICROS_WINDOWED_VALUE_URN
        elif coder.spec.urn == timer_urn:
            coder.spec.urn = MICROS_TIMER_URN
