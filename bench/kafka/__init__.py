"""``python -m bench.kafka``: Kafka -> team scores -> Kafka on the SparkRunner in streaming
(:mod:`bench.kafka.__main__` says what it measures; :mod:`~bench.kafka.clients` are its
producer and consumer).
"""
