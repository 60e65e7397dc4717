"""Streaming on the Spark runner: the micro-batch loop.

Each micro-batch, sources deliver elements and a watermark; the plan's stages run as in
batch, and every keyed step (GroupByKey, stateful DoFn) works on the state its key
partitions keep where they live (:mod:`runners.spark.state`: stores on the executors,
durable in ``--checkpoint_dir``; the backend's
:class:`~runners.spark.backends.base.PartitionAffinity` sends a partition's tasks where its
store is).

* :mod:`~runners.spark.streaming.loop`: the driver's loop (sources, batches, rounds, the end).
* :mod:`~runners.spark.streaming.micro_batch`: one round of a batch: the stages, one Spark job.
* :mod:`~runners.spark.streaming.compact_round`: a round that holds little, in one Spark task.
* :mod:`~runners.spark.streaming.watermarks`: every stage's watermarks, on the driver.
* :mod:`~runners.spark.streaming.keyed_step`: a keyed step across batches, on the driver.
* :mod:`~runners.spark.streaming.keyed_batch`: what a keyed step's tasks get and report.
* :mod:`~runners.spark.streaming.grouping`: a GroupByKey's task, with Beam's trigger driver.
* :mod:`~runners.spark.streaming.stateful`: a stateful DoFn stage's task (user state, timers).
* :mod:`~runners.spark.streaming.test_stream`: TestStream as a source, one event a batch.
* :mod:`~runners.spark.streaming.unbounded`: splittable DoFns, residuals carried between batches.
* :mod:`~runners.spark.streaming.planned_sources`: sources that plan their batches (Kafka).
* :mod:`~runners.spark.streaming.side_input_history`: side inputs kept while their windows live.
* :mod:`~runners.spark.streaming.side_input_readiness`: main elements wait for their side
  inputs.
* :mod:`~runners.spark.streaming.batch_report`: the per-batch log line, metrics and JSON line.

The runner starts it as ``runners.spark.streaming.loop.StreamingExecution``. The state
reader's first names, ``runners.spark.streaming.state_table`` and ``state_table_cli``, stay
as aliases of :mod:`runners.spark.state.table`.
"""
