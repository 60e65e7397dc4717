"""The Nexmark workloads written by hand in PySpark, with RDDs and with a DataFrame, on the
same event files: the yardstick for Beam's Nexmark on the SparkRunner.

What a PySpark programmer would write for the same results (:mod:`bench.nexmark.queries`):

- RDDs: ``textFile``, ``json.loads`` of each line, then the query: q0 each event's record,
  q1 the bids' converted records, q2 the kept bids' projections, the windowed sum
  ``((auction, window start), price)`` summed by ``reduceByKey`` (which combines within
  each partition before the shuffle, as Beam's lifted combiner does); each result written
  by ``saveAsTextFile`` (``str`` of a record, the JSON line of a record or a sum). q0 has no
  coder round trip: a hand-written pass-through parses and writes.
- A DataFrame: ``spark.read.text``, ``from_json`` with every field of the three event
  kinds (a line's kind is the fields it has, as ``ParseJsonEventFn`` tells them), the same
  filters and projections as column expressions, ``groupBy(...).sum`` for the windowed sum,
  each result written as one text line (``to_json``, or ``concat`` for q2's and the sums'
  lines), all in the JVM.

``timing``, when given, receives ``seconds``: the computation and its output, without the
read-back of written lines that only the check needs.

>>> from bench.session import bench_session  # doctest: +SKIP
>>> run_nexmark_rdd("nexmark_q2", EventSet(1000), bench_session().sparkContext)  # doctest: +SKIP
Digest(lines=4, checksum=...)
"""

from __future__ import annotations

import json
import operator
import os
import tempfile
import time
from typing import Any, Dict, Optional

from bench.nexmark.events import event_files
from bench.nexmark.queries import (
    AUCTION_FIELDS,
    AUCTION_SKIP,
    BID_FIELDS,
    PERSON_FIELDS,
    Q0,
    Q1,
    Q2,
    USD_TO_EURO,
    WINDOW_MILLIS,
    check_workload,
    converted_bid,
    is_bid,
    kept_by_q2,
    model_record,
    projected_bid,
    window_start_millis,
    written_answer,
)
from bench.workloads import Digest, EventSet

#: The text fields of the three event kinds; every other field is a number.
_TEXT_FIELDS = frozenset(["name", "emailAddress", "creditCard", "city", "state", "extra",
                          "itemName", "description"])
#: Every field of a line, whatever its kind (the fields a line lacks are null).
EVENT_SCHEMA = ", ".join(
    f"{field} {'string' if field in _TEXT_FIELDS else 'long'}"
    for field in dict.fromkeys(field for field, _ in PERSON_FIELDS + AUCTION_FIELDS + BID_FIELDS))


def _compact_json(record: Any) -> str:
    return json.dumps(record, separators=(",", ":"))


def _sum_line(auction_window_and_sum: Any) -> str:
    (auction, start), total = auction_window_and_sum
    return _compact_json([auction, start, total])


def _bid_window_and_price(bid: Dict[str, Any]) -> Any:
    return (bid["auction"], window_start_millis(bid["dateTime"])), bid["price"]


def run_nexmark_rdd(workload: str, event_set: EventSet, spark_context: Any,
                    partitions: int = 2, timing: Optional[Dict[str, float]] = None,
                    inputs: Optional[str] = None) -> Digest:
    """Compute ``workload`` with RDDs over ``event_set``'s files (``inputs``, their pattern;
    None: written here before the clock starts); its answer."""
    check_workload(workload)
    timing = {} if timing is None else timing
    with event_files(event_set, inputs) as pattern:
        began = time.perf_counter()
        events = spark_context.textFile(pattern, minPartitions=partitions).map(json.loads)
        if workload == Q0:
            lines = events.map(model_record).map(_compact_json)
        elif workload == Q1:
            lines = events.filter(is_bid).map(converted_bid).map(_compact_json)
        elif workload == Q2:
            lines = events.filter(is_bid).filter(kept_by_q2).map(projected_bid)
        else:
            lines = (events.filter(is_bid).map(_bid_window_and_price)
                     .reduceByKey(operator.add, numPartitions=partitions).map(_sum_line))
        with tempfile.TemporaryDirectory(prefix="bench-nexmark-rdd-") as directory:
            output = os.path.join(directory, "answer")
            lines.saveAsTextFile(output)  # str() of each record
            timing["seconds"] = time.perf_counter() - began
            return written_answer(workload, os.path.join(output, "part-*"))


def run_nexmark_dataframe(workload: str, event_set: EventSet, spark_session: Any,
                          partitions: int = 2, timing: Optional[Dict[str, float]] = None,
                          inputs: Optional[str] = None) -> Digest:
    """Compute ``workload`` with a DataFrame over ``event_set``'s files; its answer
    (``inputs`` as for :func:`run_nexmark_rdd`)."""
    from pyspark.sql import functions

    check_workload(workload)
    timing = {} if timing is None else timing
    column = functions.col

    def record(fields, **replaced):
        return functions.to_json(functions.struct(*[
            replaced.get(attribute, column(field)).alias(attribute)
            for field, attribute in fields]))

    with event_files(event_set, inputs) as pattern:
        began = time.perf_counter()
        events = spark_session.read.text(pattern).select(
            functions.from_json("value", EVENT_SCHEMA).alias("event")).select("event.*")
        is_person = column("name").isNotNull()
        is_auction = column("name").isNull() & column("itemName").isNotNull()
        bids = events.where(column("name").isNull() & column("itemName").isNull()
                            & column("auction").isNotNull())
        if workload == Q0:
            lines = events.select(functions.when(is_person, record(PERSON_FIELDS))
                                  .when(is_auction, record(AUCTION_FIELDS))
                                  .otherwise(record(BID_FIELDS)).alias("value"))
        elif workload == Q1:
            lines = bids.select(record(BID_FIELDS, price=column("price") * USD_TO_EURO)
                                .alias("value"))
        elif workload == Q2:
            lines = bids.where(column("auction") % AUCTION_SKIP == 0).select(functions.concat(
                functions.lit("{'auction_id': "), column("auction").cast("string"),
                functions.lit(", 'price': "), column("price").cast("string"),
                functions.lit("}")).alias("value"))
        else:
            start = column("dateTime") - column("dateTime") % WINDOW_MILLIS
            sums = bids.groupBy("auction", start.alias("start")).agg(
                functions.sum("price").alias("total"))
            lines = sums.select(functions.concat(
                functions.lit("["), column("auction").cast("string"), functions.lit(","),
                column("start").cast("string"), functions.lit(","),
                column("total").cast("string"), functions.lit("]")).alias("value"))
        with tempfile.TemporaryDirectory(prefix="bench-nexmark-dataframe-") as directory:
            output = os.path.join(directory, "answer")
            lines.write.text(output)
            timing["seconds"] = time.perf_counter() - began
            return written_answer(workload, os.path.join(output, "part-*"))
