"""PageViews: views per page in sliding windows; failed and slow loads split off as alerts."""

from __future__ import annotations


import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import TimestampedValue

from pipelines.events import PageView
from pipelines.page_views import PageViews
from triggers.panes import DescribePanes, pane_record
from pane_times import to_millis


def _view(page, at, load_ms=200, ok=True):
    return TimestampedValue(PageView(page, "visitor", load_ms, ok, float(at)), at)


def _pane(page, views, window, timing, index, is_last):
    return pane_record(page, views, window=window, timestamp=window[1] - 0.001, timing=timing,
                       index=index, is_first=index == 0, is_last=is_last)


def test_sliding_view_counts_with_a_late_view_and_failed_loads_as_alerts(make_pipeline):
    # Windows of 10 s every 5 s: a view at t counts in [t//5*5 - 5, +10) and [t//5*5, +10).
    stream = (test_stream.TestStream()
              .add_elements([_view("/a", 1), _view("/a", 7), _view("/b", 12)])
              .add_elements([_view("/b", 3, ok=False), _view("/b", 4, load_ms=5000)])
              .advance_watermark_to(20)                      # windows ending <= 20 on time
              .add_elements([_view("/a", 8)])                # late for [0,10) and [5,15)
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as p:
        results = p | stream | PageViews(window_seconds=10, period_seconds=5,
                                         allowed_lateness=15, slow_ms=3000)
        panes = results["views"] | DescribePanes() | beam.Map(to_millis)
        assert_that(panes, equal_to([
            _pane("/a", 1, (-5, 5), "ON_TIME", 0, is_last=False),
            _pane("/a", 2, (0, 10), "ON_TIME", 0, is_last=False),
            _pane("/a", 3, (0, 10), "LATE", 1, is_last=False),
            _pane("/a", 1, (5, 15), "ON_TIME", 0, is_last=False),
            _pane("/a", 2, (5, 15), "LATE", 1, is_last=False),
            _pane("/b", 1, (5, 15), "ON_TIME", 0, is_last=False),
            _pane("/b", 1, (10, 20), "ON_TIME", 0, is_last=False),
        ]), label="views")
        assert_that(results["alerts"], equal_to([
            {"page": "/b", "user": "visitor", "load_ms": 200, "ok": False, "timestamp": 3.0,
             "reason": "error"},
            {"page": "/b", "user": "visitor", "load_ms": 5000, "ok": True, "timestamp": 4.0,
             "reason": "slow: 5000 ms > 3000 ms"},
        ]), label="alerts")


@pytest.mark.parametrize("arguments", [
    dict(slow_ms=0), dict(slow_ms=2.5), dict(period_seconds=0), dict(window_seconds=-10),
])
def test_invalid_settings_fail_at_construction(arguments):
    with pytest.raises((ValueError, TypeError)):
        PageViews(**arguments)
