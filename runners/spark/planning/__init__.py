"""From a Beam pipeline to an execution plan (driver side), before any Spark job: Beam's
``create_stages`` to the runner's ``run_stages`` (:mod:`runners.spark.execution`).

* :mod:`~runners.spark.planning.support`: what the runner can run, in batch and streaming;
  what it refuses, naming the transform.
* :mod:`~runners.spark.planning.execution_plan`: the portable proto fused into stages with
  Beam's own phases, and the plan's named parts (stages, side inputs, keyed steps).
* :mod:`~runners.spark.planning.coders`: the windowed-value coder with microsecond
  timestamps that a streaming plan's stages exchange.
"""
