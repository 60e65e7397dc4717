"""The per-partition watermark of the Kafka source, and how an idle partition lets go of it.

Each Kafka partition is read by its own restriction of the splittable DoFn, so each has its
own watermark estimator; the runner takes the minimum over all restrictions (and over the
watermark holds downstream) as the source's output watermark. Within a partition, records
arrive roughly in event-time order, so the estimate is the largest event time seen so far
(monotonic: it never goes back). Records that arrive later with smaller event times are late
data, handled by the window's allowed lateness.

An idle partition, one with no new records, would hold that minimum back forever and no
window would ever close. So when the reader has caught up with the end of its partition and
nothing has arrived for ``idle_timeout_seconds``, the estimate advances with the wall clock
to ``now - idle_timeout_seconds``: the assumption (the same as Beam Java's KafkaIO
``withCreateTime(maxDelay)`` policy) is that a record appended from now on carries an event
time no older than ``idle_timeout_seconds``. A record that breaks it is late data, not lost:
allowed lateness decides. With ``idle_timeout_seconds=None`` an idle partition holds the
watermark back until it receives a record.

>>> from apache_beam.utils.timestamp import Timestamp
>>> clock = iter([100.0, 100.5, 103.0]).__next__
>>> estimator = PartitionWatermarkEstimator(None, idle_timeout_seconds=2.0, clock=clock)
>>> estimator.observe_timestamp(Timestamp(50))      # a record: event time 50
>>> estimator.caught_up()                           # at the end of the log, at wall time 100
>>> estimator.current_watermark()                   # idle 0.5 s: not yet
Timestamp(50)
>>> estimator.current_watermark()                   # idle 3 s: advances to 103 - 2
Timestamp(101)
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Tuple

from apache_beam.io.iobase import WatermarkEstimator
from apache_beam.transforms.core import WatermarkEstimatorProvider
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp

__all__ = ["PartitionWatermarkEstimator", "PartitionWatermarkEstimatorProvider"]

#: Estimator state: (watermark in micros, wall time in seconds since which the reader has been
#: caught up with no new record, or None while there is backlog or records keep coming).
EstimatorState = Tuple[int, Optional[float]]


class PartitionWatermarkEstimator(WatermarkEstimator):
    """Event-time watermark of one partition with idle advancement; see the module docstring.

    ``clock`` (seconds since the epoch) is the wall clock; tests inject a fake one.
    """

    def __init__(
        self,
        state: Optional[EstimatorState],
        idle_timeout_seconds: Optional[float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        micros, idle_since = state if state is not None else (MIN_TIMESTAMP.micros, None)
        self._watermark = Timestamp(micros=micros)
        self._idle_since = idle_since
        self._idle_timeout_seconds = idle_timeout_seconds
        self._clock = clock

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        """Called by the runner for every output: a record arrived, the partition is not idle."""
        self._idle_since = None
        if timestamp > self._watermark:
            self._watermark = timestamp

    def caught_up(self) -> None:
        """The reader found no record after the last one: the idle clock starts (if not yet)."""
        if self._idle_since is None:
            self._idle_since = self._clock()

    def has_backlog(self) -> None:
        """Records are waiting to be read: not idle, whatever the wall clock says."""
        self._idle_since = None

    def current_watermark(self) -> Timestamp:
        if self._idle_timeout_seconds is not None and self._idle_since is not None:
            now = self._clock()
            if now - self._idle_since >= self._idle_timeout_seconds:
                idle_watermark = Timestamp.of(now - self._idle_timeout_seconds)
                if idle_watermark > self._watermark:
                    self._watermark = idle_watermark
        return self._watermark

    def get_estimator_state(self) -> EstimatorState:
        return (self.current_watermark().micros, self._idle_since)


class PartitionWatermarkEstimatorProvider(WatermarkEstimatorProvider):
    """Creates a :class:`PartitionWatermarkEstimator` for each partition's restriction."""

    def __init__(self, idle_timeout_seconds: Optional[float]) -> None:
        self._idle_timeout_seconds = idle_timeout_seconds

    def initial_estimator_state(self, element, restriction) -> EstimatorState:
        return (MIN_TIMESTAMP.micros, None)

    def create_watermark_estimator(self, estimator_state) -> PartitionWatermarkEstimator:
        # Coders may hand the state back as a list.
        state = tuple(estimator_state) if estimator_state is not None else None
        return PartitionWatermarkEstimator(state, self._idle_timeout_seconds)
