"""Staged artifacts of a job submitted to the job server, shipped to Spark's executors.

Beam's Python client stages a job's dependencies through the ArtifactStagingService (the
server keeps them under its staging directory, one folder per job); this module decides what
each staged file means for a pipeline that runs in Spark's own Python workers:

* Python code (``.py``, ``.zip``, ``.egg``, pure-Python ``.whl``, e.g. from
  ``--extra_package``): ``SparkContext.addPyFile``, so executors (and the driver) can import
  it. A wheel is imported from the archive as is (not installed: no compiled extensions,
  no dependencies). A source
  distribution (``.tar.gz``) is installed first (``pip install --no-deps --target``, offline)
  and shipped as a zip.
* the pickled main session (``--save_main_session``): loaded on the driver, and shipped with
  ``SparkContext.addFile`` under its staged name.
* ``requirements.txt`` and the client's dependency listing: not installed (the executors run
  the server's interpreter); reported in the job's messages so nothing is dropped silently.
* any other file: ``SparkContext.addFile`` (tasks find it with ``SparkFiles.get(name)``).

Each decision is returned as a line for the job's message stream.

>>> staged_name_of_path("/tmp/staging/job-1/0a1b-extra.whl")
'extra.whl'
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Iterable, List, Tuple

from apache_beam.internal import pickler

from runners.spark.beam_internals import beam_runner_api_pb2, common_urns, proto_utils

#: File name Beam's stager gives the pickled main session.
MAIN_SESSION_FILE = "pickled_main_session"
#: Staged files describing the client's environment; executors use the server's instead.
ENVIRONMENT_LISTINGS = frozenset(
    ["requirements.txt", "submission_environment_dependencies.txt", "extra_packages.txt"])
PYTHON_CODE_SUFFIXES = (".py", ".zip", ".egg", ".whl")
SOURCE_DISTRIBUTION_SUFFIXES = (".tar.gz", ".tgz")


def staged_name_of_path(path: str) -> str:
    """The client-side name of a staged file (Beam prefixes it with a content hash)."""
    base = os.path.basename(path)
    prefix, separator, name = base.partition("-")
    return name if separator and len(prefix) > 0 else base


def staged_files(
        environments: Iterable[beam_runner_api_pb2.Environment]) -> List[Tuple[str, str]]:
    """``(staged name, local path)`` of every FILE artifact of ``environments``, once each."""
    files, seen = [], set()
    for environment in environments:
        for dependency in environment.dependencies:
            if dependency.type_urn != common_urns.artifact_types.FILE.urn:
                continue
            path = proto_utils.parse_Bytes(
                dependency.type_payload, beam_runner_api_pb2.ArtifactFilePayload).path
            if dependency.role_urn == common_urns.artifact_roles.STAGING_TO.urn:
                name = proto_utils.parse_Bytes(
                    dependency.role_payload,
                    beam_runner_api_pb2.ArtifactStagingToRolePayload).staged_name
            else:
                name = staged_name_of_path(path)
            if path not in seen:
                seen.add(path)
                files.append((os.path.basename(name), path))
    return files


def ship_to_executors(spark_context: Any, files: List[Tuple[str, str]], work_dir: str) -> List[str]:
    """Make the staged ``files`` available to the job's tasks; returns what was done, per file.

    ``work_dir`` is the job's own directory on the server (files are copied there under their
    staged names, since Spark ships a file under its base name).
    """
    os.makedirs(work_dir, exist_ok=True)
    report = []
    for name, path in files:
        if name in ENVIRONMENT_LISTINGS:
            report.append(f"{name}: not installed; executors run the job server's Python "
                          "environment (install packages there, or stage them with "
                          "--extra_package)")
            continue
        local = os.path.join(work_dir, name)
        shutil.copyfile(path, local)
        if name == MAIN_SESSION_FILE:
            pickler.load_session(local)
            spark_context.addFile(local)
            report.append(f"{name}: loaded on the driver, shipped to executors (SparkFiles)")
        elif name.endswith(PYTHON_CODE_SUFFIXES):
            if name.endswith(".whl"):
                # A wheel is a zip archive; PySpark puts only .zip/.egg/.jar archives on the
                # Python path, so ship it under a .zip name.
                archive = local[:-len(".whl")] + ".zip"
                os.replace(local, archive)
                local = archive
            spark_context.addPyFile(local)
            report.append(f"{name}: added to the executors' Python path")
        elif name.endswith(SOURCE_DISTRIBUTION_SUFFIXES):
            archive = _install_as_zip(local, work_dir)
            spark_context.addPyFile(archive)
            report.append(f"{name}: installed (no dependencies) and added to the executors' "
                          "Python path")
        else:
            spark_context.addFile(local)
            report.append(f"{name}: shipped to executors (SparkFiles.get({name!r}))")
    return report


def _install_as_zip(source_distribution: str, work_dir: str) -> str:
    """Install a source distribution offline into a folder; return it zipped."""
    target = tempfile.mkdtemp(prefix="site-", dir=work_dir)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
               "--no-build-isolation", "--target", target, source_distribution]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise ValueError(
            f"staged package {os.path.basename(source_distribution)!r} could not be installed "
            f"on the job server (offline, without dependencies; building it needs setuptools "
            f"and wheel there): {completed.stderr.strip()[-2000:]}. "
            "Stage a wheel instead (--extra_package my_package-1.0-py3-none-any.whl).")
    base = os.path.join(work_dir, os.path.basename(source_distribution).split(".tar")[0])
    return shutil.make_archive(base, "zip", target)
