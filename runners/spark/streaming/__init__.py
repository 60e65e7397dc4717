"""Streaming on the Spark runner: a micro-batch loop with per-key state carried between batches.

* :mod:`~runners.spark.streaming.loop`: the driver's loop (sources, batches, the end).
* :mod:`~runners.spark.streaming.stages`: one batch over the fused stages, watermarks.
* :mod:`~runners.spark.streaming.grouping`: a GroupByKey with Beam's trigger driver.
* :mod:`~runners.spark.streaming.stateful`: a stateful DoFn stage (user state, timers).
* :mod:`~runners.spark.streaming.state`: state encoded explicitly and versioned.
* :mod:`~runners.spark.streaming.test_stream`: TestStream as a source, one event a batch.
* :mod:`~runners.spark.streaming.unbounded`: splittable DoFns, residuals carried between batches.
"""

from runners.spark.streaming.loop import StreamingExecution

__all__ = ["StreamingExecution"]
