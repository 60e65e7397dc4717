"""Durable storage of a streaming run: ``--checkpoint_dir`` on any filesystem Beam knows.

* :mod:`~runners.spark.state.storage.filesystems`: the checkpoint location's files, on any
  Beam filesystem (local, ``s3://``, ``gs://``, ...).
* :mod:`~runners.spark.state.storage.s3`: ``s3://`` through one boto3 client per process.
* :mod:`~runners.spark.state.storage.faults`: transient errors retried, permanent ones
  named, full disks said.
"""
