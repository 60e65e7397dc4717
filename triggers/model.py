"""The Dataflow model in one transform: :class:`WindowedAggregation` (what, where, when, how).

The four questions a streaming aggregation must answer:

1. **What** is computed? ``what``: a CombineFn (sum, count, mean, top...) applied per key.
2. **Where** in event time? ``where``: a WindowFn (fixed, sliding, sessions, global).
3. **When** in processing time are results materialized? ``when``: a
   :class:`~triggers.presets.When` (trigger + allowed lateness): at the watermark, every n
   elements, every period, early and late firings around the watermark, micro-batch.
4. **How** do refinements of one window relate? ``how``: a
   :class:`~triggers.accumulation.How`: discarding, accumulating, or accumulating and
   retracting.

Data later than the window's end plus the allowed lateness is dropped, and counted: every
WindowedAggregation also applies :class:`~triggers.lateness.CountDroppedLateData`, so
``result.metrics()`` has the counter ``lateness/dropped_late_data``, and the dropped
elements are available as :attr:`WindowedAggregation.dropped` after the transform is applied.

Example:

>>> import apache_beam as beam
>>> from apache_beam.transforms import window
>>> from triggers.presets import at_watermark
>>> from triggers.accumulation import How
>>> with beam.Pipeline() as p:
...     totals = (p
...               | beam.Create([("red", 3), ("red", 4)])
...               | beam.Map(lambda kv: window.TimestampedValue(kv, 5))
...               | WindowedAggregation(what=sum, where=window.FixedWindows(60),
...                                     when=at_watermark(), how=How.DISCARDING))
"""

from __future__ import annotations

from typing import Any, Optional

import apache_beam as beam
from apache_beam.transforms.window import WindowFn
from apache_beam.utils.timestamp import Duration

from triggers.lateness import CountDroppedLateData
from triggers.retractions import WithRetractions
from triggers.accumulation import How
from triggers.presets import When
from triggers.validation import validate


class WindowedAggregation(beam.PTransform):
    """Aggregate keyed ``(key, value)`` input per key and window, firing panes as ``when``
    says and relating them as ``how`` says.

    Output: ``(key, aggregate)`` panes, or :class:`~triggers.retractions.Refinement`
    records when ``how`` is ``ACCUMULATING_AND_RETRACTING``. Invalid combinations raise
    ValueError/TypeError when the transform is constructed, or (for rules that depend on
    the input being bounded or not) when it is applied; see :mod:`triggers.validation`.
    """

    def __init__(self, what: Any, where: WindowFn, when: When, how: How = How.DISCARDING,
                 label: Optional[str] = None) -> None:
        super().__init__(label)
        validate(what, where, when, how)
        self.what = what
        self.where = where
        self.when = when
        self.how = how
        #: DroppedElement records (global window) of the data dropped for lateness; set
        #: when the transform is applied.
        self.dropped: Optional[beam.PCollection] = None

    def expand(self, pcoll):
        validate(self.what, self.where, self.when, self.how, bounded=pcoll.is_bounded)
        lateness = Duration.of(self.when.allowed_lateness)
        panes = (
            pcoll
            | "Where" >> beam.WindowInto(
                self.where, trigger=self.when.trigger,
                accumulation_mode=self.how.beam_mode, allowed_lateness=lateness)
            | "What" >> beam.CombinePerKey(self.what)
        )
        self.dropped = pcoll | "CountDroppedLateData" >> CountDroppedLateData(
            self.where, self.when.allowed_lateness)
        if self.how.retracting:
            panes = panes | "WithRetractions" >> WithRetractions()
        return panes
