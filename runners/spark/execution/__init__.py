"""Running a plan on Spark (driver side): Beam's ``run_stages`` to the planner's
``create_stages`` (:mod:`runners.spark.planning`).

* :mod:`~runners.spark.execution.stage_pass`: one pass over the plan's fused stages as
  datasets of the run's backend: how every stage runs, in batch and in each micro-batch.
* :mod:`~runners.spark.execution.batch`: a batch run: one pass, keyed steps over complete
  input.
* :mod:`~runners.spark.execution.shuffle`: GroupByKey, Reshuffle and key partitioning.
* :mod:`~runners.spark.execution.run_context`: what every pass of one run shares.
* :mod:`~runners.spark.execution.result`: the ``PipelineResult``: state, waiting,
  cancelling, draining, metrics.
"""
