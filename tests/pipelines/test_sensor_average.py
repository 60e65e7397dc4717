"""SensorAverage: mean per sensor over sliding event-time windows, or over count windows."""

from __future__ import annotations


import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import GlobalWindow, TimestampedValue

from pipelines.events import SensorReading
from pipelines.sensor_average import SensorAverage
from triggers.panes import DescribePanes, pane_record, timestamp_seconds
from pane_times import to_millis

# A count window still open at the end of input is emitted at the end of the global window,
# a time so large that seconds as a float keep only about a millisecond of it.
END_OF_INPUT = "end of the global window"


def _end_of_input_named(record):
    near_end = timestamp_seconds(GlobalWindow().max_timestamp()) - 1
    if record["timestamp"] is not None and record["timestamp"] > near_end:
        record = dict(record, timestamp=END_OF_INPUT)
    return record


def _reading(sensor, value, at):
    return TimestampedValue(SensorReading(sensor, float(value), float(at)), at)


def _pane(sensor, mean, window, timing, index, is_last=False):
    return pane_record(sensor, mean, window=window, timestamp=window[1] - 0.001, timing=timing,
                       index=index, is_first=index == 0, is_last=is_last)


def test_sliding_means_with_early_on_time_and_late_panes(make_pipeline):
    stream = (test_stream.TestStream()
              .add_elements([_reading("roof", 4, 6)])
              .advance_processing_time(3)                    # early panes every 2 s
              .add_elements([_reading("roof", 8, 8)])
              .advance_watermark_to(15)                      # [0, 10) and [5, 15) on time
              .add_elements([_reading("roof", 12, 9)])       # late for both
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        panes = (p | stream
                 | SensorAverage("sliding", window_seconds=10, period_seconds=5,
                                 early_seconds=2, allowed_lateness=30)
                 | DescribePanes()
                 | beam.Map(to_millis))
        assert_that(panes, equal_to([
            _pane("roof", 4.0, (0, 10), "EARLY", 0),
            _pane("roof", 6.0, (0, 10), "ON_TIME", 1),
            _pane("roof", 8.0, (0, 10), "LATE", 2),
            _pane("roof", 4.0, (5, 15), "EARLY", 0),
            _pane("roof", 6.0, (5, 15), "ON_TIME", 1),
            _pane("roof", 8.0, (5, 15), "LATE", 2),
        ]))


def test_count_windows_average_every_n_readings_in_event_time_order(make_pipeline):
    # Arrival order differs from event-time order; count windows follow event time.
    stream = (test_stream.TestStream()
              .add_elements([_reading("cellar", 30, 3)])
              .add_elements([_reading("cellar", 10, 1), _reading("cellar", 20, 2)])
              .advance_watermark_to(2.5)
              .add_elements([_reading("cellar", 50, 5)])
              # A finite watermark first: on Beam's DirectRunner, outputs of timers fired by
              # the final jump to infinity reach assert_that's grouping too late.
              .advance_watermark_to(6)
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        windows = p | stream | SensorAverage("count", count_size=2)
        assert_that(windows, equal_to([
            {"key": "cellar", "value": 15.0, "timestamp": 2.0,
             "window": {"count": 2, "first_timestamp": 1.0, "last_timestamp": 2.0},
             "pane": {"reason": "count", "complete": True}},
            {"key": "cellar", "value": 40.0, "timestamp": 5.0,
             "window": {"count": 2, "first_timestamp": 3.0, "last_timestamp": 5.0},
             "pane": {"reason": "count", "complete": True}},
        ]))


def test_count_windows_flush_an_incomplete_window_at_end_of_input(make_pipeline):
    readings = [_reading("boiler", 60, 1), _reading("boiler", 64, 2), _reading("boiler", 62, 3)]
    with make_pipeline() as p:
        windows = (p | beam.Create(readings) | SensorAverage("count", count_size=2)
                   | beam.Map(_end_of_input_named))
        assert_that(windows, equal_to([
            {"key": "boiler", "value": 62.0, "timestamp": 2.0,
             "window": {"count": 2, "first_timestamp": 1.0, "last_timestamp": 2.0},
             "pane": {"reason": "count", "complete": True}},
            {"key": "boiler", "value": 62.0, "timestamp": END_OF_INPUT,
             "window": {"count": 1, "first_timestamp": 3.0, "last_timestamp": 3.0},
             "pane": {"reason": "end_of_input", "complete": False}},
        ]))


def test_invalid_settings_fail_at_construction():
    with pytest.raises(ValueError, match="window_policy"):
        SensorAverage("tumbling")
    with pytest.raises((ValueError, TypeError)):
        SensorAverage("count", count_size=0)
    with pytest.raises((ValueError, TypeError)):
        SensorAverage("count", count_size=3, count_slide=4)
    with pytest.raises((ValueError, TypeError)):
        SensorAverage("sliding", window_seconds=10, period_seconds=-1)
