"""Reject what/where/when/how combinations that cannot do what they say, at construction time.

Each rule names the bad value and what to change. The rules:

1. ``what`` is a CombineFn or a callable; ``where`` a WindowFn; ``when`` a :class:`When`;
   ``how`` a :class:`How` (TypeError otherwise).
2. ``allowed_lateness`` is a finite number of seconds >= 0.
3. Late firings with ``allowed_lateness == 0`` in non-merging windows can never fire (data
   behind the watermark is dropped at once).
4. ``ACCUMULATING_AND_RETRACTING`` needs a retractable ``what`` (:func:`is_retractable`).
5. A trigger that fires only at the watermark, in the global window, on unbounded input,
   never fires before the end of input: use every_n_elements / every_period, or a window.
6. A trigger that may *finish* (e.g. ``AfterCount(5)`` not wrapped in ``Repeatedly``) stops
   the window: everything after its last firing would be dropped silently.
7. A trigger with no watermark firing (count or processing-time only, e.g.
   every_n_elements(n > 1), every_period) in an event-time window, on unbounded input,
   leaves the window's last partial pane buffered forever: Beam Python's trigger driver
   has no end-of-window flush (the DirectRunner reports "pipeline stall" at end of input).
   Use early_and_late_firings / micro_batch, which end with a pane at the watermark.
8. Processing-time delays are whole seconds (Beam's proto round trip truncates them).
9. Merging windows (sessions) with a trigger that finishes at the watermark
   (``AfterWatermark`` without late firings): Beam drops, silently, data that merges into a
   session after it fired (the merged window inherits the finished window's tombstone).
10. A processing-time trigger on bounded (batch) input: batch execution has no
    processing-time clock (Beam's batch runner fails on it); use an event-time or count
    trigger, or run in streaming.

>>> from apache_beam.transforms.window import FixedWindows
>>> from triggers.presets import at_watermark
>>> from triggers.accumulation import How
>>> validate(sum, FixedWindows(60), at_watermark(), How.DISCARDING, bounded=False)
"""

from __future__ import annotations

import numbers
from decimal import Decimal
from fractions import Fraction
from typing import Any, Iterator, Optional

from apache_beam.transforms.core import CombineFn, Windowing
from apache_beam.transforms.trigger import (
    AfterAll,
    AfterAny,
    AfterCount,
    AfterEach,
    AfterProcessingTime,
    AfterWatermark,
    Always,
    DataLossReason,
    DefaultTrigger,
    Repeatedly,
    TriggerFn,
)
from apache_beam.transforms.window import GlobalWindows, WindowFn

from triggers.accumulation import How
from triggers.presets import When, check_lateness

_NUMERIC_TYPES = (int, float, complex, Decimal, Fraction)
_RETRACTABLE_BUILTINS = (sum, min, max)


def subtriggers(trigger: TriggerFn) -> Iterator[TriggerFn]:
    """``trigger`` and every trigger nested in it (Repeatedly, AfterAny, AfterWatermark...)."""
    yield trigger
    children = []
    if isinstance(trigger, Repeatedly):
        children = [trigger.underlying]
    elif isinstance(trigger, AfterWatermark):
        children = [part for part in (trigger.early, trigger.late) if part is not None]
    elif isinstance(trigger, (AfterAny, AfterAll, AfterEach)):
        children = list(trigger.triggers)
    for child in children:
        yield from subtriggers(child)


def fires_at_watermark(trigger: TriggerFn) -> bool:
    """True if ``trigger`` fires when the watermark passes the window's end (or leaves nothing
    buffered because it fires for every element)."""
    if isinstance(trigger, (AfterWatermark, DefaultTrigger, Always)):
        return True
    if isinstance(trigger, AfterCount):
        return trigger.count == 1
    if isinstance(trigger, Repeatedly):
        return fires_at_watermark(trigger.underlying)
    if isinstance(trigger, AfterAll):
        return all(fires_at_watermark(part) for part in trigger.triggers)
    if isinstance(trigger, (AfterAny, AfterEach)):
        return any(fires_at_watermark(part) for part in trigger.triggers)
    return False


def fires_only_at_watermark(trigger: TriggerFn) -> bool:
    """True for AfterWatermark without early firings and for Beam's default trigger."""
    if isinstance(trigger, DefaultTrigger):
        return True
    return isinstance(trigger, AfterWatermark) and trigger.early is None


def is_retractable(what: Any) -> bool:
    """Whether ``what``'s outputs can be retracted: negated and summed downstream.

    In order: a ``retractable`` attribute on the CombineFn decides (set it to True on your
    own CombineFn whose outputs support ``-x`` and ``x + y``); else the CombineFn's declared
    output type is a number (int, float, complex, Decimal, Fraction, numbers.Number), as for
    Beam's CountCombineFn and MeanCombineFn; else the builtins sum, min and max are.
    Lists (TopCombineFn), sets, dicts and strings are not.

    >>> from apache_beam.transforms.combiners import CountCombineFn, TopCombineFn
    >>> is_retractable(CountCombineFn()), is_retractable(sum), is_retractable(TopCombineFn(3))
    (True, True, False)
    """
    declared = getattr(what, "retractable", None)
    if isinstance(declared, bool):
        return declared
    if what in _RETRACTABLE_BUILTINS:
        return True
    if isinstance(what, CombineFn):
        hints = what.get_type_hints()
        outputs = hints.output_types[0] if hints and hints.output_types else ()
        return len(outputs) == 1 and isinstance(outputs[0], type) and (
            issubclass(outputs[0], _NUMERIC_TYPES) or issubclass(outputs[0], numbers.Number))
    return False


def validate(what: Any, where: WindowFn, when: When, how: How,
             bounded: Optional[bool] = None) -> None:
    """Raise TypeError/ValueError for an invalid combination; see the module's rules.

    ``bounded`` is the input's boundedness (``pcoll.is_bounded``); None skips the rules
    that depend on it (5, 7 and 10).
    """
    if not (isinstance(what, CombineFn) or callable(what)):
        raise TypeError(
            f"what={what!r}: must be a CombineFn (e.g. CountCombineFn()) or a callable "
            "such as sum.")
    if not isinstance(where, WindowFn):
        raise TypeError(
            f"where={where!r}: must be a Beam WindowFn, e.g. fixed_windows(60) or sessions(600).")
    if not isinstance(when, When):
        raise TypeError(
            f"when={when!r}: must be a triggers.presets.When, e.g. at_watermark() or "
            "When(trigger, allowed_lateness).")
    if not isinstance(how, How):
        raise TypeError(f"how={how!r}: must be a triggers.accumulation.How, e.g. How.DISCARDING.")
    check_lateness(when.allowed_lateness)
    trigger = when.trigger
    parts = list(subtriggers(trigger))
    for part in parts:
        if isinstance(part, AfterProcessingTime) and part.delay != int(part.delay):
            raise ValueError(
                f"{part!r}: processing-time delays must be whole seconds (Beam's pipeline "
                f"proto round trip turns {part.delay} into {int(part.delay)}).")
    merging = where.is_merging()
    if when.allowed_lateness == 0 and not merging and any(
            isinstance(part, AfterWatermark) and part.late is not None for part in parts):
        raise ValueError(
            f"{trigger!r} with allowed_lateness=0: late firings can never fire, because data "
            "behind the watermark is dropped at once. Set allowed_lateness (seconds) to how "
            "long late data is accepted, or remove the late firings.")
    if how.retracting and not is_retractable(what):
        raise ValueError(
            f"how=ACCUMULATING_AND_RETRACTING needs a what whose outputs can be retracted "
            f"(negated and summed: numbers), got {what!r}. Use how=ACCUMULATING, or set "
            "`retractable = True` on your CombineFn if its outputs support -x and x + y.")
    windowing = Windowing(where, triggerfn=trigger, accumulation_mode=how.beam_mode,
                          allowed_lateness=when.allowed_lateness)
    if trigger.may_lose_data(windowing) & DataLossReason.MAY_FINISH:
        raise ValueError(
            f"{trigger!r} finishes after it fires, and everything that arrives for the window "
            "afterwards would be dropped silently. Wrap it in Repeatedly(...), or use a preset "
            "(every_n_elements, every_period, early_and_late_firings).")
    if merging and isinstance(trigger, AfterWatermark) and trigger.late is None:
        raise ValueError(
            f"{trigger!r} finishes at the ON_TIME pane, and {type(where).__name__} merges "
            "windows after they fired: Beam's trigger driver would silently drop data that "
            "merges into a fired window. Use at_watermark() or early_and_late_firings(..., "
            "late_every_count=1, allowed_lateness=...), whose triggers never finish.")
    if bounded is None:
        return
    if bounded:
        timed = [part for part in parts if isinstance(part, AfterProcessingTime)]
        if timed:
            raise ValueError(
                f"{timed[0]!r} on bounded (batch) input: a batch pipeline has no "
                "processing-time clock, so processing-time firings cannot happen (Beam's batch "
                "runner fails on them). Use an event-time or count trigger (at_watermark(), "
                "early_and_late_firings(early_every_count=...)), or run with --streaming.")
        return
    global_window = isinstance(where, GlobalWindows)
    if global_window and fires_only_at_watermark(trigger):
        raise ValueError(
            f"{trigger!r} in the global window of an unbounded input never fires before the "
            "end of input (the watermark never passes the end of the global window). Use "
            "every_n_elements(n) or every_period(seconds), or window the data, e.g. "
            "where=fixed_windows(60).")
    if not global_window and not fires_at_watermark(trigger):
        raise ValueError(
            f"{trigger!r} in {type(where).__name__} never fires at the watermark, so each "
            "window's last partial pane stays buffered forever (Beam Python's trigger driver "
            "has no end-of-window flush). Use early_and_late_firings(early_every_count=..., "
            "early_every_seconds=...) or micro_batch(period), which end with a pane at the "
            "watermark, or where=global_window().")
