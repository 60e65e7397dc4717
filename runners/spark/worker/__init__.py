"""What runs in a Spark task's Python worker: a fused stage's bundles over one partition,
and the records, metrics and errors it hands back.

* :mod:`~runners.spark.worker.bundles`: a fused stage over one partition, as bundles of
  Beam's SDK harness in process.
* :mod:`~runners.spark.worker.components`: the pipeline's coders and windowing strategies,
  rebuilt once per worker from the broadcast bytes.
* :mod:`~runners.spark.worker.decode_loop`: the stage input's decode loop.
* :mod:`~runners.spark.worker.side_inputs`: side inputs served to bundles as state.
* :mod:`~runners.spark.worker.records`: the records that flow between Spark stages.
* :mod:`~runners.spark.worker.metrics`: metrics collected per bundle, merged on the driver.
* :mod:`~runners.spark.worker.errors`: a user's exception carried back to the driver.
* :mod:`~runners.spark.worker.replay_names`: the name of every bundle, which a replay
  reproduces (for exactly-once sinks).
"""
