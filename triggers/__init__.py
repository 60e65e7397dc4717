"""The *when* and the *how*: trigger presets, accumulation modes, validation of unsafe
combinations, the four-question composite, and pane helpers.

>>> from triggers import WindowedAggregation, early_and_late_firings, How
>>> from transforms import SumFn, fixed_windows
>>> aggregation = WindowedAggregation(
...     what=SumFn(), where=fixed_windows(60),
...     when=early_and_late_firings(early_every_count=2, allowed_lateness=120),
...     how=How.ACCUMULATING)
"""

import importlib
from typing import Any

# Exports resolve on first use: transforms/ imports triggers.panes, and triggers.model
# imports transforms/, so an eager import here would make the two packages a cycle.
_EXPORTS = {
    "DescribePanes": "triggers.panes",
    "pane_record": "triggers.panes",
    "When": "triggers.presets",
    "at_watermark": "triggers.presets",
    "early_and_late_firings": "triggers.presets",
    "every_n_elements": "triggers.presets",
    "every_period": "triggers.presets",
    "micro_batch": "triggers.presets",
    "How": "triggers.accumulation",
    "is_retractable": "triggers.validation",
    "validate": "triggers.validation",
    "WindowedAggregation": "triggers.model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'triggers' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
