"""The lecture's four window policies as composite transforms over keyed (key, value) tuples.

A window is a buffer with an eviction policy and a trigger policy:

- :class:`CountWindow` -- a number of tuples (tumbling, or sliding by ``slide`` tuples);
- :class:`DeltaWindow` -- a threshold on the change of an attribute since the window began;
- :class:`PunctuationWindow` -- a special tuple closes the window;
- :class:`TimeWindow` -- a period after the first tuple, in event or processing time.

Each emits one :class:`PolicyWindow` per closed window. The count, delta, punctuation and
event-time policies run on Beam state and timers, taking each key's tuples in event-time
order; see :mod:`transforms.window_policies.buffer` for order, late tuples, the end of
input and output timestamps.

Example:

>>> import apache_beam as beam
>>> from apache_beam.testing.util import assert_that, equal_to
>>> with beam.Pipeline() as p:
...     sums = (p
...             | beam.Create([("a", n) for n in range(4)])
...             | beam.Map(lambda kv: beam.window.TimestampedValue(kv, kv[1]))
...             | CountWindow(2, combine_fn=sum)
...             | beam.Map(lambda w: w.value))
...     _ = assert_that(sums, equal_to([1, 5]))
"""

from transforms.window_policies.buffer import (
    COUNT,
    DELTA,
    END_OF_INPUT,
    LATE,
    PUNCTUATION,
    TIME,
    ApplyWindowPolicy,
    PolicyWindow,
    WindowBuffer,
    WindowPolicy,
)
from transforms.window_policies.count import CountWindow
from transforms.window_policies.delta import DeltaWindow
from transforms.window_policies.punctuation import PunctuationWindow
from transforms.window_policies.time import EVENT_TIME, PROCESSING_TIME, TimeWindow

__all__ = [
    "CountWindow",
    "DeltaWindow",
    "PunctuationWindow",
    "TimeWindow",
    "PolicyWindow",
    "ApplyWindowPolicy",
    "WindowBuffer",
    "WindowPolicy",
    "COUNT",
    "DELTA",
    "PUNCTUATION",
    "TIME",
    "END_OF_INPUT",
    "LATE",
    "EVENT_TIME",
    "PROCESSING_TIME",
]
