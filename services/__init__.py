"""Local services the project starts for its tests, benchmarks and demo, on loopback only,
and stops by the PID it started (never by name).

* :mod:`~services.broker`: an embedded Kafka-protocol broker (``python -m services.broker``).
* :mod:`~services.cluster`: a Spark standalone cluster from pyspark's own distribution
  (``python -m services.cluster``).
* :mod:`~services.processes`: free ports, liveness, stopping by PID.
* :mod:`~services.state_file`: what ``start`` records for ``status`` and ``stop`` run later
  from another process.

Jobs do not depend on these: users point them at their own Kafka and Spark.
"""
