"""The four Nexmark workloads: what each computes, its answer, and a plain Python loop's.

Beam's Nexmark queries (``apache_beam.testing.benchmarks.nexmark.queries``) over the events
of :mod:`bench.nexmark.events`, with the arguments Beam's launcher gives them
(:data:`QUERY_ARGS`):

- ``nexmark_q0`` (query 0, pass-through): every event, through its coder and back;
- ``nexmark_q1`` (query 1, currency conversion): every bid, its price times
  ``USD_TO_EURO`` (0.89, a float);
- ``nexmark_q2`` (query 2, filter and projection): the bids whose auction is a multiple of
  ``auction_skip`` (123), as ``{'auction_id': auction, 'price': price}``;
- ``nexmark_windowed_sum``: every bid as ``(auction, price)``, in 10 s fixed event-time
  windows (``window_size_sec``), summed per auction and window (``CombinePerKey(sum)``).

Every engine writes one text line per result: Beam's ``WriteToText`` writes ``str`` of each
element (a model's ``str`` is Beam's ``model_to_json``; q2's dict is written as Python
prints it), hand-written RDDs the same ``str`` (``saveAsTextFile``), the windowed sum the
line ``[auction, window start in epoch millis, sum]``. A DataFrame writes the same values
with Spark's formatting (a double as Java prints it), so an answer is taken from the
*values* written, not their bytes: each line is parsed and written again canonically
(sorted keys, compact, :func:`canonical_line`), and the answer is the
:class:`~bench.workloads.Digest` of those lines (how many, and an order-free checksum).

>>> from bench.nexmark.events import event_lines
>>> event = json.loads(next(line for line in event_lines(1, 0, 50) if '"auction"' in line))
>>> record = output_record(Q1, event)
>>> list(record) == ["auction", "bidder", "price", "date_time", "extra"]
True
>>> record["price"] == event["price"] * USD_TO_EURO
True
"""

from __future__ import annotations

import ast
import glob
import json
from collections import defaultdict
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple

from apache_beam.testing.benchmarks.nexmark.queries.query1 import USD_TO_EURO

from bench.nexmark.events import all_event_lines
from bench.workloads import Digest, EventSet, digest

Q0, Q1, Q2, WINDOWED_SUM = "nexmark_q0", "nexmark_q1", "nexmark_q2", "nexmark_windowed_sum"
#: The Nexmark workloads of ``python -m bench``, in the order it runs them.
WORKLOADS: Tuple[str, ...] = (Q0, Q1, Q2, WINDOWED_SUM)
#: The arguments Beam's ``nexmark_launcher`` passes to every query (its ``query_args``).
QUERY_ARGS: Dict[str, int] = {
    "auction_skip": 123, "window_size_sec": 10, "window_period_sec": 5, "fanout": 5,
    "num_max_workers": 5, "max_log_events": 100000, "occasional_delay_sec": 3,
    "max_auction_waiting_time": 600,
}
AUCTION_SKIP = QUERY_ARGS["auction_skip"]
WINDOW_MILLIS = QUERY_ARGS["window_size_sec"] * 1000

#: JSON field -> the model attribute it becomes (``ParseJsonEventFn``, ``nexmark_model``),
#: in the order of the model's attributes (the order ``model_to_json`` writes them).
PERSON_FIELDS = (("id", "id"), ("name", "name"), ("emailAddress", "email_address"),
                 ("creditCard", "credit_card"), ("city", "city"), ("state", "state"),
                 ("dateTime", "date_time"), ("extra", "extra"))
AUCTION_FIELDS = (("id", "id"), ("itemName", "item_name"), ("description", "description"),
                  ("initialBid", "initial_bid"), ("reserve", "reserve"),
                  ("dateTime", "date_time"), ("expires", "expires"), ("seller", "seller"),
                  ("category", "category"), ("extra", "extra"))
BID_FIELDS = (("auction", "auction"), ("bidder", "bidder"), ("price", "price"),
              ("dateTime", "date_time"), ("extra", "extra"))


def check_workload(name: str) -> str:
    if name not in WORKLOADS:
        raise ValueError(f"unknown Nexmark workload {name!r}; choose from {', '.join(WORKLOADS)}")
    return name


def is_bid(event: Dict[str, Any]) -> bool:
    """A parsed line is a bid when it is neither a person (``name``) nor an auction
    (``itemName``), and has an ``auction``: ``ParseJsonEventFn``'s order of tests."""
    return "name" not in event and "itemName" not in event and "auction" in event


def model_record(event: Dict[str, Any]) -> Dict[str, Any]:
    """A parsed line as its model's attributes, in their order (what q0 writes)."""
    if "name" in event:
        fields = PERSON_FIELDS
    elif "itemName" in event:
        fields = AUCTION_FIELDS
    elif "auction" in event:
        fields = BID_FIELDS
    else:
        raise ValueError(f"not a Nexmark event: {event!r}")
    return {attribute: event[field] for field, attribute in fields}


def converted_bid(bid: Dict[str, Any]) -> Dict[str, Any]:
    """q1's record of a bid: its price in euros."""
    return {"auction": bid["auction"], "bidder": bid["bidder"],
            "price": bid["price"] * USD_TO_EURO, "date_time": bid["dateTime"],
            "extra": bid["extra"]}


def kept_by_q2(bid: Dict[str, Any]) -> bool:
    return bid["auction"] % AUCTION_SKIP == 0


def projected_bid(bid: Dict[str, Any]) -> Dict[str, int]:
    """q2's record of a kept bid (``ResultNames.AUCTION_ID``, ``ResultNames.PRICE``)."""
    return {"auction_id": bid["auction"], "price": bid["price"]}


def window_start_millis(millis: int) -> int:
    """Start of the 10 s fixed window holding ``millis`` (windows aligned to the epoch)."""
    return millis - millis % WINDOW_MILLIS


def output_record(workload: str, event: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The record an element-wise query writes for a parsed line (None: none)."""
    if workload == Q0:
        return model_record(event)
    if not is_bid(event):
        return None
    if workload == Q1:
        return converted_bid(event)
    if workload == Q2:
        return projected_bid(event) if kept_by_q2(event) else None
    raise ValueError(f"{workload} is not element-wise")


def windowed_sums(events: Iterable[Dict[str, Any]]) -> Dict[Tuple[int, int], int]:
    """``{(auction, window start millis): sum of prices}`` over the bids of ``events``."""
    sums: Dict[Tuple[int, int], int] = defaultdict(int)
    for event in events:
        if is_bid(event):
            sums[(event["auction"], window_start_millis(event["dateTime"]))] += event["price"]
    return dict(sums)


def canonical_line(workload: str, line: str) -> str:
    """The values of a line an engine wrote, written canonically (sorted keys, compact).

    >>> canonical_line(Q2, "{'auction_id': 1107, 'price': 30}")
    '{"auction_id":1107,"price":30}'
    >>> canonical_line(Q1, '{"price":8.9E7,"auction":1}') == canonical_line(
    ...     Q1, '{"auction": 1, "price": 89000000.0}')
    True
    """
    values = ast.literal_eval(line) if workload == Q2 else json.loads(line)
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def written_answer(workload: str, pattern: str) -> Digest:
    """The answer of what an engine wrote into the files matching ``pattern``."""
    def lines() -> Iterator[str]:
        for path in sorted(glob.glob(pattern)):
            with open(path, encoding="utf-8") as written:
                for line in written:
                    if line.strip():
                        yield canonical_line(workload, line)

    return digest(lines())


def reference_answer(workload: str, event_set: EventSet) -> Digest:
    """The answer by a plain Python loop over the lines the event files hold (generated in
    memory, not read)."""
    check_workload(workload)
    events = map(json.loads, all_event_lines(event_set))
    if workload == WINDOWED_SUM:
        records: Iterable[Any] = [[auction, start, total] for (auction, start), total
                                  in windowed_sums(events).items()]
    else:
        records = filter(None, (output_record(workload, event) for event in events))
    return digest(json.dumps(record, sort_keys=True, separators=(",", ":"))
                  for record in records)
