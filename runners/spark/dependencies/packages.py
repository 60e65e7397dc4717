"""Installing a job's staged Python packages on the job server, offline, into the job's site.

Beam's client stages what a pipeline needs beyond its own code: ``--extra_package`` files
(wheels, source distributions; their names listed in ``extra_packages.txt``) and, with
``--requirements_file``, the requirements file plus, unless ``--requirements_cache=skip``,
the packages its client downloaded into the requirements cache. :func:`install_job_packages`
installs them as Beam's SDK containers do, but without any network: ``pip install
--no-index --find-links <the job's staged packages>``, into a folder of the job's own
(``--target``), which the job's Spark workers put on ``sys.path``
(:mod:`runners.spark.dependencies.worker`).

* A requirement the job server's own environment already satisfies is not installed again
  (the job runs on the server's interpreter: ``apache-beam``, ``pyspark`` and the like are
  there).
* Any other requirement must be staged: if it is not, :class:`MissingPackageError` names it
  and says how to stage it; nothing is downloaded at run time.
* Packages are installed without dependencies (Beam stages them so); a dependency an
  installed package declares and neither the job's packages nor the server provide is
  reported as missing, by name, rather than failing later at import in a task.
* A source distribution is built on the server, without build isolation (offline), with the
  server's setuptools (>= 70.1 builds wheels by itself).

>>> unsatisfied_requirements(["apache-beam>=2", "# a comment", "", "surely-not-installed==1.0"])
['surely-not-installed==1.0']
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from typing import List, Optional, Sequence, Set, Tuple

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement

_NOT_FOUND = re.compile(r"No matching distribution found for ([^\s]+)")
_NO_VERSION = re.compile(r"Could not find a version that satisfies the requirement ([^\s]+)")
_STAGE_HINT = ("nothing is downloaded at run time: stage it with the job (--requirements_file "
               "with --requirements_cache, or --extra_package) or install it in the job "
               "server's Python environment")


class MissingPackageError(ValueError):
    """A package a job needs is neither staged with the job nor installed on the server."""


class PackageInstallError(ValueError):
    """A staged package could not be installed on the job server (pip's reason attached)."""


#: Sites of jobs run so far: on the server's sys.path (see artifacts), not the server's own.
JOB_SITES: Set[str] = set()


def _server_paths() -> List[str]:
    return [path for path in sys.path if path not in JOB_SITES]


def _satisfied(requirement: Requirement, paths: Optional[Sequence[str]] = None) -> bool:
    """Whether ``requirement`` holds where ``paths`` point (default: the server's own
    environment), or is not needed here (its marker is false, e.g. an extra's)."""
    if requirement.marker is not None:
        if not requirement.marker.evaluate({**default_environment(), "extra": ""}):
            return True
    if requirement.url:
        return False
    search = list(paths) if paths is not None else _server_paths()
    found = next(iter(metadata.distributions(name=requirement.name, path=search)), None)
    if found is None:
        return False
    return requirement.specifier.contains(found.version, prereleases=True)


def unsatisfied_requirements(lines: Sequence[str]) -> List[str]:
    """The requirement lines the job server's environment does not already satisfy.

    Comments and blank lines are dropped; a line that is not a plain requirement (a pip
    option, a path) is kept for pip to judge.
    """
    remaining = []
    for raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            remaining.append(line)
            continue
        if not _satisfied(requirement):
            remaining.append(line)
    return remaining


def install_job_packages(site: str, packages: Sequence[str],
                         requirements_file: Optional[str], find_links: str) -> List[str]:
    """Install ``packages`` (paths of wheels / source distributions) and the requirements of
    ``requirements_file`` not already on the server into ``site``, from ``find_links`` only.

    Returns one line per decision, for the job's messages. Raises MissingPackageError for a
    requirement or dependency that is not staged, PackageInstallError for other failures.
    """
    report: List[str] = []
    requirements: List[str] = []
    if requirements_file is not None:
        with open(requirements_file) as listing:
            lines = listing.read().splitlines()
        requirements = unsatisfied_requirements(lines)
        wanted = [line for line in lines if line.strip() and not line.strip().startswith("#")]
        report.append(f"requirements.txt: {len(wanted) - len(requirements)} of {len(wanted)} "
                      "already installed on the job server; installing "
                      f"{', '.join(requirements) or 'nothing'} from the staged packages")
    if not packages and not requirements:
        return report
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--no-input", "--no-index", "--no-deps", "--no-build-isolation",
               "--find-links", find_links, "--target", site, *packages]
    if requirements:
        listing = tempfile.NamedTemporaryFile(
            "w", suffix="-requirements.txt", dir=os.path.dirname(site), delete=False)
        with listing:
            listing.write("\n".join(requirements) + "\n")
        command += ["-r", listing.name]
    completed = subprocess.run(command, capture_output=True, text=True, check=False,
                               env=_offline_pip_environment())
    if requirements:
        os.remove(listing.name)
    if completed.returncode != 0:
        raise _install_error(completed.stderr)
    for package in packages:
        report.append(f"{os.path.basename(package)}: installed for this job (no dependencies)")
    missing = _missing_dependencies(site)
    if missing:
        needed = "; ".join(f"{package} needs {dependency}" for package, dependency in missing)
        raise MissingPackageError(
            f"staged packages need packages that are neither staged nor installed on the job "
            f"server ({needed}): {_STAGE_HINT}.")
    return report


def _offline_pip_environment() -> dict:
    """The server's environment without pip settings: no configured index, link folder or
    constraint reaches the install, only the job's staged packages."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.upper().startswith("PIP_")}
    environment.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
                       PIP_DISABLE_PIP_VERSION_CHECK="1")
    return environment


def _install_error(stderr: str) -> ValueError:
    match = _NOT_FOUND.search(stderr) or _NO_VERSION.search(stderr)
    if match:
        return MissingPackageError(
            f"requirement {match.group(1)!r} is not staged with the job and not installed on "
            f"the job server; {_STAGE_HINT}.")
    hint = ""
    if "bdist_wheel" in stderr:
        hint = (" (building a source distribution needs setuptools >= 70.1 in the job "
                "server's environment; or stage a wheel instead)")
    return PackageInstallError(
        f"installing the job's staged packages failed{hint}; pip said: {stderr.strip()[-2000:]}")


def _missing_dependencies(site: str) -> List[Tuple[str, str]]:
    """(package, requirement) pairs the site's packages declare and nothing provides."""
    missing = []
    for distribution in metadata.distributions(path=[site]):
        for declared in distribution.requires or []:
            try:
                requirement = Requirement(declared)
            except InvalidRequirement:
                continue
            # Markers leave out optional (extra) and other platforms' dependencies.
            if _satisfied(requirement, [site]) or _satisfied(requirement):
                continue
            missing.append((distribution.metadata["Name"], declared))
    return missing
