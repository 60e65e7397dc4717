"""Streaming on the Spark runner: a micro-batch loop, keyed state kept where it lives.

* :mod:`~runners.spark.streaming.loop`: the driver's loop (sources, batches, rounds, the end).
* :mod:`~runners.spark.streaming.micro_batch`: one round of a batch: the stages, one Spark job.
* :mod:`~runners.spark.streaming.compact_round`: a round that holds little, in one Spark task.
* :mod:`~runners.spark.streaming.watermarks`: every stage's watermarks, on the driver.
* :mod:`~runners.spark.streaming.keyed_step`: a keyed step across batches, on the driver.
* :mod:`~runners.spark.streaming.keyed_batch`: what a keyed step's tasks get and report.
* :mod:`~runners.spark.streaming.grouping`: a GroupByKey's task, with Beam's trigger driver.
* :mod:`~runners.spark.streaming.stateful`: a stateful DoFn stage's task (user state, timers).
* :mod:`~runners.spark.state.store`: a key partition's store on its executor.
* :mod:`~runners.spark.state.lmdb_environments`: the stores' LMDB environments in a
  Python worker (cached, grown, their disk space reserved).
* :mod:`~runners.spark.state.changelog`: its durable state: checksummed deltas and
  snapshots.
* :mod:`~runners.spark.state.snapshots`: snapshots written off the batch's path.
* :mod:`~runners.spark.state.storage.filesystems`: ``--checkpoint_dir`` on any Beam filesystem.
* :mod:`~runners.spark.state.storage.s3`: ``s3://`` through the runner's own client.
* :mod:`~runners.spark.state.storage.faults`: transient errors retried, permanent ones
  named, full disks said.
* the backend's :class:`~runners.spark.backends.base.PartitionAffinity`: a key partition's tasks, where
  its store is.
* :mod:`~runners.spark.state.encoding`: one key's state, encoded explicitly and versioned.
* :mod:`~runners.spark.state.checkpoint`: checkpoint manifests, and resuming.
* :mod:`~runners.spark.streaming.test_stream`: TestStream as a source, one event a batch.
* :mod:`~runners.spark.streaming.unbounded`: splittable DoFns, residuals carried between batches.
* :mod:`~runners.spark.streaming.side_input_history`: side inputs kept while their windows live.
* :mod:`~runners.spark.streaming.side_input_readiness`: main elements wait for their side
  inputs.
* :mod:`~runners.spark.streaming.planned_sources`: sources that plan their batches (Kafka).
* :mod:`~runners.spark.streaming.batch_report`: the per-batch log line, metrics and JSON line.

The runner starts it as ``runners.spark.streaming.loop.StreamingExecution``.
"""
