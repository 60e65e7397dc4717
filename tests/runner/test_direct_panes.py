"""A batch GroupByKey that makes its panes without a trigger driver
(``runners/spark/execution/shuffle.py``: ``direct_pane_info``, ``window_pane``) makes exactly
the panes Beam's trigger driver makes for a bounded input (``process_entire_key``, as Beam's own
runners call it in batch), and leaves every other windowing to that driver."""

from __future__ import annotations

import pytest
from apache_beam.transforms import trigger, window
from apache_beam.transforms.core import Windowing
from apache_beam.utils.timestamp import Duration, Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.beam_internals import create_trigger_driver
from runners.spark.execution.shuffle import direct_pane_info, window_pane

#: (value, event time in seconds)
ELEMENTS = [(0, 1), (1, 3), (2, 12), (3, 7), (4, -2), (5, 29.5), (6, 3)]


def _panes_by_window(panes):
    return {pane.windows: (sorted(pane.value[1]), pane.value[0], pane.timestamp,
                           pane.pane_info) for pane in panes}


@pytest.mark.parametrize("windowing", [
    Windowing(window.FixedWindows(10)),
    Windowing(window.FixedWindows(10, offset=3), allowed_lateness=Duration(60)),
    Windowing(window.SlidingWindows(10, 5)),
    Windowing(window.GlobalWindows(), allowed_lateness=Duration(5)),
], ids=["fixed", "fixed-offset-lateness", "sliding", "global-lateness"])
def test_direct_panes_are_the_trigger_drivers(windowing):
    elements = [WindowedValue(value, Timestamp(seconds), windowing.windowfn.assign(
        window.WindowFn.AssignContext(Timestamp(seconds), value)))
        for value, seconds in ELEMENTS]
    beams = list(create_trigger_driver(windowing, True).process_entire_key("key", elements))

    pane_info = direct_pane_info(windowing)
    assert pane_info is not None
    values_by_window = {}
    for element in elements:
        for element_window in element.windows:
            values_by_window.setdefault(element_window, []).append(element.value)
    direct = [window_pane("key", values, element_window, pane_info)
              for element_window, values in values_by_window.items()]

    assert len(direct) == len(beams)
    assert _panes_by_window(direct) == _panes_by_window(beams)


def test_default_windowing_has_the_fn_api_runners_pane():
    """Default windowing is not the driver's (its batch driver stamps panes at
    MIN_TIMESTAMP): Beam's FnApiRunner (the DirectRunner in batch) makes the pane itself,
    at the end of the global window, first and last. The hot-key test of
    test_spark_runner_batch.py checks that pane against the DirectRunner end to end."""
    pane_info = direct_pane_info(Windowing(window.GlobalWindows()))
    pane = window_pane("key", [1, 2], window.GlobalWindow(), pane_info)

    assert pane.timestamp == window.GlobalWindow().max_timestamp()
    assert (pane_info.is_first, pane_info.is_last, pane_info.timing, pane_info.index,
            pane_info.nonspeculative_index) == (True, True, 1, 0, 0)


@pytest.mark.parametrize("windowing", [
    Windowing(window.Sessions(10)),
    Windowing(window.FixedWindows(10), trigger.AfterWatermark(early=trigger.AfterCount(2)),
              trigger.AccumulationMode.DISCARDING),
    Windowing(window.FixedWindows(10),
              timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST),
], ids=["sessions", "early-firings", "earliest-timestamp"])
def test_other_windowing_keeps_the_trigger_driver(windowing):
    assert direct_pane_info(windowing) is None
