"""The trigger driver that keeps a non-merging window's state per window
(``beam_internals.create_unmerged_trigger_driver``) emits exactly the panes of Beam's own
driver, which keeps every window under merge ids; a key holding ids keeps Beam's driver.

Both drivers get the same elements and the same timers, in the order the streaming
GroupByKey (``runners/spark/streaming/grouping.py``) hands them: elements, then due timers
at the new watermark, event time first. Their panes are compared whole: value, timestamp,
windows and pane info.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.transforms import trigger, window
from apache_beam.transforms.core import Windowing
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Duration, Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from runners.spark.beam_internals import (
    InMemoryUnmergedState,
    create_trigger_driver,
    create_unmerged_trigger_driver,
)
from runners.spark.state.encoding import TriggerStateCodec, has_window_ids
from runners.spark.streaming.grouping import TriggerDrivers

#: (elements as (value, seconds), the input watermark after them, in seconds)
ROUNDS = [
    ([(1, 1), (2, 3), (3, 12)], 2),
    ([(4, 5)], 9),
    ([], 11),                      # [0, 10) on time
    ([(5, 4), (6, 14)], 15),       # late for [0, 10)
    ([(7, 8)], 21),                # [10, 20) on time
    ([], 45),                      # both windows past their allowed lateness
]


def _panes(driver, windowing, rounds=ROUNDS, state=None, watermark=MIN_TIMESTAMP):
    state = InMemoryUnmergedState() if state is None else state
    panes = []
    for elements, watermark_after in rounds:
        values = [WindowedValue(value, Timestamp(seconds),
                                windowing.windowfn.assign(window.WindowFn.AssignContext(
                                    Timestamp(seconds), value)))
                  for value, seconds in elements]
        panes.extend(driver.process_elements(state, values, watermark, watermark))
        watermark = Timestamp(watermark_after)
        while True:
            due, _ = state.get_timers(watermark=watermark)
            if not due:
                break
            for window_id, (name, domain, timestamp, tag) in sorted(
                    due, key=lambda fired: fired[1][2]):
                state.clear_timer(window_id, name, domain, dynamic_timer_tag=tag)
                panes.extend(driver.process_timer(window_id, name, domain, timestamp, state,
                                                  watermark))
    return [(sorted(pane.value), pane.timestamp, list(pane.windows), pane.pane_info)
            for pane in panes], state


@pytest.mark.parametrize("accumulation", [trigger.AccumulationMode.ACCUMULATING,
                                          trigger.AccumulationMode.DISCARDING])
@pytest.mark.parametrize("window_fn", [window.FixedWindows(10), window.SlidingWindows(10, 5)])
def test_unmerged_driver_emits_beams_panes(accumulation, window_fn):
    windowing = Windowing(
        window_fn,
        trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
        accumulation, allowed_lateness=Duration(20))

    beams, beams_state = _panes(create_trigger_driver(windowing, False), windowing)
    unmerged, unmerged_state = _panes(create_unmerged_trigger_driver(windowing, None), windowing)

    assert unmerged == beams
    timings = {pane_info.timing for _, _, _, pane_info in beams}
    assert timings == {0, 1, 2}  # early, on time and late panes were all compared
    assert has_window_ids(beams_state) and not has_window_ids(unmerged_state)


def _windowing():
    return Windowing(
        window.FixedWindows(10),
        trigger.AfterWatermark(early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
        trigger.AccumulationMode.ACCUMULATING, allowed_lateness=Duration(20))


def test_a_key_kept_under_window_ids_stays_with_beams_driver():
    """State written by Beam's driver (as a checkpoint of an earlier version holds it),
    encoded and decoded as the store does, goes on with Beam's driver and gives the panes
    of an uninterrupted run; a new key gets the unmerged driver."""
    windowing = _windowing()
    codec = TriggerStateCodec(windowing.windowfn.get_window_coder(),
                              beam.coders.VarIntCoder())
    drivers = TriggerDrivers(windowing, None)
    uninterrupted, _ = _panes(create_trigger_driver(windowing, False), windowing)

    first, state = _panes(create_trigger_driver(windowing, False), windowing, ROUNDS[:3])
    restored = codec.decode(codec.encode(state))
    driver = drivers.for_state(restored)
    rest, _ = _panes(driver, windowing, ROUNDS[3:], restored, Timestamp(ROUNDS[2][1]))

    assert driver is drivers.merging and first + rest == uninterrupted
    assert drivers.for_state(InMemoryUnmergedState()) is drivers.unmerged


def test_merging_window_fns_have_beams_driver_only():
    drivers = TriggerDrivers(Windowing(window.Sessions(10)), None)
    assert drivers.unmerged is None
    assert drivers.for_state(InMemoryUnmergedState()) is drivers.merging


def test_a_merging_window_fn_is_refused():
    windowing = Windowing(window.Sessions(10))
    with pytest.raises(ValueError, match="merges windows"):
        create_unmerged_trigger_driver(windowing, None)
