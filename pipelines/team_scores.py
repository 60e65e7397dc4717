"""Team scores: the Streaming 102 example, per-team sums in event-time windows.

The four questions, answered:

* **What**: the sum of scores per team.
* **Where**: fixed event-time windows of ``--window_seconds`` (default one minute).
* **When**: speculative *early* panes every ``--early_seconds`` of processing time, the
  *on-time* pane when the watermark passes the window's end, then a *late* pane for every
  late event, for up to ``--allowed_lateness`` seconds (later data is dropped and counted).
* **How**: accumulating: each pane carries the window's whole total so far.

The graph: ``ReadEvents`` (generator replay, files, or a Kafka topic; JSON or CSV; bad
records to dead letters) -> :class:`TeamScores` -> ``WritePanes`` (+ ``WriteDeadLetters``;
with Kafka, panes also to ``--output_topic`` and dead letters to ``--dead_letter_topic``).

Run it (``make run`` does the first)::

    python -m pipelines.team_scores
    python -m pipelines.team_scores --events 1000 --seed 7 --output out/team_scores
    python -m pipelines.generator --kind game --events 500 --output game.jsonl
    python -m pipelines.team_scores --input game.jsonl --output out/team_scores
    python -m pipelines.team_scores --input game.jsonl --source replay --runner SparkRunner
    python -m pipelines.team_scores --source kafka --bootstrap_servers 127.0.0.1:9092 \
        --input_topic game-events --output_topic team-scores --runner SparkRunner

Example (the composite on typed events):

>>> import apache_beam as beam
>>> from pipelines.events import GameEvent
>>> from apache_beam.transforms.window import TimestampedValue
>>> with beam.Pipeline() as p:
...     sums = (p | beam.Create([TimestampedValue(GameEvent("ann", "red", 3, 5.0), 5.0)])
...               | TeamScores(window_seconds=60))
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.runners.runner import PipelineResult

from pipelines.events import GameEvent
from pipelines.kafka_events import ReadKafkaEvents, WritePanesToKafka
from pipelines.options import job_parser, parse_job_options
from pipelines.output import WriteDeadLetters, WritePanes, WriteRecords, run_to_completion
from pipelines.job_pictures import job_plot, report_pictures
from pipelines.sources import ReadEvents
from transforms.aggregations import SumFn
from transforms.windows import fixed_windows
from triggers.accumulation import How
from triggers.model import WindowedAggregation
from triggers.presets import at_watermark, early_and_late_firings


def late_and_early_when(early_seconds: float, allowed_lateness: float):
    """Early panes every ``early_seconds`` (0: none), on time, and a late pane per late element.

    The *when* every job shares; ``allowed_lateness`` is in seconds.
    """
    if isinstance(early_seconds, bool) or not isinstance(early_seconds, (int, float)):
        raise TypeError(f"early_seconds={early_seconds!r} must be a number of seconds")
    if not early_seconds >= 0:
        raise ValueError(f"early_seconds={early_seconds!r} must be >= 0 (0: no early firings)")
    if early_seconds > 0:
        if float(early_seconds).is_integer():
            early_seconds = int(early_seconds)  # the preset takes whole seconds
        # Late firings exist only when late data is accepted at all.
        late_every_count = 1 if allowed_lateness else None
        return early_and_late_firings(early_every_seconds=early_seconds,
                                      late_every_count=late_every_count,
                                      allowed_lateness=allowed_lateness)
    return at_watermark(allowed_lateness=allowed_lateness)


class TeamScores(beam.PTransform):
    """Per-team score sums in fixed event-time windows, with early and late panes, accumulating.

    Input: :class:`~pipelines.events.GameEvent` elements stamped with their event time.
    Output: ``(team, total)`` panes; each pane's metadata tells EARLY / ON_TIME / LATE.
    After application, :attr:`dropped` holds the events dropped for lateness
    (``DroppedElement`` records), so that a job can report them.
    """

    def __init__(
        self,
        window_seconds: float = 60.0,
        early_seconds: float = 0.0,
        allowed_lateness: float = 0.0,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(label)
        # Constructed here so that invalid values raise at construction, not at run time.
        self._aggregation = WindowedAggregation(
            what=SumFn(),
            where=fixed_windows(window_seconds),
            when=late_and_early_when(early_seconds, allowed_lateness),
            how=How.ACCUMULATING,
        )
        self.dropped: Optional[beam.PCollection] = None

    def expand(self, events):
        sums = (events
                | "TeamAndScore" >> beam.Map(lambda event: (event.team, event.score))
                | "SumPerTeamAndWindow" >> self._aggregation)
        self.dropped = self._aggregation.dropped
        return sums


def _events_reader(args) -> beam.PTransform:
    """The job's input as its options select it: Kafka, or generated / replayed / files."""
    if args.source == "kafka":
        return ReadKafkaEvents(
            GameEvent, args.bootstrap_servers, args.input_topic, start=args.start,
            group_id=args.group_id, max_records=args.max_records, bounded=args.bounded,
            idle_timeout_seconds=args.idle_timeout_seconds,
            dead_letter_topic=args.dead_letter_topic, batch_max_records=args.batch_max_records,
            batch_max_records_per_partition=args.batch_max_records_per_partition,
            security=args.kafka_security)
    return ReadEvents(
        GameEvent, kind="game", source=args.source, input=args.input, format=args.format,
        csv_columns=args.csv_columns, events=args.events, seed=args.seed,
        tick_seconds=args.tick_seconds, watermark_lag_seconds=args.watermark_lag_seconds)


def run(argv: Optional[Sequence[str]] = None) -> PipelineResult:
    """Parse ``argv`` (default: the command line), run the job to completion, return its result."""
    parser = job_parser(
        "team_scores",
        "Per-team score sums in fixed event-time windows, with early (processing-time) and "
        "late (per element) panes, accumulating: the classic Streaming 102 example.",
        window_seconds=60, early_seconds=20, allowed_lateness=120)
    args, beam_options = parse_job_options(parser, argv)
    pipeline = beam.Pipeline(runner=args.runner, options=beam_options)
    try:
        events_reader = _events_reader(args)
        events = pipeline | "ReadEvents" >> events_reader
        team_scores = TeamScores(args.window_seconds, args.early_seconds, args.allowed_lateness)
        scores = events.parsed | "TeamScores" >> team_scores
        panes_to_kafka = (WritePanesToKafka(args.bootstrap_servers, args.output_topic,
                                            exactly_once=args.exactly_once,
                                            security=args.kafka_security)
                          if args.source == "kafka" and args.output_topic else None)
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    plot = job_plot(args, kind="game", event_type=GameEvent,
                    pairs=lambda event: [(event.team, event.score)],
                    window_fn=fixed_windows(args.window_seconds), combine_fn=SumFn(),
                    title="team_scores", value_label="sum")
    panes = scores | "WritePanes" >> WritePanes(args.output, value_name="sum",
                                                copy_to=plot and plot.panes_path)
    if panes_to_kafka is not None:
        _ = panes | "PanesToKafka" >> panes_to_kafka
    _ = events.dead_letter | "WriteDeadLetters" >> WriteDeadLetters(args.output)
    _ = team_scores.dropped | "WriteDropped" >> WriteRecords(args.output, "dropped")
    return report_pictures("team_scores", args, pipeline, plot, lambda: run_to_completion(
        pipeline, "team_scores", note=events_reader.description))


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.WARNING)
    run()
