"""The *when* of the Dataflow model: named triggers that read like the model.

A trigger answers "when, in processing time, are the results of a window materialized?".
Each preset returns a :class:`When`: a Beam trigger plus the allowed lateness it is meant
to run with, a name and a one-line description, so that a pipeline states its intent
(``when=early_and_late_firings(early_every_seconds=60, allowed_lateness=600)``) instead of
spelling out trigger trees.

=============================  ==========================================================
preset                         Beam trigger
=============================  ==========================================================
``at_watermark(L)``            ``DefaultTrigger()``: ON_TIME pane at the watermark, then
                               a LATE pane per late arrival within L seconds
``early_and_late_firings``     ``AfterWatermark(early=..., late=AfterCount(n))``
``every_n_elements(n)``        ``Repeatedly(AfterCount(n))``
``every_period(s)``            ``Repeatedly(AfterProcessingTime(s))``
``micro_batch(s)``             ``AfterWatermark(early=AfterProcessingTime(s), ...)``
=============================  ==========================================================

Only whole seconds are accepted for processing-time delays: Beam carries the delay through
the portable pipeline proto as milliseconds but reads it back with ``delay_millis // 1000``,
so a fractional delay would silently change on every runner that rebuilds the pipeline
from its proto (the DirectRunner's TestPipeline does).

Known Beam limitation (apache-beam 2.77): ``GeneralTriggerDriver.process_timer`` hands a
processing-time timer's timestamp to the trigger as if it were the watermark. Once the
processing-time clock is past a window's end while the watermark is not, an early
processing-time firing of ``AfterWatermark`` (``early_every_seconds``, ``micro_batch``)
is taken for the ON_TIME pane and finishes the window. Our tests keep the TestStream
clock below window ends; the runners reuse Beam's driver, so they share the limitation.

Example:

>>> when = early_and_late_firings(early_every_count=100, allowed_lateness=600)
>>> when.name, when.allowed_lateness
('early_and_late_firings', 600)
>>> when.trigger
AfterWatermark(early=AfterCount(100), late=AfterCount(1))
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Optional

from apache_beam.transforms.trigger import (
    AfterAny,
    AfterCount,
    AfterProcessingTime,
    AfterWatermark,
    DefaultTrigger,
    Repeatedly,
    TriggerFn,
)


@dataclass(frozen=True)
class When:
    """A trigger with the allowed lateness it runs with: the model's *when*.

    ``allowed_lateness`` is in seconds: how long after the end of a window (as measured by
    the watermark) late data is still accepted and fires LATE panes; later data is dropped
    and counted (see :mod:`triggers.lateness`).
    """

    trigger: TriggerFn
    allowed_lateness: float = 0
    name: str = "custom"
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.trigger, TriggerFn):
            raise TypeError(
                f"When.trigger must be a Beam TriggerFn (e.g. AfterWatermark()), got "
                f"{self.trigger!r}; or use a preset from triggers.presets."
            )
        check_lateness(self.allowed_lateness)


def check_lateness(allowed_lateness: float) -> None:
    """Raise unless ``allowed_lateness`` is a finite, non-negative number of seconds."""
    if isinstance(allowed_lateness, bool) or not isinstance(allowed_lateness, numbers.Real):
        raise TypeError(
            f"allowed_lateness must be a number of seconds, got {allowed_lateness!r}"
        )
    if allowed_lateness < 0 or allowed_lateness != allowed_lateness or allowed_lateness == float("inf"):
        raise ValueError(
            f"allowed_lateness={allowed_lateness!r}: must be a finite number of seconds >= 0 "
            "(0 drops everything that arrives after the watermark passed the window's end)."
        )


def _check_count(name: str, count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise ValueError(f"{name}={count!r}: must be a whole number of elements >= 1.")
    return int(count)


def _check_seconds(name: str, seconds: object) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or seconds < 1:
        raise ValueError(f"{name}={seconds!r}: must be a whole number of seconds >= 1.")
    if seconds != int(seconds):
        raise ValueError(
            f"{name}={seconds!r}: Beam keeps processing-time delays in whole seconds (the "
            f"pipeline proto is read back with delay_millis // 1000, so {seconds} would become "
            f"{int(seconds)}). Use a whole number of seconds, e.g. {max(1, round(seconds))}."
        )
    return int(seconds)


def at_watermark(allowed_lateness: float = 0) -> When:
    """Fire an ON_TIME pane when the watermark passes the end of the window, then a LATE
    pane for late data accepted within ``allowed_lateness``.

    "Fixed window, trigger at watermark" is the model's streaming mode. This is Beam's
    ``DefaultTrigger``, which never finishes: an ``AfterWatermark()`` that finishes at the
    ON_TIME pane would make Beam drop, silently, late data within the lateness and data
    that later merges into a fired session.

    >>> at_watermark().trigger
    DefaultTrigger()
    """
    check_lateness(allowed_lateness)
    description = "ON_TIME pane when the watermark passes the window's end"
    if allowed_lateness > 0:
        description += f", then a LATE pane per late arrival for {allowed_lateness}s"
    return When(DefaultTrigger(), allowed_lateness, "at_watermark", description)


def early_and_late_firings(
    early_every_count: Optional[int] = None,
    early_every_seconds: Optional[int] = None,
    late_every_count: Optional[int] = 1,
    allowed_lateness: float = 0,
) -> When:
    """Speculative EARLY panes, the ON_TIME pane at the watermark, then LATE panes.

    Early panes fire every ``early_every_count`` elements and/or every
    ``early_every_seconds`` of processing time (whichever comes first when both are
    given); late panes fire every ``late_every_count`` late elements while the window is
    within ``allowed_lateness``. ``late_every_count`` must be None when
    ``allowed_lateness`` is 0 (late firings could never fire).

    >>> early_and_late_firings(early_every_seconds=60, late_every_count=None).trigger
    AfterWatermark(early=AfterProcessingTime(delay=60))
    """
    check_lateness(allowed_lateness)
    early = []
    if early_every_count is not None:
        early.append(AfterCount(_check_count("early_every_count", early_every_count)))
    if early_every_seconds is not None:
        early.append(AfterProcessingTime(_check_seconds("early_every_seconds", early_every_seconds)))
    late = None
    if late_every_count is not None:
        late_every_count = _check_count("late_every_count", late_every_count)
        if allowed_lateness == 0:
            raise ValueError(
                f"late_every_count={late_every_count} with allowed_lateness=0: late firings can "
                "never fire, because data behind the watermark is dropped at once. Set "
                "allowed_lateness to how long late data is accepted (seconds), or pass "
                "late_every_count=None."
            )
        late = AfterCount(late_every_count)
    if not early and late is None:
        raise ValueError(
            "early_and_late_firings() without early or late firings is at_watermark(): pass "
            "early_every_count, early_every_seconds or late_every_count (with allowed_lateness)."
        )
    early_trigger = None
    if early:
        early_trigger = early[0] if len(early) == 1 else AfterAny(*early)
    parts = []
    if early_every_count is not None:
        parts.append(f"EARLY every {early_every_count} elements")
    if early_every_seconds is not None:
        parts.append(f"EARLY every {early_every_seconds}s of processing time")
    parts.append("ON_TIME at the watermark")
    if late is not None:
        parts.append(f"LATE every {late_every_count} late elements for {allowed_lateness}s")
    return When(AfterWatermark(early=early_trigger, late=late), allowed_lateness,
                "early_and_late_firings", ", ".join(parts))


def every_n_elements(n: int) -> When:
    """Fire a pane every ``n`` elements, regardless of the watermark (a count trigger).

    Meant for the global window of an unbounded stream: in an event-time window the last
    fewer-than-``n`` elements of the window would never fire (see
    :mod:`triggers.validation`); there use ``early_and_late_firings(early_every_count=n)``.

    >>> every_n_elements(3).trigger
    Repeatedly(AfterCount(3))
    """
    n = _check_count("n", n)
    return When(Repeatedly(AfterCount(n)), 0, "every_n_elements", f"a pane every {n} elements")


def every_period(seconds: int) -> When:
    """Fire a pane every ``seconds`` of processing time after the first element of a pane.

    Meant for the global window of an unbounded stream (a time-based policy in processing
    time); in event-time windows use :func:`micro_batch`.

    >>> every_period(10).trigger
    Repeatedly(AfterProcessingTime(delay=10))
    """
    seconds = _check_seconds("seconds", seconds)
    return When(Repeatedly(AfterProcessingTime(seconds)), 0, "every_period",
                f"a pane every {seconds}s of processing time")


def micro_batch(period_seconds: int, allowed_lateness: float = 0) -> When:
    """"Fixed window, trigger at period": the model's view of a micro-batch engine.

    Combine with ``where=fixed_windows(size)``: each window's result is materialized every
    ``period_seconds`` of processing time while data arrives (EARLY panes, like the batches
    of a micro-batch engine), and a final ON_TIME pane at the watermark carries the window's
    last partial batch, which a pure period trigger would leave buffered forever. Late data
    within ``allowed_lateness`` fires a LATE pane per arrival.

    >>> micro_batch(5).trigger
    AfterWatermark(early=AfterProcessingTime(delay=5))
    """
    period_seconds = _check_seconds("period_seconds", period_seconds)
    check_lateness(allowed_lateness)
    late = AfterCount(1) if allowed_lateness > 0 else None
    return When(
        AfterWatermark(early=AfterProcessingTime(period_seconds), late=late), allowed_lateness,
        "micro_batch",
        f"a pane every {period_seconds}s of processing time, final pane at the watermark",
    )
