"""The testing kit's pytest plugin: a test asking for ``runner_name``, ``runner`` or
``make_pipeline`` runs once per runner (:mod:`beam_spark.testing`).

pytest loads it by itself once the project is installed (entry point ``pytest11``:
``beam_spark``; ``pytest -p no:beam_spark`` leaves it out). A test of yours::

    from apache_beam.testing.test_stream import TestStream
    from apache_beam.testing.util import assert_that, equal_to

    def test_sums(make_pipeline):
        with make_pipeline(streaming=True) as pipeline:
            stream = TestStream().add_elements([1, 2]).advance_watermark_to_infinity()
            assert_that(pipeline | stream | beam.CombineGlobally(sum), equal_to([3]))

runs as ``test_sums[DirectRunner]`` and ``test_sums[SparkRunner]``, and with
``--beam-spark-connect`` also as ``test_sums[SparkConnect]``. The fixtures:

* ``runner_name``: the runner of this instance of the test (one of
  :data:`~beam_spark.testing.RUNNER_NAMES`);
* ``runner``: a new runner of that kind, on the run's shared session;
* ``make_pipeline(streaming=False, **options)``: a blocking ``TestPipeline`` on it;
* ``spark_session``, ``spark_connect``: the run's shared classic and Connect sessions;
* ``beam_spark_settings``: how the sessions are made
  (:class:`~beam_spark.testing.SparkTestSettings`); override it in a ``conftest.py`` to add
  Spark settings or folders for the workers.

Choosing runners (a command-line option, else its environment variable, else the ini
option of the same name):

* ``--beam-spark-runners DirectRunner,SparkRunner`` (``BEAM_SPARK_RUNNERS``,
  ``beam_spark_runners``): the runners every such test runs on;
* ``--beam-spark-connect`` (``BEAM_SPARK_CONNECT=1``, ``beam_spark_connect = true``): add
  ``SparkConnect``, on a local Connect server started from pyspark's jars;
* ``--beam-spark-remote sc://HOST:PORT`` (``BEAM_SPARK_REMOTE``, ``beam_spark_remote``):
  ``SparkConnect`` on a server of yours (it implies ``--beam-spark-connect``).

A ``conftest.py`` may narrow the runners of a test with the hook
:func:`pytest_beam_spark_runner_names`.
"""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

import pytest

from beam_spark import testing

_TRUE = ("1", "true", "yes", "on")


class KitHooks:
    """The hooks the kit adds to pytest (implement them in a ``conftest.py``)."""

    @pytest.hookspec(firstresult=True)
    def pytest_beam_spark_runner_names(self, metafunc: Any,
                                       names: List[str]) -> Optional[List[str]]:
        """The runners the test ``metafunc`` describes runs on, given the run's choice
        ``names``; None keeps ``names``."""


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(KitHooks)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("beam_spark", "Beam on Spark: the testing kit (beam_spark.testing)")
    group.addoption("--beam-spark-runners", default=None, metavar="NAMES",
                    help="comma-separated runners for tests using make_pipeline: "
                         f"{', '.join(testing.RUNNER_NAMES)} (default: DirectRunner,"
                         "SparkRunner, and SparkConnect when asked)")
    group.addoption("--beam-spark-connect", action="store_true", default=None,
                    help="run those tests on Spark Connect too (a local Connect server)")
    group.addoption("--beam-spark-remote", default=None, metavar="sc://HOST:PORT",
                    help="run the SparkConnect tests on this Spark Connect server")
    parser.addini("beam_spark_runners", "runners for tests using make_pipeline", default="")
    parser.addini("beam_spark_connect", "run those tests on Spark Connect too", type="bool",
                  default=False)
    parser.addini("beam_spark_remote", "Spark Connect server of the SparkConnect tests",
                  default="")


def _setting(config: Any, name: str) -> Any:
    """A kit option: the command line's, else ``BEAM_SPARK_<NAME>``, else the ini file's."""
    value = config.getoption(f"beam_spark_{name}")
    if value is None:
        value = os.environ.get(f"BEAM_SPARK_{name.upper()}") or None
        if value is not None and name == "connect":
            value = value.strip().lower() in _TRUE
    if value is None:
        value = config.getini(f"beam_spark_{name}")
    return value


def remote_url(config: Any) -> Optional[str]:
    """The Connect server of the SparkConnect tests, when the user names one."""
    return _setting(config, "remote") or None


def chosen_runners(config: Any) -> List[str]:
    """The runners the run's options choose (see the module docstring)."""
    listed = _setting(config, "runners")
    if listed:
        names = [name.strip() for name in str(listed).split(",") if name.strip()]
        unknown = [name for name in names if name not in testing.RUNNER_NAMES]
        if unknown:
            raise pytest.UsageError(
                f"--beam-spark-runners names unknown runner(s) {', '.join(unknown)}; "
                f"known: {', '.join(testing.RUNNER_NAMES)}")
        return names
    names = ["DirectRunner", "SparkRunner"]
    if _setting(config, "connect") or remote_url(config):
        names.append("SparkConnect")
    return names


def pytest_configure(config: Any) -> None:
    chosen_runners(config)  # a name that is no runner: refused before collection


def pytest_generate_tests(metafunc: Any) -> None:
    """A test using ``runner_name`` (through ``runner`` or ``make_pipeline`` too) runs on
    every chosen runner, unless it parametrizes ``runner_name`` itself."""
    if "runner_name" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0]
        if "runner_name" in (argnames.split(",") if isinstance(argnames, str) else argnames):
            return
    names = chosen_runners(metafunc.config)
    narrowed = metafunc.config.hook.pytest_beam_spark_runner_names(metafunc=metafunc,
                                                                   names=list(names))
    metafunc.parametrize("runner_name", narrowed if narrowed is not None else names,
                         indirect=True)


def pytest_pycollect_makeitem(collector: Any, name: str, obj: Any) -> Optional[list]:
    """Beam's own classes named Test* (``TestStream``, ``TestPipeline``) imported into a test
    module are not tests: not collected, and not warned about. A class the collected module
    defines itself (Beam's own test files' ``unittest.TestCase`` classes) is collected as
    pytest would."""
    module = getattr(getattr(collector, "obj", None), "__name__", None)
    defined_in = getattr(obj, "__module__", "")
    if (isinstance(obj, type) and defined_in.startswith("apache_beam.")
            and defined_in != module):
        return []
    return None


def default_python_path(session: Any) -> List[str]:
    """The folders the workers need: those the collected test modules were imported from,
    then the ini file's ``pythonpath``."""
    modules = [item.module for item in session.items if getattr(item, "module", None)]
    folders = testing.module_folders(modules)
    for path in session.config.getini("pythonpath"):
        if str(path) not in folders:
            folders.append(str(path))
    return folders


@pytest.fixture(scope="session")
def beam_spark_settings(request: Any) -> testing.SparkTestSettings:
    """How the run's Spark sessions are made (override it in a ``conftest.py``)."""
    return testing.SparkTestSettings(python_path=default_python_path(request.session),
                                     remote=remote_url(request.config))


@pytest.fixture(scope="session")
def spark_session(beam_spark_settings: testing.SparkTestSettings) -> Any:
    """The classic SparkSession every SparkRunner test of the run shares."""
    return testing.shared_spark_session(beam_spark_settings)


@pytest.fixture
def spark_connect(beam_spark_settings: testing.SparkTestSettings) -> Any:
    """The Spark Connect session every SparkConnect test of the run shares."""
    return testing.shared_connect_session(beam_spark_settings)


@pytest.fixture
def runner_name(request: Any) -> str:
    """The name of the runner this instance of the test runs on."""
    return request.param


@pytest.fixture
def runner(request: Any, runner_name: str) -> Any:
    """A new runner of this test's kind, on the run's shared session of its kind."""
    spark = None
    if runner_name == "SparkRunner":
        spark = request.getfixturevalue("spark_session")
    elif runner_name == "SparkConnect":
        spark = request.getfixturevalue("spark_connect")
    return testing.runner_for(runner_name, None, spark)


@pytest.fixture
def make_pipeline(runner: Any) -> Callable[..., Any]:
    """Factory of a blocking TestPipeline on this test's runner: ``make_pipeline(
    streaming=True)`` for a TestStream; keyword arguments become pipeline options."""

    def make(streaming: bool = False, **options: Any) -> Any:
        return testing.test_pipeline(runner, streaming=streaming, **options)

    return make
