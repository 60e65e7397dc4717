"""What a pipeline run with ``--runner=SparkRunner`` stages for its executors.

Beam's options for a pipeline's dependencies, honoured as Beam's other runners honour them,
through Beam's own stager (``environments.python_sdk_dependencies``: the same files a
portable client stages for a job server):

* ``--requirements_file FILE``: requirements the executors' Python does not already satisfy
  are installed, offline, from the packages Beam's stager downloaded into
  ``--requirements_cache`` (on a machine without an index: ``--requirements_cache=skip`` and
  the requirements staged with ``--extra_package``, or installed on every node);
* ``--extra_package PATH`` (wheels, source distributions) and ``--setup_file setup.py`` (the
  user's own package, built as a source distribution): installed into the job's site;
* ``--save_main_session``: the ``__main__`` module's session, loaded in each Python worker.

The installed packages are zipped and shipped, and named with the main session in the
job's :class:`~runners.spark.dependencies.worker.JobEnvironment`, which every task of the
run carries. The job server gets the same files through Beam's artifact service and
ships them the same way (:func:`~runners.spark.dependencies.artifacts.ship_to_executors`).

>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> needs_staging(PipelineOptions([])), needs_staging(PipelineOptions(["--save_main_session"]))
(False, True)
"""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from runners.spark.beam_internals import beam_runner_api_pb2, environments
from runners.spark.dependencies import artifacts

_LOGGER = logging.getLogger(__name__)


def needs_staging(options: PipelineOptions) -> bool:
    """Whether ``options`` name anything for the executors (see the module docstring)."""
    setup = options.view_as(SetupOptions)
    return bool(setup.requirements_file or setup.extra_packages or setup.setup_file
                or setup.save_main_session)


def stage_for_executors(backend: artifacts.FileShipping, options: PipelineOptions,
                        job_id: Optional[str] = None) -> Optional[artifacts.ShippedArtifacts]:
    """Stage what ``options`` name and ship it to the workers of ``backend``; None if
    nothing is named (the run's tasks carry ``environment()`` of what it returns).

    Raises MissingPackageError or PackageInstallError (naming the package) when a package
    cannot be installed without an index.
    """
    if not needs_staging(options):
        return None
    job_id = job_id or uuid.uuid4().hex[:12]
    work_dir = tempfile.mkdtemp(prefix=f"beam-spark-job-{job_id}-")
    # Beam's stager makes its temporary folders inside this one (--extra_package): it must be.
    staging_dir = os.path.join(work_dir, "staged")
    os.makedirs(staging_dir)
    staged = environments.python_sdk_dependencies(options, staging_dir)
    files = artifacts.staged_files([beam_runner_api_pb2.Environment(dependencies=staged)])
    shipped = artifacts.ship_to_executors(backend, files, os.path.join(work_dir, "shipped"),
                                          job_id)
    for line in shipped.report:
        _LOGGER.info("staged for the executors: %s", line)
    return shipped
