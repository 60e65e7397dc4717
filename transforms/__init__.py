"""Reusable PTransforms: the *what* (aggregations), the *where* (windows and window policies),
edge adaptation (parsing with dead letters), splitting and merging. Lateness and retractions
belong to the *when* and the *how*: they are in :mod:`triggers`.

Import from the modules (``from transforms.aggregations import SumPerKey``) or from here.
"""

from transforms.aggregations import (
    CountCombineFn,
    CountGlobally,
    CountPerKey,
    MaxFn,
    MaxGlobally,
    MaxPerKey,
    MeanCombineFn,
    MeanGlobally,
    MeanPerKey,
    MinFn,
    MinGlobally,
    MinPerKey,
    SumFn,
    SumGlobally,
    SumPerKey,
    TopCombineFn,
    TopGlobally,
    TopPerKey,
)
from transforms.parsing import DeadLetter, ParseCsv, ParseJson
from transforms.routing import Merge, SplitBy
from transforms.windows import (
    WithEventTime,
    WithProcessingTime,
    fixed_windows,
    global_window,
    parse_event_time,
    sessions,
    sliding_windows,
)

__all__ = [
    "CountCombineFn", "CountGlobally", "CountPerKey", "MaxFn", "MaxGlobally", "MaxPerKey",
    "MeanCombineFn", "MeanGlobally", "MeanPerKey", "MinFn", "MinGlobally", "MinPerKey",
    "SumFn", "SumGlobally", "SumPerKey", "TopCombineFn", "TopGlobally", "TopPerKey",
    "DeadLetter", "ParseCsv", "ParseJson", "Merge", "SplitBy",
    "WithEventTime", "WithProcessingTime", "fixed_windows", "global_window",
    "parse_event_time", "sessions", "sliding_windows",
]
