"""A job's input, as options select it: generated and replayed, replayed from files, or read.

:class:`ReadEvents` is the first stage of every job: raw records in, typed and event-time
stamped events out (``.parsed``), plus what could not be read (``.dead_letter``). The source
(see :mod:`pipelines.options`) decides whether the events arrive as a replayed stream
(TestStream: generator or replay) or as a bounded batch (files).

Example:

>>> import apache_beam as beam
>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> from pipelines.events import GameEvent
>>> with beam.Pipeline(options=PipelineOptions(streaming=True)) as p:
...     events = p | ReadEvents(GameEvent, kind="game", source="generator", events=20, seed=1)
...     teams = events.parsed | beam.Map(lambda event: event.team)
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Type

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.textio import ReadFromText

from pipelines.generator import ARRIVAL_FIELD, generate, read_json_lines, strip_arrival_time
from pipelines.replay import (
    DEFAULT_TICK_SECONDS,
    DEFAULT_WATERMARK_LAG_SECONDS,
    Replay,
    late_records,
)
from transforms.parsing import ParseCsv, ParseJson


def read_replay_records(pattern: str):
    """Every record of the JSON-lines files matching ``pattern``, for a replay.

    Files are read in name order; the replay orders records by arrival time anyway.
    """
    paths = sorted(metadata.path for metadata in FileSystems.match([pattern])[0].metadata_list)
    if not paths:
        raise ValueError(f"input {pattern!r} matches no file; check the path or glob")
    records = []
    for path in paths:
        with FileSystems.open(path) as handle:
            records.extend(read_json_lines(handle.read().decode("utf-8").splitlines()))
    return records


class ReadEvents(beam.PTransform):
    """Read and parse one job's events; outputs ``.parsed`` and ``.dead_letter``.

    ``source``: ``generator`` (``events`` generated from ``seed``, replayed), ``replay``
    (the JSON-lines files matching ``input`` replayed by arrival time) or ``file`` (the
    files matching ``input`` read as a bounded input in ``format`` json or csv).
    ``csv_columns`` names the CSV columns (default: the event's fields, then arrival_time).
    """

    def __init__(
        self,
        event_type: Type[tuple],
        *,
        kind: str,
        source: str = "generator",
        input: Optional[str] = None,
        format: str = "json",
        csv_columns: Optional[Sequence[str]] = None,
        events: int = 300,
        seed: int = 42,
        tick_seconds: float = DEFAULT_TICK_SECONDS,
        watermark_lag_seconds: float = DEFAULT_WATERMARK_LAG_SECONDS,
        label: Optional[str] = None,
    ) -> None:
        super().__init__(label)
        if source not in ("generator", "replay", "file"):
            raise ValueError(f"source={source!r}: use 'generator', 'replay' or 'file'")
        if source != "generator" and not input:
            raise ValueError(f"source={source!r} needs an input file pattern")
        if format not in ("json", "csv"):
            raise ValueError(f"format={format!r}: use 'json' or 'csv'")
        if format == "csv" and source != "file":
            raise ValueError("CSV input is read with source='file' only")
        self._event_type = event_type
        self._source = source
        self._input = input
        self._format = format
        self._replay = None
        #: What a replay will do, for the user (None for files): counts of events and of late ones.
        self.description: Optional[str] = None
        if source == "generator":
            records = generate(kind, events, seed)
        elif source == "replay":
            records = read_replay_records(input)
        if source in ("generator", "replay"):
            self._replay = Replay(records, tick_seconds=tick_seconds,
                                  watermark_lag_seconds=watermark_lag_seconds)
            late = late_records(records, tick_seconds=tick_seconds,
                                watermark_lag_seconds=watermark_lag_seconds)
            span = (records[-1].arrival_time - records[0].arrival_time) if records else 0.0
            self.description = (
                f"replaying {len(records)} {kind} events over {span:.0f} s of processing time "
                f"(TestStream); {len(late)} arrive behind the watermark "
                f"(newest event time - {watermark_lag_seconds:g} s)")
        # Build the parser now, so that bad columns fail at construction.
        self._parse = self._parser(csv_columns)

    def _parser(self, csv_columns: Optional[Sequence[str]]) -> beam.PTransform:
        if self._format == "json":
            return ParseJson(self._event_type)
        columns: List[str] = list(csv_columns or list(self._event_type._fields) + [ARRIVAL_FIELD])
        fields = set(self._event_type._fields)
        # Only the generator's arrival_time column may be skipped; any other unknown column
        # is a mistake that ParseCsv reports.
        extra = {column for column in columns if column not in fields and column != "timestamp"}
        return ParseCsv(self._event_type, columns=columns,
                        ignore_extra_fields=extra == {ARRIVAL_FIELD})

    def expand(self, pbegin):
        if self._replay is not None:
            lines = pbegin | "Replay" >> self._replay
        else:
            lines = pbegin | "ReadFiles" >> ReadFromText(self._input)
            if self._format == "json":
                # The arrival time is the replay's business; the event itself is the rest.
                lines = lines | "StripArrivalTime" >> beam.Map(strip_arrival_time)
        return lines | "Parse" >> self._parse
