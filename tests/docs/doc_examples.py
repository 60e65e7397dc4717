"""Running a page's examples as its reader would: in order, in one folder of their own.

A page's examples run one after the other in a new folder (or, marked ``checkout``, in the
repository's), so a file an example writes is there for the next (``file NAME`` blocks are
written there first, where they stand):

* a shell example runs in ``bash`` with ``set -euo pipefail``, on an environment without
  this suite's settings (no ``BEAM_TEST_*``, ``BEAM_SPARK_*``, ``PYTEST_*``, ``SPARK_*``),
  the Python running the tests first on the ``PATH`` (its ``python``, ``pip``, ``pytest``,
  ``beam-spark``); what an example ``export``\\ s is there for the page's later shell and
  Python examples;
* a *fast* Python example runs in the test process, in one namespace per page (a later
  example sees an earlier one's names), on the test run's shared Spark session: a
  ``SparkRunner()`` given no Spark runs there, as in a process that has a SparkContext;
* a *slow* Python example runs in a Python process of its own (what it does to its process,
  such as making a Spark Connect session its thread's active one, stays there).

Services an example starts with ``beam-spark cluster|connect-server|kafka start --state-dir
DIR`` inside its folder are stopped at the end, whatever happened (by the PIDs their state
files name, through the same commands).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional

from doc_pages import SHELL_LANGUAGES, Block, Page
from project import PYTHON, REPO

#: Seconds an example may take: a fast one (one Spark driver at most), a slow one (a
#: cluster, a Connect server, make run).
TIMEOUTS = {"fast": 300, "slow": 900}
#: State files of the services ``beam-spark`` starts, and the command that stops each.
SERVICE_STATE_FILES = {"cluster.json": "cluster", "connect.json": "connect-server",
                       "broker.json": "kafka"}
_DROPPED_PREFIXES = ("BEAM_TEST_", "BEAM_SPARK_", "PYTEST_", "SPARK_", "PYSPARK_")


class ExampleFailed(AssertionError):
    """An example that failed, named by its page and line, with what it printed."""


def base_environment() -> Dict[str, str]:
    """A reader's environment: this one without the suite's settings, the tests' Python
    first on the PATH."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(_DROPPED_PREFIXES) and name != "PYTHONPATH"}
    environment["PATH"] = os.pathsep.join([os.path.dirname(PYTHON), environment.get("PATH", "")])
    environment["PYTHONUNBUFFERED"] = "1"
    return environment


def exported(environment_file: Path) -> Dict[str, str]:
    """The variables an earlier shell example exported (``export -p`` as bash prints it)."""
    if not environment_file.exists():
        return {}
    script = f"set -a; source {shlex.quote(str(environment_file))}; env -0"
    completed = subprocess.run(["bash", "-c", script], env={}, capture_output=True, check=True)
    found = {}
    for entry in completed.stdout.decode().split("\0"):
        name, separator, value = entry.partition("=")
        if separator and name not in ("PWD", "SHLVL", "_", "OLDPWD"):
            found[name] = value
    return found


class PageRun:
    """One run of a page's examples (:func:`run_page`)."""

    def __init__(self, page: Page, folder: Path, modes: Iterable[str]) -> None:
        self.page = page
        self.folder = folder
        self.modes = set(modes)
        self.environment_file = folder / ".example-environment"
        self.namespace: Dict[str, object] = {"__name__": "__doc_example__"}

    def environment(self) -> Dict[str, str]:
        return {**base_environment(), **exported(self.environment_file)}

    def where(self, block: Block) -> Path:
        return REPO if block.checkout else self.folder

    def run(self) -> None:
        try:
            for block in self.page.blocks:
                if block.mode == "file" and block.is_example:
                    path = self.folder / block.file_name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(block.text)
                elif block.is_example and block.mode in self.modes:
                    if block.language in SHELL_LANGUAGES:
                        self.run_shell(block)
                    elif block.mode == "fast":
                        self.run_python_here(block)
                    else:
                        self.run_python_process(block)
        finally:
            self.stop_services()

    def run_shell(self, block: Block) -> None:
        keep = f"export -p > {shlex.quote(str(self.environment_file))}"
        script = f"set -euo pipefail\n{block.text}\n{keep}\n"
        self._process(block, ["bash", "-c", script])

    def run_python_process(self, block: Block) -> None:
        script = self.folder / f".example-{block.line}.py"
        script.write_text(block.text)
        self._process(block, [PYTHON, str(script)])

    def _process(self, block: Block, command: List[str]) -> None:
        try:
            completed = subprocess.run(command, cwd=self.where(block), env=self.environment(),
                                       capture_output=True, text=True,
                                       timeout=TIMEOUTS[block.mode])
        except subprocess.TimeoutExpired as error:
            raise ExampleFailed(f"{block.where}: still running after {error.timeout} s\n"
                                f"{_tail(error.stdout)}{_tail(error.stderr)}") from None
        if completed.returncode != 0:
            raise ExampleFailed(f"{block.where}: exit status {completed.returncode}\n"
                                f"--- stdout\n{_tail(completed.stdout)}\n"
                                f"--- stderr\n{_tail(completed.stderr)}")

    def run_python_here(self, block: Block) -> None:
        code = compile(block.text, block.where, "exec")
        with _working_directory(self.where(block)), _variables(exported(self.environment_file)):
            try:
                exec(code, self.namespace)  # noqa: S102: the page's own example
            except BaseException as error:
                raise ExampleFailed(f"{block.where}: {type(error).__name__}: {error}") from error

    def stop_services(self) -> None:
        for name, command in SERVICE_STATE_FILES.items():
            for state_file in self.folder.rglob(name):
                subprocess.run([PYTHON, "-m", "beam_spark", command, "stop", "--state-dir",
                                str(state_file.parent)], cwd=self.folder,
                               env=base_environment(), capture_output=True, timeout=120)


def run_page(page: Page, folder: Path, modes: Iterable[str]) -> None:
    """Run ``page``'s examples of ``modes`` (and write its files) in order in ``folder``;
    :class:`ExampleFailed` names the first that fails."""
    PageRun(page, folder, modes).run()


def _tail(text: Optional[str], characters: int = 4000) -> str:
    if not text:
        return ""
    text = text if isinstance(text, str) else text.decode(errors="replace")
    return text[-characters:]


@contextlib.contextmanager
def _working_directory(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def _variables(variables: Dict[str, str]) -> Iterator[None]:
    """The page's exported variables in this process's environment, for one example."""
    changed = {name: os.environ.get(name) for name, value in variables.items()
               if os.environ.get(name) != value and name not in ("PATH", "PYTHONUNBUFFERED")}
    os.environ.update({name: variables[name] for name in changed})
    try:
        yield
    finally:
        for name, value in changed.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


__all__ = ["ExampleFailed", "run_page"]
