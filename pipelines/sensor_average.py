"""Sensor average: the mean reading per sensor, over time-based or count-based windows.

Two window policies (``--window_policy``):

* ``sliding`` (default), the Dataflow model's answer:

  * **What**: the mean value per sensor.
  * **Where**: sliding event-time windows of ``--window_seconds`` every ``--period_seconds``.
  * **When**: early panes every ``--early_seconds`` of processing time, the on-time pane,
    a late pane per late reading within ``--allowed_lateness``.
  * **How**: accumulating.

* ``count``, the lecture's count-based policy (``transforms.window_policies.CountWindow``):
  per sensor, every ``--count_size`` readings (in event-time order) form a window, a new one
  every ``--count_slide`` readings (default: tumbling). Its records carry, instead of an
  event-time interval and pane, the window's extent and why it closed::

      {"key", "value", "timestamp",
       "window": {"count": n, "first_timestamp": s, "last_timestamp": s},
       "pane": {"reason": "count" | "end_of_input" | "late", "complete": bool}}

Run it::

    python -m pipelines.sensor_average
    python -m pipelines.sensor_average --window_policy count --count_size 10 --count_slide 5
    python -m pipelines.generator --kind sensors --events 500 --output sensors.jsonl
    python -m pipelines.sensor_average --input sensors.jsonl --output out/sensors

Example:

>>> SensorAverage(window_policy="count", count_size=3).window_policy
'count'
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult

from pipelines.events import SensorReading
from pipelines.options import job_parser, parse_job_options, positive_int, positive_seconds
from pipelines.output import WriteDeadLetters, WritePanes, WriteRecords, run_to_completion
from pipelines.job_pictures import job_plot, report_pictures
from pipelines.sources import ReadEvents
from pipelines.team_scores import late_and_early_when
from transforms.aggregations import MeanCombineFn
from transforms.window_policies.count import CountWindow
from transforms.windows import sliding_windows
from triggers.accumulation import How
from triggers.model import WindowedAggregation
from triggers.panes import timestamp_seconds

WINDOW_POLICIES = ("sliding", "count")


class _DescribeCountWindowFn(beam.DoFn):
    def process(self, window, timestamp=beam.DoFn.TimestampParam):
        yield {
            "key": window.key,
            "value": window.value,
            "timestamp": timestamp_seconds(timestamp),
            "window": {"count": window.size, "first_timestamp": window.first_timestamp,
                       "last_timestamp": window.last_timestamp},
            "pane": {"reason": window.reason, "complete": window.complete},
        }


class SensorAverage(beam.PTransform):
    """Mean reading per sensor over sliding event-time windows or count-based windows.

    Input: :class:`~pipelines.events.SensorReading` elements stamped with their event time.
    Output: for ``window_policy="sliding"``, ``(sensor, mean)`` panes; for ``"count"``,
    described count windows (dicts; see the module docstring).
    """

    def __init__(
        self,
        window_policy: str = "sliding",
        window_seconds: float = 60.0,
        period_seconds: float = 15.0,
        early_seconds: float = 0.0,
        allowed_lateness: float = 0.0,
        count_size: int = 10,
        count_slide: Optional[int] = None,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(label)
        if window_policy not in WINDOW_POLICIES:
            raise ValueError(
                f"window_policy={window_policy!r}: use one of {list(WINDOW_POLICIES)}")
        self.window_policy = window_policy
        if window_policy == "sliding":
            self._average = WindowedAggregation(
                what=MeanCombineFn(),
                where=sliding_windows(window_seconds, period_seconds),
                when=late_and_early_when(early_seconds, allowed_lateness),
                how=How.ACCUMULATING,
            )
        else:
            self._average = CountWindow(count_size, count_slide, combine_fn=MeanCombineFn())
        #: After application (sliding policy): readings dropped for lateness. The count
        #: policy drops nothing: it emits late readings as windows with reason "late".
        self.dropped: Optional[beam.PCollection] = None

    def expand(self, readings):
        keyed = readings | "SensorAndValue" >> beam.Map(
            lambda reading: (reading.sensor, reading.value))
        if self.window_policy == "sliding":
            means = keyed | "MeanPerSensorAndWindow" >> self._average
            self.dropped = self._average.dropped
            return means
        return (keyed
                | "MeanPerCountWindow" >> self._average
                | "DescribeCountWindows" >> beam.ParDo(_DescribeCountWindowFn()))


def run(argv: Optional[Sequence[str]] = None) -> PipelineResult:
    """Parse ``argv`` (default: the command line), run the job to completion, return its result."""
    parser = job_parser(
        "sensor_average",
        "Mean reading per sensor over sliding event-time windows (early, on-time and late "
        "panes, accumulating), or over count-based windows of readings.",
        window_seconds=60, early_seconds=20, allowed_lateness=120)
    parser.add_argument("--window_policy", choices=WINDOW_POLICIES, default="sliding",
                        help="sliding: event-time sliding windows (default); count: windows of "
                        "--count_size readings per sensor")
    parser.add_argument("--period_seconds", type=positive_seconds, default=15.0,
                        help="sliding policy: a new window starts every this many seconds "
                        "(default: 15)")
    parser.add_argument("--count_size", type=positive_int, default=10,
                        help="count policy: readings per window (default: 10)")
    parser.add_argument("--count_slide", type=positive_int,
                        help="count policy: new readings between windows (default: "
                        "--count_size, i.e. tumbling)")
    args, beam_options = parse_job_options(parser, argv)
    if args.plot and args.window_policy == "count":
        parser.error("--plot draws event-time windows and panes; use --window_policy sliding")
    pipeline = beam.Pipeline(runner=args.runner, options=beam_options)
    try:
        events_reader = ReadEvents(
            SensorReading, kind="sensors", source=args.source, input=args.input,
            format=args.format, csv_columns=args.csv_columns, events=args.events, seed=args.seed,
            tick_seconds=args.tick_seconds, watermark_lag_seconds=args.watermark_lag_seconds)
        events = pipeline | "ReadEvents" >> events_reader
        sensor_average = SensorAverage(
            args.window_policy, args.window_seconds, args.period_seconds, args.early_seconds,
            args.allowed_lateness, args.count_size, args.count_slide)
        averages = events.parsed | "SensorAverage" >> sensor_average
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    plot = job_plot(args, kind="sensors", event_type=SensorReading,
                    pairs=lambda reading: [(reading.sensor, reading.value)],
                    window_fn=sliding_windows(args.window_seconds, args.period_seconds),
                    combine_fn=MeanCombineFn(), title="sensor_average", value_label="mean")
    _ = averages | "WriteAverages" >> WritePanes(
        args.output, value_name="mean", describe=args.window_policy == "sliding",
        copy_to=plot and plot.panes_path)
    _ = events.dead_letter | "WriteDeadLetters" >> WriteDeadLetters(args.output)
    if sensor_average.dropped is not None:
        _ = sensor_average.dropped | "WriteDropped" >> WriteRecords(args.output, "dropped")
    return report_pictures("sensor_average", args, pipeline, plot, lambda: run_to_completion(
        pipeline, "sensor_average", note=events_reader.description))


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.WARNING)
    run()
