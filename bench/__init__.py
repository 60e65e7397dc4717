"""Benchmarks: the same workloads on our SparkRunner, hand-written PySpark and the DirectRunner.

Run ``python -m bench`` (``make bench``); see :mod:`bench.__main__` for the options and what is
measured. Speed is measured here and only here: tests check answers, never timings.
"""
