"""``parse_filter_project``: Nexmark-shaped bids, read as JSON lines, parsed into objects,
filtered and projected.

What Beam's Nexmark queries do after reading their input: each line of text is parsed
(``json.loads``) into a :class:`Bid`, a small object with ``__slots__``; the bids whose
auction is a multiple of :data:`BID_FILTER_MODULUS` are kept (about one in eight); each kept
bid is projected into the record ``(auction, converted price, bidder, date_time)`` (the
price converted as ``projection`` converts a score), written as one compact JSON line
(:func:`~bench.workloads.output_line`). The answer is the :class:`~bench.workloads.Digest`
of those lines, as for the other element-wise workloads.

The bids come from the benchmark's seeded events (:func:`~bench.workloads.generate_shard`):
event ``number`` of a shard, ``(team, score, event_time)``, is the bid :func:`bid_of`
derives from it. They are written before any engine is timed, one file per generator
shard (:class:`BidFiles`: once per event set, read by every engine, removed at the end), so
every engine reads the same files and no engine's time includes writing them.

>>> line = bid_line(("team-07", 42, 1_700_000_000), 10)
>>> print(line)  # doctest: +NORMALIZE_WHITESPACE
{"auction": 6512, "bidder": 1010, "price": 4200, "channel": "team-07",
 "date_time": 1700000000, "extra": "qrstuvwxyzabcdef"}
>>> bid = parse_bid(line)
>>> bid  # doctest: +NORMALIZE_WHITESPACE
Bid(auction=6512, bidder=1010, price=4200, channel='team-07', date_time=1700000000,
    extra='qrstuvwxyzabcdef')
>>> keep_bid(bid), project_bid(bid)
(True, (6512, 3738, 1010, 1700000000))
"""

from __future__ import annotations

import json
import os
from typing import Any, ContextManager, Dict, Iterator, Optional, Tuple

from bench.scratch_files import ScratchFiles, files_for
from bench.workloads import (
    CONVERSION_DENOMINATOR,
    CONVERSION_NUMERATOR,
    Digest,
    Event,
    EventSet,
    digest,
    generate_shard,
    output_line,
)

#: Auction ids are FIRST_AUCTION .. FIRST_AUCTION + AUCTIONS - 1.
FIRST_AUCTION, AUCTIONS = 1_000, 10_000
#: Bidder ids are FIRST_BIDDER .. FIRST_BIDDER + BIDDERS - 1.
FIRST_BIDDER, BIDDERS = 1_000, 5_000
#: The filter keeps the bids whose auction is a multiple of this (about one in eight).
BID_FILTER_MODULUS = 8
#: A bid's ``extra`` (Nexmark's padding) is 8 to 31 characters cut from this.
_EXTRA_SOURCE = "abcdefghijklmnopqrstuvwxyz" * 3
#: The columns of a bid, in the order of its JSON line (and of a DataFrame's schema).
BID_SCHEMA = ("auction long, bidder long, price long, channel string, date_time long, "
              "extra string")


class Bid:
    """A bid, as a Nexmark query holds it after parsing: an object with ``__slots__``."""

    __slots__ = ("auction", "bidder", "price", "channel", "date_time", "extra")

    def __init__(self, auction: int, bidder: int, price: int, channel: str, date_time: int,
                 extra: str) -> None:
        self.auction = auction
        self.bidder = bidder
        self.price = price
        self.channel = channel
        self.date_time = date_time
        self.extra = extra

    def __repr__(self) -> str:
        return "Bid(" + ", ".join(f"{name}={getattr(self, name)!r}"
                                  for name in self.__slots__) + ")"


def bid_of(event: Event, number: int) -> Dict[str, Any]:
    """The bid derived from event ``number`` of a shard, as the fields of its JSON line."""
    team, score, event_time = event
    start = score % 26
    return {
        "auction": FIRST_AUCTION + (event_time * 7 + score * 131 + number) % AUCTIONS,
        "bidder": FIRST_BIDDER + (event_time * 13 + number) % BIDDERS,
        "price": score * 100 + event_time % 100,
        "channel": team,
        "date_time": event_time,
        "extra": _EXTRA_SOURCE[start:start + 8 + event_time % 24],
    }


def bid_line(event: Event, number: int) -> str:
    """The JSON line of :func:`bid_of` (``json.dumps``' default separators, no line end)."""
    return json.dumps(bid_of(event, number))


def bid_lines(seed: int, shard: int, count: int) -> Iterator[str]:
    """The lines of one generator shard's bids (see :func:`~bench.workloads.generate_shard`)."""
    for number, event in enumerate(generate_shard(seed, shard, count)):
        yield bid_line(event, number)


def parse_bid(line: str) -> Bid:
    """A line of text -> its :class:`Bid`."""
    return Bid(**json.loads(line))


def keep_bid(bid: Bid) -> bool:
    """The filter: the bid's auction is a multiple of :data:`BID_FILTER_MODULUS`."""
    return bid.auction % BID_FILTER_MODULUS == 0


def project_bid(bid: Bid) -> Tuple[int, int, int, int]:
    """The record of a kept bid: ``(auction, converted price, bidder, date_time)``."""
    return (bid.auction, bid.price * CONVERSION_NUMERATOR // CONVERSION_DENOMINATOR,
            bid.bidder, bid.date_time)


def reference_digest(event_set: EventSet) -> Digest:
    """``parse_filter_project``'s answer by a plain Python loop over the lines the files
    hold (generated in memory, not read)."""
    records = (project_bid(bid)
               for shard in event_set.shards()
               for bid in map(parse_bid, bid_lines(*shard))
               if keep_bid(bid))
    return digest(output_line(record) for record in records)


def write_bid_files(event_set: EventSet, directory: str) -> str:
    """Write ``event_set``'s bids into ``directory``, one file per generator shard; return
    the glob pattern matching them (the form ``ReadFromText``, ``textFile`` and
    ``spark.read.text`` all take).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as directory:  # doctest: +NORMALIZE_WHITESPACE
    ...     pattern = write_bid_files(EventSet(10, shard_count=3), directory)
    ...     sorted(os.listdir(directory)), os.path.basename(pattern)
    (['bids-00000-of-00003.jsonl', 'bids-00001-of-00003.jsonl', 'bids-00002-of-00003.jsonl'],
     'bids-*.jsonl')
    """
    os.makedirs(directory, exist_ok=True)
    shards = event_set.shards()
    for seed, index, count in shards:
        path = os.path.join(directory, f"bids-{index:05d}-of-{len(shards):05d}.jsonl")
        with open(path, "w", encoding="utf-8") as output:
            output.writelines(line + "\n" for line in bid_lines(seed, index, count))
    return os.path.join(directory, "bids-*.jsonl")


class BidFiles(ScratchFiles):
    """The bid files of each event set, written once (on the first :meth:`pattern`) into a
    scratch directory of their own and reused; :meth:`close` removes them all.

    >>> with BidFiles() as files:
    ...     files.pattern(EventSet(10)) == files.pattern(EventSet(10))
    True
    """

    prefix = "bench-bids-"

    def write(self, event_set: EventSet, directory: str) -> str:
        return write_bid_files(event_set, directory)


def bid_files(event_set: EventSet, pattern: Optional[str] = None,
              scratch_dir: Optional[str] = None) -> ContextManager[str]:
    """``pattern`` if given (files someone wrote for ``event_set``), else the pattern of
    files written now for ``event_set`` and removed when the block ends: for a caller that
    runs the workload once (a test, the profiler). Write before starting a clock."""
    return files_for(BidFiles, event_set, pattern, scratch_dir)
