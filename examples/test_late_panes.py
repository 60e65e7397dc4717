"""A TestStream test of your own, run by the testing kit on Beam's DirectRunner and on our
SparkRunner: the same panes on both, or the test fails on the runner that differs.

    pytest test_late_panes.py -v                       # [DirectRunner], [SparkRunner]
    pytest test_late_panes.py -v --beam-spark-connect  # and [SparkConnect] (a local server)
"""

import apache_beam as beam
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Timestamp


class ScorePanes(beam.DoFn):
    """Each pane of a user's total, with its timing. Defined in the test file, it reaches
    Spark's workers by reference: the kit puts this folder on their path."""

    def process(self, element, pane=beam.DoFn.PaneInfoParam, pane_window=beam.DoFn.WindowParam):
        user, scores = element
        timing = {0: "early", 1: "on time", 2: "late"}[pane.timing]
        yield user, sum(scores), timing, int(pane_window.start)


def test_a_late_score_updates_its_window(make_pipeline):
    events = (TestStream()
              .advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("alice", 3), 10),
                             window.TimestampedValue(("bob", 2), 20),
                             window.TimestampedValue(("alice", 5), 70)])
              .advance_watermark_to(60)  # [0, 60) is complete: its on-time pane
              .add_elements([window.TimestampedValue(("alice", 4), 30)])  # late for [0, 60)
              .advance_watermark_to_infinity())
    with make_pipeline(streaming=True) as pipeline:
        panes = (pipeline
                 | events
                 | beam.WindowInto(
                     window.FixedWindows(60),
                     trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                     accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                     allowed_lateness=120)
                 | beam.GroupByKey()
                 | beam.ParDo(ScorePanes()))
        assert_that(panes, equal_to([("alice", 3, "on time", 0), ("bob", 2, "on time", 0),
                                     ("alice", 7, "late", 0), ("alice", 5, "on time", 60)]))
