"""``python -m bench.teststream``: TestStream pipelines on our SparkRunner and the
DirectRunner (:mod:`bench.teststream.__main__` says what it measures;
:mod:`~bench.teststream.pipelines` are the pipelines).
"""
