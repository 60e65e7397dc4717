"""The benchmark's events and workloads, and what each workload's answer is.

Events are ``(team, score, event_time)`` tuples: ``team`` one of :data:`TEAMS`, ``score`` an
integer in 1..100, ``event_time`` whole seconds since the epoch within
:data:`EVENT_TIME_SPAN_SECONDS` of :data:`FIRST_EVENT_TIME`. Integer scores and times make
every answer exact, so engines must agree to the last digit, and no event sits on a window
boundary by rounding.

Every engine generates the events itself, shard by shard, from the same seeded function
(:func:`generate_shard`): the data set depends only on ``(events, seed, shard_count)``, and each
engine pays for generation the same way, in parallel where it can.

Workloads (the *what* and *where* of the Dataflow model):

- ``keyed_windowed_sum``: per team, the sum of scores in fixed 60 s event-time windows;
  the answer is ``{(team, window_start): sum}``.
- ``global_sum``: the sum of every score, in the global window; the answer is an int.
- ``pass_through`` (Nexmark q0): every event written out as it is;
- ``projection`` (q1, a currency conversion): ``(team, event_time, score * 89 // 100)``;
- ``filter`` (q2): the events whose score is a multiple of 7 (about one in seven).
- ``parse_filter_project``: what Nexmark's queries do after reading their input, on bids
  derived from the events and written as JSON lines into files before any engine is timed
  (``bench.bids``): each line parsed into an object, one bid in eight kept, each kept bid
  projected into a record. The only workload that reads its input from files.
- ``hot_key_group``: a ``GroupByKey`` (all of a key's values brought together, no combiner)
  where one key is hot: every event scoring above 50 (half of them) goes to the key
  ``"hot"``, the others to their team; the answer is ``{key: (count, sum of scores)}``. At
  10M events the hot key holds 5M values: the memory test of a grouping.

The element-wise workloads (the three above and ``parse_filter_project``) write one JSON
line per output record (:func:`output_line`); their answer is a :class:`Digest` of the
lines (how many, and an order-free sum of their CRC-32s), read back from what the engine
wrote.

>>> events = EventSet(events=10, seed=1, shard_count=2)
>>> sum(1 for shard in events.shards() for _ in generate_shard(*shard))
10

Every workload's answer by a plain Python loop is :func:`bench.answers.reference_answer`.
"""

from __future__ import annotations

import glob
import json
import random
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, List, NamedTuple, Optional, Tuple

#: The keys: 20 teams.
TEAMS: Tuple[str, ...] = tuple(f"team-{number:02d}" for number in range(20))
#: Fixed event-time window size of ``keyed_windowed_sum``.
WINDOW_SECONDS = 60
#: Event times fall in [FIRST_EVENT_TIME, FIRST_EVENT_TIME + span): 2 h, i.e. 120 windows.
FIRST_EVENT_TIME = 1_699_999_980  # a window boundary (a multiple of 60)
EVENT_TIME_SPAN_SECONDS = 2 * 60 * 60

KEYED_WINDOWED_SUM = "keyed_windowed_sum"
GLOBAL_SUM = "global_sum"
PASS_THROUGH = "pass_through"
PROJECTION = "projection"
FILTER = "filter"
HOT_KEY_GROUP = "hot_key_group"
PARSE_FILTER_PROJECT = "parse_filter_project"
#: Workloads that map each generated event to at most one output record.
ELEMENT_WISE: Tuple[str, ...] = (PASS_THROUGH, PROJECTION, FILTER)
#: Workloads that read their input from files written before the run (``bench.bids``).
READS_FILES: Tuple[str, ...] = (PARSE_FILTER_PROJECT,)
#: Workloads whose answer is the :class:`Digest` of the lines they write.
DIGESTED: Tuple[str, ...] = ELEMENT_WISE + READS_FILES
WORKLOADS: Tuple[str, ...] = ((KEYED_WINDOWED_SUM, GLOBAL_SUM) + ELEMENT_WISE
                              + (PARSE_FILTER_PROJECT, HOT_KEY_GROUP))
#: ``projection``'s conversion of a score (integer: answers stay exact).
CONVERSION_NUMERATOR, CONVERSION_DENOMINATOR = 89, 100
#: ``filter`` keeps the events whose score is a multiple of this.
FILTER_MODULUS = 7
#: ``hot_key_group``: the hot key, and the score above which an event goes to it.
HOT_KEY, HOT_SCORE_ABOVE = "hot", 50

Event = Tuple[str, int, int]
#: (seed, shard index, number of events in the shard): all a shard needs to be generated.
Shard = Tuple[int, int, int]


@dataclass(frozen=True)
class EventSet:
    """A reproducible set of events: ``events`` of them, from ``seed``, in ``shard_count`` shards."""

    events: int
    seed: int = 2024
    shard_count: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.events, int) or self.events < 0:
            raise ValueError(f"events={self.events!r}: give a non-negative integer")
        if not isinstance(self.shard_count, int) or self.shard_count < 1:
            raise ValueError(f"shard_count={self.shard_count!r}: give a positive integer")

    def shards(self) -> List[Shard]:
        """The shards, sizes differing by at most one event."""
        base, extra = divmod(self.events, self.shard_count)
        return [
            (self.seed, index, base + (1 if index < extra else 0))
            for index in range(self.shard_count)
        ]


def generate_shard(seed: int, shard: int, count: int) -> Iterator[Event]:
    """The events of one shard, the same on every engine and every run."""
    generator = random.Random(seed * 1_000_003 + shard)
    uniform = generator.random
    teams = TEAMS
    team_count = len(teams)
    for _ in range(count):
        yield (
            teams[int(uniform() * team_count)],
            1 + int(uniform() * 100),
            FIRST_EVENT_TIME + int(uniform() * EVENT_TIME_SPAN_SECONDS),
        )


class Digest(NamedTuple):
    """An element-wise workload's answer: how many lines, and the sum of their CRC-32s
    (modulo 2**64; the order of the lines does not matter)."""

    lines: int
    checksum: int


def digest(lines: Iterable[str]) -> Digest:
    """>>> digest(['["a",1,2]', '["b",3,4]']) == digest(['["b",3,4]', '["a",1,2]'])
    True
    """
    count = checksum = 0
    for line in lines:
        count += 1
        checksum += zlib.crc32(line.encode("utf-8"))
    return Digest(count, checksum % 2**64)


def digest_files(pattern: str) -> Digest:
    """The :class:`Digest` of the non-empty lines of the files matching ``pattern`` (what
    an engine wrote), each without its line end."""
    def lines() -> Iterator[str]:
        for path in sorted(glob.glob(pattern)):
            with open(path, encoding="utf-8") as written:
                yield from (line.rstrip("\n") for line in written if line.strip())

    return digest(lines())


def project(event: Event) -> Tuple[str, int, int]:
    """``projection``'s record: ``(team, event_time, converted score)``."""
    team, score, event_time = event
    return team, event_time, score * CONVERSION_NUMERATOR // CONVERSION_DENOMINATOR


def keep(event: Event) -> bool:
    """``filter``'s predicate."""
    return event[1] % FILTER_MODULUS == 0


def element_wise(workload: str, event: Event) -> Optional[Tuple[Any, ...]]:
    """The output record of ``event`` in an element-wise workload (None: filtered out)."""
    if workload == PROJECTION:
        return project(event)
    if workload == FILTER:
        return event if keep(event) else None
    return event


def group_key(event: Event) -> str:
    """``hot_key_group``'s key of an event: :data:`HOT_KEY` for half of them, else its team."""
    return HOT_KEY if event[1] > HOT_SCORE_ABOVE else event[0]


def output_line(record: Tuple[Any, ...]) -> str:
    """The line an element-wise workload writes for a record: compact JSON.

    >>> output_line(("team-01", 5, 1700000000))
    '["team-01",5,1700000000]'
    """
    return json.dumps(list(record), separators=(",", ":"))


def window_start(event_time: int) -> int:
    """Start of the fixed window holding ``event_time`` (windows are aligned to the epoch)."""
    return event_time - event_time % WINDOW_SECONDS


def check_workload(name: str) -> str:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    return name


def describe_difference(expected: Any, actual: Any, limit: int = 5) -> str:
    """A short human account of how two answers differ ("" if they are equal)."""
    if expected == actual:
        return ""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return f"expected {expected!r}, got {actual!r}"
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    wrong = sorted(key for key in set(expected) & set(actual) if expected[key] != actual[key])
    parts = [f"{len(expected)} expected keys, {len(actual)} produced"]
    if missing:
        parts.append(f"missing {len(missing)}, e.g. {missing[:limit]}")
    if extra:
        parts.append(f"unexpected {len(extra)}, e.g. {extra[:limit]}")
    if wrong:
        examples = [(key, expected[key], actual[key]) for key in wrong[:limit]]
        parts.append(f"{len(wrong)} wrong sums, e.g. (key, expected, got) {examples}")
    return "; ".join(parts)
