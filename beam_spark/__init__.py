"""``beam-spark``: run your own Beam pipeline on our SparkRunner, and the project's commands.

Beam resolves ``--runner=SparkRunner`` to its own Java job-server runner (a jar fetched at
run time). A pipeline started by this launcher gets ours for that name instead (also
``spark``, in any case, and a name given in code), and every other runner is Beam's::

    beam-spark run my_pipeline.py --runner SparkRunner --spark_master_url spark://HOST:7077
    beam-spark run -m my_package.job --runner SparkRunner --spark_remote sc://HOST:15002
    beam-spark submit --master spark://HOST:7077 my_pipeline.py --runner SparkRunner
    beam-spark state --checkpoint_dir /var/tmp/my-pipeline --limit 20

The commands (:data:`~beam_spark.commands.COMMANDS`; each has ``--help``):

* ``run``: a pipeline file or module, as ``python FILE`` / ``python -m MODULE`` would run it
  (:mod:`~beam_spark.program`);
* ``submit``: the same through PySpark's ``spark-submit`` (:mod:`~beam_spark.submit`);
* ``state``: a streaming job's keyed state, read from its checkpoint;
* ``job-server``: Beam's Job API for portable clients;
* ``connect-server``, ``cluster``, ``kafka``: local services (a Spark Connect server, a
  standalone cluster, an embedded Kafka-protocol broker), started and stopped by PID.

``python -m beam_spark`` is the same command. The testing kit, :mod:`~beam_spark.testing`
(with a pytest plugin, :mod:`~beam_spark.pytest_plugin`), runs a TestStream test of yours on
the DirectRunner and on our SparkRunner, classic and Spark Connect.
"""
