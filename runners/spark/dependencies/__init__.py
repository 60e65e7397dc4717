"""What the executors need from the driver: the project's own packages, what a pipeline
stages, and the driver's working directory.

A cluster's executors have Python and the project's third-party dependencies (Beam, PySpark,
kafka-python, ...) but not necessarily this project or the user's code. What reaches them:

* :mod:`~runners.spark.dependencies.project`: the project's own packages, zipped and shipped
  when the master is a cluster (the runner's worker-side code runs in every task);
* :mod:`~runners.spark.dependencies.staging`: Beam's ``--requirements_file``,
  ``--extra_package``, ``--setup_file`` and ``--save_main_session``, staged with Beam's own
  stager when a pipeline runs with ``--runner=SparkRunner`` (the job server receives the same
  files through Beam's artifact service);
* :mod:`~runners.spark.dependencies.artifacts`: what each staged file means (packages
  installed offline into the job's *site*, the pickled main session, other files), shared by
  both paths; :mod:`~runners.spark.dependencies.packages` installs the packages;
* :mod:`~runners.spark.dependencies.worker`: the task side, which puts a job's site on the
  Python worker's path and loads its main session before the first bundle;
* :mod:`~runners.spark.dependencies.working_directory`: relative paths mean the driver's
  working directory when the pipeline runs: tasks run there, or the pipeline is refused
  where the workers do not see it.
"""
