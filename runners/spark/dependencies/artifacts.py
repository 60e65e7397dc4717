"""Staged artifacts of a job submitted to the job server, shipped to Spark's executors.

Beam's Python client stages a job's dependencies through the ArtifactStagingService (the
server keeps them under its staging directory, one folder per job); this module decides what
each staged file means for a pipeline that runs in Spark's own Python workers:

* packages: wheels and source distributions (``--extra_package``; named in
  ``extra_packages.txt``), the user's own package (``--setup_file``: ``workflow.tar.gz``),
  and the requirements of ``requirements.txt``
  (``--requirements_file``) the server does not already have, from the packages staged with
  them (``--requirements_cache``): installed offline into the job's own site folder, shipped
  zipped, and put on the job's workers' ``sys.path`` (see :mod:`runners.spark.dependencies.packages`
  and :mod:`runners.spark.dependencies.worker`). A package neither staged nor installed on the
  server fails the job, by name.
* the pickled main session (``--save_main_session``): loaded on the driver, shipped under a
  name of its content, and loaded in each Python worker before the job's first bundle there.
* other Python code (``.py``, ``.zip``, ``.egg`` not named as packages): on every worker's
  path from then on (the backend's ``add_python_file``: ``addPyFile``, or a Connect
  artifact).
* the client's environment listing (``submission_environment_dependencies.txt``): not used;
  executors run the server's interpreter.
* any other file: shipped for the tasks, which find it with ``SparkFiles.get(name)`` (the
  backend's ``add_file``).

Each decision is returned as a line for the job's message stream.

>>> staged_name_of_path("/tmp/staging/job-1/0a1b-extra.whl")
'extra.whl'
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from typing import Iterable, List, Optional, Protocol, Tuple

from runners.spark.beam_internals import beam_runner_api_pb2, common_urns, pickler, proto_utils
from runners.spark.dependencies import packages as job_packages
from runners.spark.dependencies import worker as job_environment

#: File name Beam's stager gives the pickled main session.
MAIN_SESSION_FILE = "pickled_main_session"
#: The listing of ``--extra_package`` files Beam's stager writes.
EXTRA_PACKAGES_FILE = "extra_packages.txt"
#: The package Beam's stager builds from ``--setup_file``.
WORKFLOW_TARBALL = "workflow.tar.gz"
#: Requirements files end so (``requirements.txt``; see :func:`staged_files`).
REQUIREMENTS_SUFFIX = "requirements.txt"
#: The client's environment, listed for information; executors run the server's.
ENVIRONMENT_LISTING = "submission_environment_dependencies.txt"
PYTHON_CODE_SUFFIXES = (".py", ".zip", ".egg")
#: What pip installs; a ``.zip`` is a package only when listed as one (else code).
PACKAGE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar", ".zip")
_UNLISTED_PACKAGE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar")


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
            elif dependency.role_urn == common_urns.artifact_roles.PIP_REQUIREMENTS_FILE.urn:
                name = f"{staged_name_of_path(path)}-{REQUIREMENTS_SUFFIX}"
            else:
                name = staged_name_of_path(path)
            if path not in seen:
                seen.add(path)
                files.append((os.path.basename(name), path))
    return files


@dataclasses.dataclass
class ShippedArtifacts:
    """What a job's tasks need to find its artifacts (see :mod:`runners.spark.dependencies.worker`).

    Attributes:
      site: the ``SparkFiles`` name of the job's installed packages (zip), or None.
      main_session: the ``SparkFiles`` name of its pickled main session, or None.
      report: one line per staged file: what was done with it.
    """

    site: Optional[str] = None
    main_session: Optional[str] = None
    report: List[str] = dataclasses.field(default_factory=list)

    def environment(self) -> job_environment.JobEnvironment:
        """What the job's tasks carry to find these files."""
        return job_environment.JobEnvironment(self.site, self.main_session)


class FileShipping(Protocol):
    """What shipping needs of a Spark: the two file methods of the runner's backends
    (:class:`runners.spark.backends.base.Backend`, which this package does not import: the
    backends ship the project with it)."""

    def add_python_file(self, path: str) -> None:
        """A ``.py``, ``.zip`` or ``.egg`` on every Python worker's path."""

    def add_file(self, path: str) -> None:
        """A file tasks find with ``SparkFiles.get(basename)``."""


def ship_to_executors(backend: FileShipping, files: List[Tuple[str, str]], work_dir: str,
                      job_id: str) -> ShippedArtifacts:
    """Make the staged ``files`` available to the job's tasks (see module doc).

    ``work_dir`` is the job's own directory on the server (files are copied there under their
    staged names). Raises :class:`~runners.spark.dependencies.packages.MissingPackageError` (or
    ``PackageInstallError``) when the job's packages cannot be installed.
    """
    packages_dir = os.path.join(work_dir, "packages")
    os.makedirs(packages_dir, exist_ok=True)
    shipped = ShippedArtifacts()
    local = {}
    for name, path in files:
        in_packages = name.endswith(PACKAGE_SUFFIXES)
        local[name] = os.path.join(packages_dir if in_packages else work_dir, name)
        shutil.copyfile(path, local[name])
    extra_packages = _extra_packages(local)
    requirements = _requirements(local, work_dir)
    for name, path in local.items():
        if name in (EXTRA_PACKAGES_FILE, ENVIRONMENT_LISTING) or name.endswith(
                REQUIREMENTS_SUFFIX) or name in extra_packages:
            continue
        if name == MAIN_SESSION_FILE:
            continue  # after the packages, which the session may refer to
        if name.endswith(PYTHON_CODE_SUFFIXES):
            backend.add_python_file(path)
            shipped.report.append(f"{name}: added to the executors' Python path")
        elif name.endswith(PACKAGE_SUFFIXES):
            shipped.report.append(f"{name}: staged package, installed if a requirement "
                                  "needs it")
        else:
            backend.add_file(path)
            shipped.report.append(f"{name}: shipped to executors (SparkFiles.get({name!r}))")
    site = os.path.join(work_dir, "site")
    os.makedirs(site, exist_ok=True)
    shipped.report += job_packages.install_job_packages(
        site, [local[name] for name in extra_packages], requirements, packages_dir)
    if os.listdir(site):
        archive = shutil.make_archive(
            os.path.join(work_dir, job_environment.site_file_name(job_id)[: -len(".zip")]),
            "zip", site)
        backend.add_file(archive)
        shipped.site = os.path.basename(archive)
        # The driver decodes some elements too (e.g. TestStream events): the job's packages
        # go after the server's own there, which keep precedence.
        job_packages.JOB_SITES.add(site)
        sys.path.append(site)
    if MAIN_SESSION_FILE in local:
        session = local[MAIN_SESSION_FILE]
        pickler.load_session(session)
        shipped.main_session = job_environment.main_session_file_name(session)
        renamed = os.path.join(work_dir, shipped.main_session)
        os.replace(session, renamed)
        backend.add_file(renamed)
        shipped.report.append(f"{MAIN_SESSION_FILE}: loaded on the driver, and in each Python "
                              "worker before the job's first bundle there")
    return shipped


def _extra_packages(local: dict) -> List[str]:
    """Staged names of the packages to install: the ``--extra_package`` files, and the
    ``--setup_file`` package (``workflow.tar.gz``, which no listing names; every staged wheel
    or source distribution when a raw client staged no listing and no requirements)."""
    workflow = [WORKFLOW_TARBALL] if WORKFLOW_TARBALL in local else []
    listing = local.get(EXTRA_PACKAGES_FILE)
    if listing is not None:
        with open(listing) as names:
            listed = [name.strip() for name in names if name.strip() in local]
        return listed + [name for name in workflow if name not in listed]
    if any(name.endswith(REQUIREMENTS_SUFFIX) for name in local):
        return workflow
    return [name for name in local if name.endswith(_UNLISTED_PACKAGE_SUFFIXES)]


def _requirements(local: dict, work_dir: str) -> Optional[str]:
    """One requirements file with the lines of every staged one, or None."""
    names = sorted(name for name in local if name.endswith(REQUIREMENTS_SUFFIX))
    if not names:
        return None
    merged = os.path.join(work_dir, "all-requirements.txt")
    with open(merged, "w") as out:
        for name in names:
            with open(local[name]) as lines:
                out.write(lines.read().rstrip("\n") + "\n")
    return merged
