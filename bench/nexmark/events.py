"""Nexmark's auction events as JSON lines, in the form Beam's ``ParseJsonEventFn`` reads.

Beam's Python Nexmark has no generator (its launcher reads a file, or Pub/Sub, that someone
else filled); Nexmark's generator is Java's (``org.apache.beam.sdk.nexmark.sources.
generator``). This module follows it with its defaults: out of every 50 events, 1 person,
3 auctions and 46 bids (event ``n`` is a person when ``n % 50 < 1``, an auction when
``< 4``, else a bid); one event every 100 us of event time (10,000 events/s: 1e6 events
span 100 s), from :data:`BASE_TIME_MILLIS`; ids, hot auctions, bidders and sellers, prices
(``round(10 ** (6 * random) * 100)`` cents), strings and the ``extra`` padding that brings
each event near its average size (persons 200 bytes, auctions 500, bids 100) as the Java
generator draws them. Its random numbers are Python's (a fixed seed), so its events are
not Java's, only shaped like them.

Each line is one event, flat, with the field names ``ParseJsonEventFn`` looks up (a
person has ``name``, an auction ``itemName``, a bid ``auction``; times in epoch millis)::

    {"id":1000,"name":"Luke Jones","emailAddress":"...","creditCard":"...","city":"Boise",
     "state":"OR","dateTime":1700000000000,"extra":"..."}

The events depend only on ``(events, seed)``: each block of :data:`BLOCK` consecutive
events draws from its own seeded stream, so the files of a set hold the same events
however many shards they are cut into (:class:`EventFiles`).

>>> lines = list(event_lines(2024, 0, 50))
>>> [sorted(json.loads(line))[:3] for line in lines[:5]]  # doctest: +NORMALIZE_WHITESPACE
[['city', 'creditCard', 'dateTime'], ['category', 'dateTime', 'description'],
 ['category', 'dateTime', 'description'], ['category', 'dateTime', 'description'],
 ['auction', 'bidder', 'dateTime']]
>>> lines == list(event_lines(2024, 0, 20)) + list(event_lines(2024, 20, 30))
True
"""

from __future__ import annotations

import json
import os
import random
from typing import Any, ContextManager, Dict, Iterator, Optional

from bench.scratch_files import ScratchFiles, files_for
from bench.workloads import EventSet

#: Event ``n`` happens at ``BASE_TIME_MILLIS + n // EVENTS_PER_MILLI`` (a 10 s boundary).
BASE_TIME_MILLIS = 1_700_000_000_000
EVENTS_PER_MILLI = 10
#: Java Nexmark's defaults (``GeneratorConfig``, ``NexmarkConfiguration``).
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID, CATEGORIES = 1000, 1000, 10, 5
ACTIVE_PEOPLE, PERSON_ID_LEAD = 1000, 10
IN_FLIGHT_AUCTIONS, AUCTION_ID_LEAD = 100, 10
HOT_AUCTION_RATIO, HOT_BIDDERS_RATIO, HOT_SELLERS_RATIO = 2, 4, 4
HOT_GROUP = 100  # the hot auction, bidder or seller is the first of its group of 100
AVERAGE_PERSON_BYTES, AVERAGE_AUCTION_BYTES, AVERAGE_BID_BYTES = 200, 500, 100
#: Events of one seeded random stream.
BLOCK = 10_000

_FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
                "Deiter", "Walter")
_LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
               "Noris")
_US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
_US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
              "Redmond", "Seattle", "Kent", "Cheyenne")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
#: Random bytes -> letters (Java's ``nextExactString``), and letters or, one time in 13,
#: a space (``nextString``): a table lookup per byte instead of a random call per letter.
_EXACT_TABLE = bytes(ord(_LETTERS[value % 26]) for value in range(256))
_SPACED_TABLE = bytes(ord(" ") if value < 20 else ord(_LETTERS[value % 26])
                      for value in range(256))
_EVENTS_FOR_AUCTIONS = IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION


def event_time_millis(event_id: int) -> int:
    return BASE_TIME_MILLIS + event_id // EVENTS_PER_MILLI


def last_person(event_id: int) -> int:
    """The base-0 id of the last person created at or before ``event_id``."""
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def last_auction(event_id: int) -> int:
    """The base-0 id of the last auction created at or before ``event_id``."""
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    if offset < PERSON_PROPORTION:
        epoch, offset = epoch - 1, AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


class _Draws:
    """One block's random stream, with the generator's primitives."""

    def __init__(self, seed: int, block: int) -> None:
        self._random = random.Random(seed * 1_000_003 + block)
        self.uniform = self._random.random
        self._bytes = self._random.randbytes

    def below(self, bound: int) -> int:
        return int(self.uniform() * bound)

    def string(self, max_length: int) -> str:
        length = 3 + self.below(max_length - 3)
        return self._bytes(length).translate(_SPACED_TABLE).decode("ascii").strip()

    def exact_string(self, length: int) -> str:
        return self._bytes(length).translate(_EXACT_TABLE).decode("ascii")

    def extra(self, current_size: int, average_size: int) -> str:
        if current_size > average_size:
            return ""
        wanted = average_size - current_size
        delta = round(wanted * 0.2)
        return self.exact_string(wanted - delta + (self.below(2 * delta) if delta else 0))

    def price(self) -> int:
        return round(10.0 ** (self.uniform() * 6.0) * 100.0)

    def person_id(self, event_id: int) -> int:
        people = last_person(event_id) + 1
        active = min(people, ACTIVE_PEOPLE)
        return people - active + self.below(active + PERSON_ID_LEAD)

    def auction_id(self, event_id: int) -> int:
        newest = last_auction(event_id)
        oldest = max(newest - IN_FLIGHT_AUCTIONS, 0)
        return oldest + self.below(newest - oldest + 1 + AUCTION_ID_LEAD)


def _person(draws: _Draws, event_id: int, millis: int) -> Dict[str, Any]:
    choose = draws.below
    name = f"{_FIRST_NAMES[choose(len(_FIRST_NAMES))]} {_LAST_NAMES[choose(len(_LAST_NAMES))]}"
    email = f"{draws.string(7)}@{draws.string(5)}.com"
    card = " ".join(f"{choose(10_000):04d}" for _ in range(4))
    city, state = _US_CITIES[choose(len(_US_CITIES))], _US_STATES[choose(len(_US_STATES))]
    size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
    return {"id": last_person(event_id) + FIRST_PERSON_ID, "name": name, "emailAddress": email,
            "creditCard": card, "city": city, "state": state, "dateTime": millis,
            "extra": draws.extra(size, AVERAGE_PERSON_BYTES)}


def _auction(draws: _Draws, event_id: int, millis: int) -> Dict[str, Any]:
    if draws.below(HOT_SELLERS_RATIO) > 0:
        seller = last_person(event_id) // HOT_GROUP * HOT_GROUP
    else:
        seller = draws.person_id(event_id)
    category = FIRST_CATEGORY_ID + draws.below(CATEGORIES)
    initial_bid = draws.price()
    horizon = (event_time_millis(event_id + _EVENTS_FOR_AUCTIONS) - millis) * 2
    expires = millis + 1 + draws.below(max(horizon, 1))
    name, description = draws.string(20), draws.string(100)
    reserve = initial_bid + draws.price()
    size = 8 + len(name) + len(description) + 8 + 8 + 8 + 8 + 8
    return {"id": last_auction(event_id) + FIRST_AUCTION_ID, "itemName": name,
            "description": description, "initialBid": initial_bid, "reserve": reserve,
            "dateTime": millis, "expires": expires, "seller": seller + FIRST_PERSON_ID,
            "category": category, "extra": draws.extra(size, AVERAGE_AUCTION_BYTES)}


def _bid(draws: _Draws, event_id: int, millis: int) -> Dict[str, Any]:
    if draws.below(HOT_AUCTION_RATIO) > 0:
        auction = last_auction(event_id) // HOT_GROUP * HOT_GROUP
    else:
        auction = draws.auction_id(event_id)
    if draws.below(HOT_BIDDERS_RATIO) > 0:
        bidder = last_person(event_id) // HOT_GROUP * HOT_GROUP + 1
    else:
        bidder = draws.person_id(event_id)
    return {"auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID,
            "price": draws.price(), "dateTime": millis,
            "extra": draws.extra(8 + 8 + 8 + 8, AVERAGE_BID_BYTES)}


def event(draws: _Draws, event_id: int) -> Dict[str, Any]:
    """Event ``event_id``'s fields (the next draws of ``draws``)."""
    kind = event_id % TOTAL_PROPORTION
    millis = event_time_millis(event_id)
    if kind < PERSON_PROPORTION:
        return _person(draws, event_id, millis)
    if kind < PERSON_PROPORTION + AUCTION_PROPORTION:
        return _auction(draws, event_id, millis)
    return _bid(draws, event_id, millis)


def event_lines(seed: int, first: int, count: int) -> Iterator[str]:
    """The JSON lines of events ``first`` .. ``first + count - 1`` (no line ends)."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    end = first + count
    block = first // BLOCK
    while block * BLOCK < end:
        draws = _Draws(seed, block)
        for event_id in range(block * BLOCK, min(end, (block + 1) * BLOCK)):
            fields = event(draws, event_id)  # the block's earlier events advance the stream
            if event_id >= first:
                yield dumps(fields)
        block += 1


def shard_ranges(event_set: EventSet):
    """``(first event id, count)`` of each shard: contiguous, sizes differing by at most one."""
    first = 0
    for _, _, count in event_set.shards():
        yield first, count
        first += count


def all_event_lines(event_set: EventSet) -> Iterator[str]:
    """Every line of ``event_set``, in event order (what its files hold)."""
    return event_lines(event_set.seed, 0, event_set.events)


def write_event_files(event_set: EventSet, directory: str) -> str:
    """Write ``event_set``'s events into ``directory``, one file per shard, and return the
    glob pattern of its files (what ``ReadFromText``, ``textFile`` and ``spark.read.text``
    take).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as directory:  # doctest: +NORMALIZE_WHITESPACE
    ...     pattern = write_event_files(EventSet(100, shard_count=3), directory)
    ...     sorted(os.listdir(directory)), os.path.basename(pattern)
    (['events-00000-of-00003.jsonl', 'events-00001-of-00003.jsonl',
      'events-00002-of-00003.jsonl'], 'events-*.jsonl')
    """
    os.makedirs(directory, exist_ok=True)
    ranges = list(shard_ranges(event_set))
    for index, (first, count) in enumerate(ranges):
        path = os.path.join(directory, f"events-{index:05d}-of-{len(ranges):05d}.jsonl")
        with open(path, "w", encoding="utf-8") as output:
            output.writelines(line + "\n" for line in event_lines(event_set.seed, first, count))
    return os.path.join(directory, "events-*.jsonl")


class EventFiles(ScratchFiles):
    """The event files of each event set, written once (on the first :meth:`pattern`) into
    a scratch directory of their own and shared by every Nexmark workload and engine;
    :meth:`close` removes them all.

    >>> with EventFiles() as files:
    ...     files.pattern(EventSet(10)) == files.pattern(EventSet(10))
    True
    """

    prefix = "bench-nexmark-"

    def write(self, event_set: EventSet, directory: str) -> str:
        return write_event_files(event_set, directory)


def event_files(event_set: EventSet, pattern: Optional[str] = None,
                scratch_dir: Optional[str] = None) -> ContextManager[str]:
    """``pattern`` if given (files someone wrote for ``event_set``), else the pattern of
    files written now and removed when the block ends. Write before starting a clock."""
    return files_for(EventFiles, event_set, pattern, scratch_dir)
