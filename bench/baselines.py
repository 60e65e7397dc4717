"""The workloads written by hand in PySpark RDD code: the yardstick for the SparkRunner.

This is what a PySpark programmer would write: generate each shard in its own partition,
map every event to ``((team, window_start), score)`` and ``reduceByKey`` (which combines
within each partition before the shuffle, as Beam's lifted combiners do), or sum the scores.

>>> from bench.session import bench_session  # doctest: +SKIP
>>> run_pyspark("global_sum", EventSet(1000), bench_session().sparkContext)  # doctest: +SKIP
50123
"""

from __future__ import annotations

import operator
from typing import Any

from bench.workloads import (
    GLOBAL_SUM,
    EventSet,
    check_workload,
    generate_shard,
    window_start,
)


def _events(event_set: EventSet, spark_context: Any) -> Any:
    shards = event_set.shards()
    return spark_context.parallelize(shards, len(shards)).flatMap(
        lambda shard: generate_shard(*shard)
    )


def run_pyspark(workload: str, event_set: EventSet, spark_context: Any, partitions: int = 2) -> Any:
    """Compute ``workload`` over ``event_set`` with RDDs; the answer as in ``workloads``."""
    check_workload(workload)
    events = _events(event_set, spark_context)
    if workload == GLOBAL_SUM:
        return events.map(lambda event: event[1]).fold(0, operator.add)
    sums = events.map(
        lambda event: ((event[0], window_start(event[2])), event[1])
    ).reduceByKey(operator.add, numPartitions=partitions)
    return dict(sums.collect())
