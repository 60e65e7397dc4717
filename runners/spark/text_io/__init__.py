"""Beam's text IO at both ends of a stage, run by the runner's own operations.

Beam reads text a line at a time through a splittable DoFn and its range tracker, and writes
it an element at a time through its sink's writer. For Beam's own text source, the
runner reads each range's records a chunk at a time with Beam's semantics
(:mod:`~runners.spark.text_io.lines`, :mod:`~runners.spark.text_io.read`); for Beam's own
text sink, it writes a block of records at a time (:mod:`~runners.spark.text_io.write`).
:mod:`~runners.spark.text_io.planning` says which steps of a stage are Beam's text IO
(``--bulk_text_io``, default true). A user's own source or sink keeps Beam's operations.
"""
