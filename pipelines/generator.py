"""A seeded generator of realistic event streams: out of order, some late, a few malformed.

Every generated record has two times, as every real stream does:

* its **event time** (``timestamp``): when it happened. Event times follow a Poisson process
  at ``rate`` events per second from ``start``;
* its **arrival time** (``arrival_time``): when the pipeline sees it, that is event time plus
  a delay. Most delays are small (exponential, mean ``mean_delay_seconds``), so neighbours
  swap places: the stream is out of order. A fraction ``late_fraction`` is held up for
  ``late_delay_seconds`` (a phone offline, a partition lagging): these arrive after a
  heuristic watermark has passed them, i.e. they are *late*.

Records are returned, and written, in arrival order. A fraction ``malformed_fraction`` carries
a bad field value (a non-numeric score, a missing field), so that edge adaptation has
something to reject into its dead letters.

Output format: JSON lines, one event per line with the event's fields (``timestamp`` is the
event time) plus ``arrival_time``. Event parsing ignores ``arrival_time``; the replay
(:mod:`pipelines.replay`) uses it to release each record at its arrival.

The same seed gives byte-identical output; nothing depends on the clock or on hash order.

Example:

>>> records = generate("game", events=3, seed=7)
>>> [r.arrival_time >= r.event_time for r in records]
[True, True, True]
>>> generate("game", events=3, seed=7) == records
True

Command line::

    python -m pipelines.generator --kind game --events 500 --seed 1 --output game.jsonl
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import random
import sys
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, TextIO

from pipelines.events import EVENT_TYPES

#: 2024-01-01T12:00:00Z: a fixed origin, so that output never depends on the clock.
DEFAULT_START = 1704110400.0

#: The name of the JSON field that carries a record's arrival time.
ARRIVAL_FIELD = "arrival_time"

KINDS = tuple(EVENT_TYPES)
FORMATS = ("json", "csv")

_TEAMS = ("red", "blue", "green", "amber")
_PAGES = ("/", "/search", "/product", "/cart", "/checkout")
_SENSORS = {"boiler": 65.0, "cellar": 12.0, "kitchen": 21.0, "roof": 4.0}


class GeneratedRecord(NamedTuple):
    """One record as a source would deliver it.

    ``fields`` are the JSON fields of the event (possibly malformed on purpose);
    ``event_time`` and ``arrival_time`` are seconds since the epoch. ``raw`` is set only for
    a line read back from a file that was not a JSON object: it is replayed as it was.
    """

    event_time: float
    arrival_time: float
    fields: Dict[str, Any]
    raw: Optional[str] = None

    def event_json(self) -> str:
        """The event as its producer sent it: a JSON object without the arrival time."""
        if self.raw is not None:
            return self.raw
        return json.dumps(self.fields, sort_keys=True)

    def to_json(self) -> str:
        """The record as one JSON-lines line (no newline): the event plus ``arrival_time``."""
        if self.raw is not None:
            return self.raw
        return json.dumps({**self.fields, ARRIVAL_FIELD: self.arrival_time}, sort_keys=True)

    def to_csv(self, kind: str) -> str:
        """The record as one CSV line (no newline): :func:`csv_columns` of ``kind`` in order.

        A field the record lacks is an empty cell; booleans are written ``true``/``false``.
        """
        values = {**self.fields, ARRIVAL_FIELD: self.arrival_time}
        cells = []
        for column in csv_columns(kind):
            value = values.get(column)
            if isinstance(value, bool):
                value = "true" if value else "false"
            cells.append("" if value is None else value)
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(cells)
        return out.getvalue()


def csv_columns(kind: str) -> List[str]:
    """The columns of the generator's CSV output: the event's fields, then ``arrival_time``."""
    return list(EVENT_TYPES[kind]._fields) + [ARRIVAL_FIELD]


def strip_arrival_time(line: str) -> str:
    """A generated JSON line without its ``arrival_time``: the event as the producer sent it.

    Lines that are not JSON objects, or have no ``arrival_time``, are returned unchanged,
    so that parsing sees (and dead-letters) them exactly as they were.

    >>> strip_arrival_time('{"arrival_time": 12.5, "team": "red"}')
    '{"team": "red"}'
    >>> strip_arrival_time('not json')
    'not json'
    """
    try:
        fields = json.loads(line)
    except ValueError:
        return line
    if not isinstance(fields, dict) or ARRIVAL_FIELD not in fields:
        return line
    del fields[ARRIVAL_FIELD]
    return json.dumps(fields)


def _game_fields(rng: random.Random, event_time: float) -> Dict[str, Any]:
    team = rng.choice(_TEAMS)
    return {
        "user": f"{team}_player{rng.randrange(1, 6)}",
        "team": team,
        "score": rng.randint(1, 20),
        "timestamp": event_time,
    }


def _page_view_fields(rng: random.Random, event_time: float) -> Dict[str, Any]:
    # Load times are log-normal: mostly a few hundred milliseconds, with a long slow tail.
    load_ms = int(min(60000, rng.lognormvariate(math.log(350), 0.8)))
    return {
        "page": rng.choice(_PAGES),
        "user": f"visitor{rng.randrange(1, 50)}",
        "load_ms": load_ms,
        "ok": rng.random() > 0.03,
        "timestamp": event_time,
    }


def _sensor_fields(rng: random.Random, event_time: float) -> Dict[str, Any]:
    sensor = rng.choice(sorted(_SENSORS))
    # A slow daily-like swing plus noise, so averages move from window to window.
    swing = 3.0 * math.sin((event_time - DEFAULT_START) / 600.0)
    return {
        "sensor": sensor,
        "value": round(_SENSORS[sensor] + swing + rng.gauss(0.0, 1.0), 2),
        "timestamp": event_time,
    }


_FIELD_MAKERS: Dict[str, Callable[[random.Random, float], Dict[str, Any]]] = {
    "game": _game_fields,
    "page_views": _page_view_fields,
    "sensors": _sensor_fields,
}


def _malform(rng: random.Random, fields: Dict[str, Any]) -> Dict[str, Any]:
    """Break one field the way real producers do: a wrong type, or a field left out."""
    broken = dict(fields)
    name = rng.choice(sorted(name for name in fields if name != "timestamp"))
    if rng.random() < 0.5:
        del broken[name]
    else:
        broken[name] = "n/a" if not isinstance(fields[name], str) else None
    return broken


def generate(
    kind: str,
    events: int,
    seed: int,
    *,
    start: float = DEFAULT_START,
    rate: float = 1.0,
    mean_delay_seconds: float = 2.0,
    late_fraction: float = 0.05,
    late_delay_seconds: Sequence[float] = (30.0, 240.0),
    malformed_fraction: float = 0.01,
) -> List[GeneratedRecord]:
    """Generate ``events`` records of ``kind``, in arrival order, deterministically for ``seed``.

    ``late_delay_seconds`` is the (low, high) range of the uniform delay of late records.
    Times are rounded to milliseconds, as most sources stamp them.
    """
    if kind not in _FIELD_MAKERS:
        raise ValueError(f"kind={kind!r} is not a stream kind; use one of {list(KINDS)}")
    if not isinstance(events, int) or events < 0:
        raise ValueError(f"events={events!r} must be a non-negative integer")
    if rate <= 0:
        raise ValueError(f"rate={rate!r} must be positive (events per second of event time)")
    if mean_delay_seconds < 0:
        raise ValueError(f"mean_delay_seconds={mean_delay_seconds!r} must not be negative")
    for name, fraction in (("late_fraction", late_fraction),
                           ("malformed_fraction", malformed_fraction)):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"{name}={fraction!r} must be between 0 and 1")
    low, high = late_delay_seconds
    if not 0 <= low <= high:
        raise ValueError(f"late_delay_seconds={late_delay_seconds!r} must be (low, high), 0 <= low <= high")

    rng = random.Random(seed)
    make_fields = _FIELD_MAKERS[kind]
    records = []
    event_time = start
    for _ in range(events):
        event_time += rng.expovariate(rate)
        stamped = round(event_time, 3)
        fields = make_fields(rng, stamped)
        if rng.random() < late_fraction:
            delay = rng.uniform(low, high)
        else:
            delay = rng.expovariate(1.0 / mean_delay_seconds) if mean_delay_seconds else 0.0
        if rng.random() < malformed_fraction:
            fields = _malform(rng, fields)
        records.append(GeneratedRecord(stamped, round(stamped + delay, 3), fields))
    # Arrival order is the order a consumer sees; ties keep generation order (stable sort).
    return sorted(records, key=lambda record: record.arrival_time)


def write_records(records: Iterable[GeneratedRecord], out: TextIO, *, kind: str = "game",
                  format: str = "json") -> int:
    """Write records as JSON lines (or CSV lines of :func:`csv_columns`) to ``out``.

    Returns how many were written.
    """
    if format not in FORMATS:
        raise ValueError(f"format={format!r} is not an output format; use one of {list(FORMATS)}")
    count = 0
    for record in records:
        out.write((record.to_json() if format == "json" else record.to_csv(kind)) + "\n")
        count += 1
    return count


def read_json_lines(lines: Iterable[str]) -> List[GeneratedRecord]:
    """Read records back from JSON lines (as :func:`write_records` writes them), in file order.

    Every line is kept, malformed ones included, so that a replay releases them for parsing
    to dead-letter. A line without a numeric ``arrival_time`` arrives at its event time or,
    lacking one too, together with the line before it.
    """
    records = []
    previous = DEFAULT_START
    for line in lines:
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        try:
            fields = json.loads(line)
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            records.append(GeneratedRecord(previous, previous, {}, raw=line))
            continue
        # A line without arrival time is replayed verbatim; otherwise without that field.
        raw = None if ARRIVAL_FIELD in fields else line
        arrival = fields.pop(ARRIVAL_FIELD, None)
        event_time = fields.get("timestamp")
        if isinstance(event_time, bool) or not isinstance(event_time, (int, float)):
            event_time = None
        if isinstance(arrival, bool) or not isinstance(arrival, (int, float)):
            arrival = event_time if event_time is not None else previous
        records.append(GeneratedRecord(
            float(event_time if event_time is not None else arrival), float(arrival), fields,
            raw=raw))
        previous = float(arrival)
    return records


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.generator",
        description="Generate a seeded stream of events (JSON lines, in arrival order) with "
        "out-of-order, late and a few malformed records.",
    )
    parser.add_argument("--kind", choices=KINDS, default="game", help="which stream (default: game)")
    parser.add_argument("--events", type=int, default=300, help="how many records (default: 300)")
    parser.add_argument("--seed", type=int, default=42, help="random seed (default: 42)")
    parser.add_argument("--output", default="-", help="file to write, '-' for stdout (default)")
    parser.add_argument("--format", choices=FORMATS, default="json",
                        help="json: JSON lines (default); csv: lines of the event's fields in "
                        "declaration order, then arrival_time, no header")
    parser.add_argument("--rate", type=float, default=1.0,
                        help="events per second of event time (default: 1)")
    parser.add_argument("--late_fraction", type=float, default=0.05,
                        help="fraction of records held up long enough to be late (default: 0.05)")
    parser.add_argument("--malformed_fraction", type=float, default=0.01,
                        help="fraction of records with a bad field (default: 0.01)")
    args = parser.parse_args(argv)
    if args.events < 0:
        parser.error(f"--events={args.events} must not be negative")
    if args.rate <= 0:
        parser.error(f"--rate={args.rate} must be positive")
    for name in ("late_fraction", "malformed_fraction"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            parser.error(f"--{name}={getattr(args, name)} must be between 0 and 1")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the process exit code."""
    args = _parse_args(argv)
    records = generate(args.kind, args.events, args.seed, rate=args.rate,
                       late_fraction=args.late_fraction,
                       malformed_fraction=args.malformed_fraction)
    if args.output == "-":
        write_records(records, sys.stdout, kind=args.kind, format=args.format)
    else:
        with open(args.output, "w", encoding="utf-8") as out:
            count = write_records(records, out, kind=args.kind, format=args.format)
        print(f"wrote {count} {args.kind} records to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
