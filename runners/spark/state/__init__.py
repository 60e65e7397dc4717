"""Keyed state of streaming runs: where it lives, how it is made durable, and how it is read.

A keyed step (a GroupByKey or a stateful DoFn) keeps each key partition's state in a store
on the executor that runs it; what a batch changed is durable in ``--checkpoint_dir`` when
the batch commits, so any executor can rebuild a partition's store, a driver can resume, a
job can be rescaled, updated, and its state read as a table. The micro-batch loop that uses
it is :mod:`runners.spark.streaming`.

* :mod:`~runners.spark.state.encoding`: one key's state (trigger state, user cells,
  timers), encoded explicitly and versioned.
* :mod:`~runners.spark.state.store`: a key partition's store on its executor (LMDB).
* :mod:`~runners.spark.state.lmdb_environments`: the stores' LMDB environments in a Python
  worker (cached, grown, their disk space reserved).
* :mod:`~runners.spark.state.changelog`: a partition's durable state: checksummed deltas and
  snapshots in the checkpoint location.
* :mod:`~runners.spark.state.snapshots`: snapshots written off the batch's path.
* :mod:`~runners.spark.state.storage`: ``--checkpoint_dir`` on any Beam filesystem, ``s3://``
  through the runner's own client, and storage that misbehaves.
* :mod:`~runners.spark.state.checkpoint`: checkpoint manifests, and resuming.
* :mod:`~runners.spark.state.manifest_coders`: each keyed step's coders, in the manifest.
* :mod:`~runners.spark.state.rescale`: state re-split into another number of partitions.
* :mod:`~runners.spark.state.update`: a changed pipeline resuming another's checkpoint.
* :mod:`~runners.spark.state.table`: a job's state read from its checkpoint as a table, its
  change feed, and the command line.
"""
