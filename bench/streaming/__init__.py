"""``python -m bench.streaming``: the streaming SparkRunner against Spark Structured
Streaming (:mod:`bench.streaming.__main__` says what it measures and how to run it).

* :mod:`~bench.streaming.workloads`: the events and the reference answers;
* :mod:`~bench.streaming.beam`: the Beam pipelines on the SparkRunner's streaming loop;
* :mod:`~bench.streaming.native`: Spark Structured Streaming's own queries;
* :mod:`~bench.streaming.rescale`: a keyed job restarted at another parallelism.
"""
