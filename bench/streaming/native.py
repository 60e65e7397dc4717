"""The baseline: Spark Structured Streaming's own query on the same events.

A DataFrame query, all in the JVM: a file source reading one CSV file of events per
micro-batch (``maxFilesPerTrigger`` 1; every batch's file is written before the query
starts, so batches run back to back, as the Beam job's do), ``withWatermark``,
``groupBy(window, key).sum`` in update output mode (the updated windows every batch: Spark's
nearest to an early firing per batch), the RocksDB state store with changelog checkpointing,
``spark.sql.shuffle.partitions`` = the benchmark's parallelism. Each batch's updated rows are
collected to the driver (``foreachBatch``; measured on 2 cores: ~0.6 s a batch, where
appending them to Parquet took ~1 s), and the latest value of every window is checked
against the reference. Batch times are Spark's own ``triggerExecution`` durations from the
query's progress reports.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from typing import Any, Dict, Iterable, List, Tuple

#: Spark settings of the query (SQL settings only: they do not touch the Beam job's RDDs).
NATIVE_SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.numRecentProgressUpdates": "10000",
    "spark.sql.adaptive.enabled": "false",
    # No batch without data once the files are read (it would only evict state, and the
    # query is stopped after the last file).
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}


def write_batches(directory: str, batches: Iterable[List[Tuple[str, int, int]]]) -> int:
    """One CSV file per batch: ``key,value,event seconds``; returns how many were written."""
    os.makedirs(directory, exist_ok=True)
    count = 0
    for number, events in enumerate(batches):
        path = os.path.join(directory, f"batch-{number:06d}.csv")
        with open(path + ".tmp", "w", encoding="utf-8") as file:
            file.writelines(f"{key},{value},{seconds}\n" for key, value, seconds in events)
        os.replace(path + ".tmp", path)
        count += 1
    return count


def run(session: Any, batches: Iterable[List[Tuple[str, int, int]]], window_seconds: int,
        watermark_delay_seconds: int, parallelism: int) -> Dict[str, Any]:
    """Run the query over ``batches`` (each a list of events); returns each batch's
    ``triggerExecution`` millis, the latest value per (key, window start), and seconds."""
    from pyspark.sql import functions as F

    settings = dict(NATIVE_SETTINGS, **{"spark.sql.shuffle.partitions": str(parallelism)})
    previous = {key: session.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        session.conf.set(key, value)
    scratch = tempfile.mkdtemp(prefix="bench-native-")
    try:
        source = os.path.join(scratch, "events")
        files = write_batches(source, batches)
        latest: Dict[Tuple[str, int], Tuple[int, int]] = {}
        events = (session.readStream.schema("key STRING, value INT, seconds LONG")
                  .option("maxFilesPerTrigger", 1).csv(source)
                  .withColumn("ts", F.col("seconds").cast("timestamp")))
        totals = (events.withWatermark("ts", f"{watermark_delay_seconds} seconds")
                  .groupBy(F.window("ts", f"{window_seconds} seconds"), "key")
                  .agg(F.sum("value").alias("total")))
        began = time.perf_counter()
        query = (totals.writeStream.outputMode("update")
                 .foreachBatch(functools.partial(_keep_latest, latest))
                 .option("checkpointLocation", os.path.join(scratch, "checkpoint"))
                 .trigger(processingTime="0 seconds").start())
        try:
            _wait_for_files(query, files)
        finally:
            query.stop()
        seconds = time.perf_counter() - began
        progress = [entry for entry in query.recentProgress if entry["numInputRows"] > 0]
        millis = [entry["durationMs"]["triggerExecution"] for entry in progress]
        return {"millis": millis, "rows": [entry["numInputRows"] for entry in progress],
                "latest": {key: total for key, (_, total) in latest.items()},
                "seconds": seconds}
    finally:
        for key, value in previous.items():
            if value is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, value)
        shutil.rmtree(scratch, ignore_errors=True)


def _keep_latest(latest: Dict[Tuple[str, int], Tuple[int, int]], frame: Any,
                 batch_id: int) -> None:
    """foreachBatch: the batch's updated windows, kept per (key, window start)."""
    for row in frame.selectExpr("key", "CAST(window.start AS LONG) AS start",
                                "total").collect():
        key = (row["key"], row["start"])
        if key not in latest or latest[key][0] < batch_id:
            latest[key] = (batch_id, row["total"])


def _wait_for_files(query: Any, files: int, limit_seconds: float = 3600) -> None:
    """Until the query has read every file (one per batch)."""
    deadline = time.monotonic() + limit_seconds
    while True:
        read = sum(1 for entry in query.recentProgress if entry["numInputRows"] > 0)
        if read >= files:
            return
        if query.exception() is not None:
            raise RuntimeError(f"the Structured Streaming query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the query read {read} of {files} batches in {limit_seconds} s")
        time.sleep(0.2)
