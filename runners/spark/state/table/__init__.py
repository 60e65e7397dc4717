"""A streaming job's keyed state, read from its checkpoint as a table.

* :mod:`~runners.spark.state.table.reader`: the state as rows, and its change feed between
  batches (plain Python, or a Spark DataFrame).
* :mod:`~runners.spark.state.table.rows`: one key's stored state as rows, decoded where the
  step's coders allow.
* :mod:`~runners.spark.state.table.cli`: the command line.
"""
