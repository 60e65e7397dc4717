"""The workloads written by hand in PySpark, RDDs and DataFrames: the yardstick for the
SparkRunner.

This is what a PySpark programmer would write: generate each shard in its own partition,
map every event to ``((team, window_start), score)`` and ``reduceByKey`` (which combines
within each partition before the shuffle, as Beam's lifted combiners do), or sum the scores;
the element-wise workloads map or filter each event and write its line as text
(``saveAsTextFile``), read back for the check. The DataFrame versions
(:func:`run_dataframe`) build a DataFrame from the same generated events and let Spark SQL
do the rest (its projection, filter and aggregation run in the JVM).

``parse_filter_project`` reads the bid files written before the run (``inputs``, a glob
pattern; see ``bench.bids``): with RDDs, ``textFile`` then the Beam pipeline's own functions
through ``map``/``filter`` (parse, keep, project, format); with a DataFrame, ``from_json``
with the bids' schema, ``where``, and the record's line built by ``concat`` (every field an
integer: the same bytes as :func:`~bench.workloads.output_line`), all in the JVM.

Beam's Nexmark workloads are written by hand in :mod:`bench.nexmark.baselines`.

``timing``, when given, receives ``seconds``: the computation and its output, without the
read-back of written lines that only the check needs.

>>> from bench.session import bench_session  # doctest: +SKIP
>>> run_pyspark("global_sum", EventSet(1000), bench_session().sparkContext)  # doctest: +SKIP
50123
"""

from __future__ import annotations

import operator
import os
import tempfile
import time
from typing import Any, Dict, Optional

from bench.bids import BID_FILTER_MODULUS, BID_SCHEMA, bid_files, keep_bid, parse_bid, project_bid
from bench.nexmark.baselines import run_nexmark_dataframe, run_nexmark_rdd
from bench.nexmark.queries import WORKLOADS as NEXMARK_WORKLOADS
from bench.workloads import (
    CONVERSION_DENOMINATOR,
    CONVERSION_NUMERATOR,
    ELEMENT_WISE,
    FILTER,
    FILTER_MODULUS,
    GLOBAL_SUM,
    HOT_KEY,
    HOT_KEY_GROUP,
    HOT_SCORE_ABOVE,
    PARSE_FILTER_PROJECT,
    PROJECTION,
    WINDOW_SECONDS,
    EventSet,
    check_workload,
    digest_files,
    generate_shard,
    group_key,
    keep,
    output_line,
    project,
    window_start,
)


def _events(event_set: EventSet, spark_context: Any) -> Any:
    shards = event_set.shards()
    return spark_context.parallelize(shards, len(shards)).flatMap(
        lambda shard: generate_shard(*shard)
    )


def _written_lines(lines: Any, prefix: str, timing: Dict[str, float], began: float) -> Any:
    """Save an RDD of lines as text; the :class:`~bench.workloads.Digest` of what it wrote
    (``timing["seconds"]``: from ``began`` until written)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as directory:
        output = os.path.join(directory, "answer")
        lines.saveAsTextFile(output)
        timing["seconds"] = time.perf_counter() - began
        return digest_files(os.path.join(output, "part-*"))


def run_pyspark(workload: str, event_set: EventSet, spark_context: Any, partitions: int = 2,
                timing: Optional[Dict[str, float]] = None, inputs: Optional[str] = None) -> Any:
    """Compute ``workload`` over ``event_set`` with RDDs; the answer as in ``workloads``
    (``inputs``: the pattern of ``parse_filter_project``'s bid files; None: written here
    before the clock starts; Beam's Nexmark workloads: :mod:`bench.nexmark.baselines`)."""
    if workload in NEXMARK_WORKLOADS:
        return run_nexmark_rdd(workload, event_set, spark_context, partitions, timing, inputs)
    check_workload(workload)
    timing = {} if timing is None else timing
    if workload == PARSE_FILTER_PROJECT:
        with bid_files(event_set, inputs) as pattern:
            began = time.perf_counter()
            lines = (spark_context.textFile(pattern, minPartitions=partitions)
                     .map(parse_bid).filter(keep_bid).map(project_bid).map(output_line))
            return _written_lines(lines, "bench-rdd-", timing, began)
    began = time.perf_counter()
    events = _events(event_set, spark_context)
    if workload == GLOBAL_SUM:
        answer = events.map(lambda event: event[1]).fold(0, operator.add)
    elif workload in ELEMENT_WISE:
        if workload == PROJECTION:
            records = events.map(project)
        elif workload == FILTER:
            records = events.filter(keep)
        else:
            records = events
        return _written_lines(records.map(output_line), "bench-rdd-", timing, began)
    elif workload == HOT_KEY_GROUP:
        groups = events.map(lambda event: (group_key(event), event[1])).groupByKey(partitions)
        answer = dict(groups.mapValues(lambda scores: (len(scores), sum(scores))).collect())
    else:
        sums = events.map(
            lambda event: ((event[0], window_start(event[2])), event[1])
        ).reduceByKey(operator.add, numPartitions=partitions)
        answer = dict(sums.collect())
    timing["seconds"] = time.perf_counter() - began
    return answer


def run_dataframe(workload: str, event_set: EventSet, spark_session: Any, partitions: int = 2,
                  timing: Optional[Dict[str, float]] = None, inputs: Optional[str] = None) -> Any:
    """Compute ``workload`` over ``event_set`` with a DataFrame; the answer as in
    ``workloads`` (``inputs`` as for :func:`run_pyspark`)."""
    from pyspark.sql import functions

    if workload in NEXMARK_WORKLOADS:
        return run_nexmark_dataframe(workload, event_set, spark_session, partitions, timing,
                                     inputs)
    check_workload(workload)
    timing = {} if timing is None else timing
    if workload == PARSE_FILTER_PROJECT:
        with bid_files(event_set, inputs) as pattern:
            began = time.perf_counter()
            bids = spark_session.read.text(pattern).select(
                functions.from_json("value", BID_SCHEMA).alias("bid")).select("bid.*")
            kept = bids.where(functions.col("auction") % BID_FILTER_MODULUS == 0)
            # project_bid's record as output_line writes it: [auction,price,bidder,date_time].
            price = functions.expr(
                f"price * {CONVERSION_NUMERATOR} div {CONVERSION_DENOMINATOR}")
            line = functions.concat(
                functions.lit("["), functions.col("auction").cast("string"), functions.lit(","),
                price.cast("string"), functions.lit(","), functions.col("bidder").cast("string"),
                functions.lit(","), functions.col("date_time").cast("string"), functions.lit("]"))
            with tempfile.TemporaryDirectory(prefix="bench-dataframe-") as directory:
                output = os.path.join(directory, "answer")
                kept.select(line.alias("value")).write.text(output)
                timing["seconds"] = time.perf_counter() - began
                return digest_files(os.path.join(output, "part-*"))
    began = time.perf_counter()
    events = spark_session.createDataFrame(
        _events(event_set, spark_session.sparkContext),
        "team string, score long, event_time long")
    if workload == GLOBAL_SUM:
        answer = events.agg(functions.sum("score")).collect()[0][0] or 0
    elif workload in ELEMENT_WISE:
        team, score, event_time = (functions.col(name)
                                   for name in ("team", "score", "event_time"))
        if workload == PROJECTION:
            fields = [team, event_time,
                      functions.floor(score * CONVERSION_NUMERATOR / CONVERSION_DENOMINATOR)]
        else:
            fields = [team, score, event_time]
        if workload == FILTER:
            events = events.where(score % FILTER_MODULUS == 0)
        # The same compact JSON line as output_line: ["team",1,2].
        line = functions.concat(functions.lit('["'), fields[0], functions.lit('",'),
                                fields[1].cast("string"), functions.lit(","),
                                fields[2].cast("string"), functions.lit("]"))
        with tempfile.TemporaryDirectory(prefix="bench-dataframe-") as directory:
            output = os.path.join(directory, "answer")
            events.select(line.alias("value")).write.text(output)
            timing["seconds"] = time.perf_counter() - began
            return digest_files(os.path.join(output, "part-*"))
    elif workload == HOT_KEY_GROUP:
        key = functions.when(functions.col("score") > HOT_SCORE_ABOVE,
                             functions.lit(HOT_KEY)).otherwise(functions.col("team"))
        rows = events.groupBy(key.alias("key")).agg(
            functions.count("score"), functions.sum("score")).collect()
        answer = {row[0]: (row[1], row[2]) for row in rows}
    else:
        start = functions.col("event_time") - functions.col("event_time") % WINDOW_SECONDS
        rows = events.groupBy("team", start.alias("start")).agg(functions.sum("score")).collect()
        answer = {(row[0], row[1]): row[2] for row in rows}
    timing["seconds"] = time.perf_counter() - began
    return answer
