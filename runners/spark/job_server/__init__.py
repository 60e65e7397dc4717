"""A Beam job server for our SparkRunner: any Beam Python pipeline, submitted through Beam's
Job API (``--runner=PortableRunner --job_endpoint=...``), runs on a Spark the server holds.

* :mod:`~runners.spark.job_server.server`: the gRPC server, its command line and its
  Spark: a SparkContext, or a Spark Connect session (``python -m runners.spark.job_server
  --port 8099 [--spark_remote sc://HOST:PORT]``).
* :mod:`~runners.spark.job_server.service`: the JobService: jobs, their states, messages
  and metrics; each job runs its pipeline with :class:`runners.spark.SparkRunner`.
* :mod:`~runners.spark.dependencies.artifacts`: what a job staged, turned into what its tasks
  need (installed packages, the main session, files).
* :mod:`~runners.spark.dependencies.packages`: installing a job's staged packages offline.

The worker side, which puts a job's packages and session in place in each Python worker, is
:mod:`runners.spark.dependencies.worker`: part of the runner, since every task calls it.
"""
