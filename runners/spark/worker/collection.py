"""How often Python's cyclic garbage collector runs while a stage runs over a partition.

Python collects its youngest generation each time container objects allocated outnumber
those freed by 700 (``gc.get_threshold()[0]``). A fused stage makes and frees several an
element (``WindowedValue`` s, the values of the user's steps, generators), nearly all freed
by reference counting as soon as the next step has them: the collector walks them only to
find the few cycles, hundreds of times a second. Measured on Beam's Nexmark q0 on our
runner (1e6 events, ``local[2]``, ``python -m bench.nexmark.profile``): 3,914 collections,
0.56-0.71 us of an event's 17 us of Python CPU; with a threshold of 20,000, two
collections in the whole run, and the cycles a stage does leave are still collected, some ms
later. (The hand-written RDD program of the same query gains nothing from it.)

The threshold is Python's process-wide setting: it is set when a partition starts and
restored when the last partition running in the process ends, so other Python code a worker
runs (a user's own RDD functions in the same Spark session) keeps its own.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator, Optional, Tuple

#: Net allocations of container objects between two collections of the youngest generation
#: while a stage runs (Python's default: 700).
STAGE_COLLECTION_THRESHOLD = 20_000

_lock = threading.Lock()
_running = 0  # partitions running in this process (a driver may run several at once)
_restored: Optional[Tuple[int, ...]] = None  # the thresholds before the first of them


@contextlib.contextmanager
def young_objects_collected_less_often() -> Iterator[None]:
    """Run the block with the youngest generation collected after
    :data:`STAGE_COLLECTION_THRESHOLD` net allocations (never more often than the threshold
    in force; 0, collection off, stays), then restore the thresholds in force before, once
    no other block runs.

    >>> before = gc.get_threshold()
    >>> with young_objects_collected_less_often():
    ...     gc.get_threshold()[0] >= STAGE_COLLECTION_THRESHOLD
    True
    >>> gc.get_threshold() == before
    True
    """
    global _running, _restored
    with _lock:
        if _running == 0:
            _restored = gc.get_threshold()
            if 0 < _restored[0] < STAGE_COLLECTION_THRESHOLD:
                gc.set_threshold(STAGE_COLLECTION_THRESHOLD, *_restored[1:])
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0 and _restored is not None:
                gc.set_threshold(*_restored)
