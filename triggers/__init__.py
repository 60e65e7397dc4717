"""The *when* and the *how*: trigger presets, allowed lateness and the data it drops,
accumulation modes and retractions, validation of unsafe combinations, the four-question
composite, and pane helpers.

>>> from triggers import WindowedAggregation, early_and_late_firings, How
>>> from transforms import SumFn, fixed_windows
>>> aggregation = WindowedAggregation(
...     what=SumFn(), where=fixed_windows(60),
...     when=early_and_late_firings(early_every_count=2, allowed_lateness=120),
...     how=How.ACCUMULATING)
"""

from triggers.accumulation import How
from triggers.lateness import CountDroppedLateData, DroppedElement
from triggers.model import WindowedAggregation
from triggers.panes import DescribePanes, pane_record
from triggers.presets import (
    When,
    at_watermark,
    early_and_late_firings,
    every_n_elements,
    every_period,
    micro_batch,
)
from triggers.retractions import Refinement, WithRetractions
from triggers.validation import is_retractable, validate

__all__ = [
    "CountDroppedLateData", "DescribePanes", "DroppedElement", "How", "Refinement", "When",
    "WindowedAggregation", "WithRetractions", "at_watermark", "early_and_late_firings",
    "every_n_elements", "every_period", "is_retractable", "micro_batch", "pane_record",
    "validate",
]
