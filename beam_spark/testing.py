"""The testing kit: one test of yours, run on Beam's DirectRunner and on our SparkRunner (on
classic Spark, and on Spark Connect when asked), so the same TestStream proves the same
panes on each.

With pytest, the kit's plugin (:mod:`beam_spark.pytest_plugin`, loaded by pytest once the
project is installed) gives a test the fixtures ``runner_name``, ``runner`` and
``make_pipeline``; a test that asks for one of them runs once per runner, its ids ending
``[DirectRunner]``, ``[SparkRunner]`` and ``[SparkConnect]``::

    def test_late_data_gets_its_own_pane(make_pipeline):
        stream = TestStream().add_elements([...]).advance_watermark_to(...)...
        with make_pipeline(streaming=True) as pipeline:
            assert_that(pipeline | stream | ..., equal_to([...]))

Every Spark test of a run shares one Spark session (:func:`shared_spark_session`) and, for
``SparkConnect``, one Connect session (:func:`shared_connect_session`: a local Connect server
started from pyspark's jars, or a server of yours). The sessions' Python workers import the
test process's test folders, since a DoFn defined in a test file is pickled by reference.

Without pytest, :func:`runner_for` and :func:`test_pipeline` are the same parts:

>>> settings = SparkTestSettings(python_path=["/my/tests"])
>>> settings.session_settings()["spark.master"], settings.session_settings()[
...     "spark.executorEnv.PYTHONPATH"]
('local[2]', '/my/tests')
>>> from apache_beam.options.pipeline_options import StandardOptions
>>> pipeline = test_pipeline(runner_for("DirectRunner", settings), streaming=True)
>>> pipeline.options.view_as(StandardOptions).streaming
True
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import sys
import tempfile
import threading
from typing import Any, Dict, List, Optional, Sequence

# Beam, PySpark and the runner are imported where used: pytest loads this kit (through its
# plugin) in every run of an environment that has the project, Spark tests or not.

#: The runners a test may run on: Beam's DirectRunner (the reference), our SparkRunner on a
#: classic Spark session, and our SparkRunner on a Spark Connect session.
RUNNER_NAMES = ("DirectRunner", "SparkRunner", "SparkConnect")
#: The runners on Spark.
SPARK_RUNNER_NAMES = ("SparkRunner", "SparkConnect")

#: Settings of the classic test session and of a local Connect server alike: a test runs
#: small jobs, so few partitions and no progress bars.
SHARED_DEFAULTS: Dict[str, str] = {
    "spark.default.parallelism": "2",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
}


@dataclasses.dataclass
class SparkTestSettings:
    """How the kit's Spark sessions are made (one classic session and one Connect session
    per test process).

    Args:
      master: the classic session's master.
      spark_conf: more Spark settings, over the kit's (:data:`SHARED_DEFAULTS` and
        :meth:`session_settings`), for the classic session and a local Connect server.
      python_path: the folders the Python workers import test modules from (their
        ``PYTHONPATH``): a DoFn defined in a test file is pickled by reference.
      daemon_module: the Python workers' daemon (``spark.python.daemon.module``): the
        runner's imports Beam once per worker process instead of once per task.
      remote: a Spark Connect server of yours (``sc://HOST:PORT``) for ``SparkConnect``;
        None starts a local one from pyspark's jars (the full PySpark needed). A server of
        yours must import your test modules itself (same folders, or installed).
      app_name: the classic session's application name.
    """

    master: str = "local[2]"
    spark_conf: Dict[str, str] = dataclasses.field(default_factory=dict)
    python_path: Sequence[str] = ()
    daemon_module: Optional[str] = "runners.spark.daemon"
    remote: Optional[str] = None
    app_name: str = "beam-spark-tests"

    def session_settings(self) -> Dict[str, str]:
        """Every setting of the classic test session."""
        settings = {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            **SHARED_DEFAULTS,
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
        }
        if self.daemon_module:
            settings["spark.python.daemon.module"] = self.daemon_module
        if self.python_path:
            settings["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(self.python_path)
        settings.update(self.spark_conf)
        return settings

    def connect_server_settings(self) -> Dict[str, str]:
        """The Spark settings a local Connect server adds to its own (which name its
        loopback address, Python, daemon and ``PYTHONPATH``)."""
        return {**SHARED_DEFAULTS, **self.spark_conf}


_LOCK = threading.RLock()
_SESSIONS: Dict[str, Any] = {}  # "classic", "server", "connect" -> the process's one


def shared_spark_session(settings: SparkTestSettings) -> Any:
    """The process's classic SparkSession for tests, made on first use with ``settings``
    (later calls return it whatever they pass: a process has one SparkContext) and
    stopped when the process exits."""
    with _LOCK:
        if "classic" not in _SESSIONS:
            from beam_spark.pyspark_install import full_pyspark_problem

            problem = full_pyspark_problem()
            if problem:
                raise RuntimeError(
                    f"The SparkRunner tests (classic Spark) {problem}. With the thin client, "
                    "run the tests on a Connect server instead: pytest --beam-spark-runners "
                    "DirectRunner,SparkConnect --beam-spark-remote sc://HOST:PORT")
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            from pyspark.sql import SparkSession

            builder = SparkSession.builder
            for key, value in settings.session_settings().items():
                builder = builder.config(key, value)
            session = builder.getOrCreate()
            session.sparkContext.setLogLevel("ERROR")
            atexit.register(session.stop)
            _SESSIONS["classic"] = session
        return _SESSIONS["classic"]


def shared_connect_server(settings: SparkTestSettings) -> Any:
    """The process's local Spark Connect server for tests
    (:class:`services.connect_server.ConnectServer`, ``local[2]`` from pyspark's jars, its
    workers on this interpreter with ``settings.python_path``), started on first use and
    stopped when the process exits."""
    with _LOCK:
        if "server" not in _SESSIONS:
            from beam_spark.pyspark_install import full_pyspark_problem
            from services.connect_server import ConnectServer

            problem = full_pyspark_problem()
            if problem:
                raise RuntimeError(
                    f"A local Spark Connect server for the SparkConnect tests {problem}. Name "
                    "a server of yours instead: pytest --beam-spark-remote sc://HOST:PORT")

            state_dir = tempfile.mkdtemp(prefix="beam-test-connect-")
            server = ConnectServer(
                state_dir=state_dir, master="local[2]",
                conf=settings.connect_server_settings(),
                python_path=os.pathsep.join(settings.python_path) or None,
                daemon_module=settings.daemon_module)
            atexit.register(shutil.rmtree, state_dir, True)  # after the server stops (LIFO)
            server.start()
            atexit.register(server.stop)
            _SESSIONS["server"] = server
        return _SESSIONS["server"]


def shared_connect_session(settings: SparkTestSettings) -> Any:
    """The process's Spark Connect session for tests: on ``settings.remote``, else on
    :func:`shared_connect_server`. It is not the process's active session, so a classic
    SparkRunner test of the same process stays on classic Spark."""
    with _LOCK:
        if "connect" not in _SESSIONS:
            from services.connect_server import client_session

            url = settings.remote or shared_connect_server(settings).url
            _SESSIONS["connect"] = client_session(url)
        return _SESSIONS["connect"]


def runner_for(name: str, settings: Optional[SparkTestSettings] = None,
               spark: Any = None) -> Any:
    """A new runner of the kind ``name`` (one of :data:`RUNNER_NAMES`): the DirectRunner, or
    our SparkRunner on ``spark`` (default: the shared session of its kind)."""
    if name == "DirectRunner":
        from apache_beam.runners.direct.direct_runner import DirectRunner

        return DirectRunner()
    if name not in SPARK_RUNNER_NAMES:
        raise ValueError(f"unknown runner {name!r}: use one of {', '.join(RUNNER_NAMES)}")
    from runners.spark import SparkRunner

    if spark is None:
        settings = settings or SparkTestSettings()
        spark = (shared_spark_session(settings) if name == "SparkRunner"
                 else shared_connect_session(settings))
    return SparkRunner(spark)


def test_pipeline(runner: Any, streaming: bool = False, **options: Any) -> Any:
    """A blocking TestPipeline on ``runner``: ``streaming=True`` for a TestStream; other
    keyword arguments are pipeline options."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_pipeline import TestPipeline

    return TestPipeline(runner=runner, options=PipelineOptions(streaming=streaming, **options),
                        blocking=True)


# pytest would collect a module-level function named test_* from a test module that imports it.
test_pipeline.__test__ = False


def module_folders(modules: Sequence[Any]) -> List[str]:
    """The folders modules were imported from, as the import path needs them: for
    ``tests.model.test_x`` at ``/repo/tests/model/test_x.py``, ``/repo`` (pytest's default
    import mode puts the first folder above a module's packages on the path).

    >>> import types
    >>> module = types.ModuleType("model.test_x")
    >>> module.__file__ = "/repo/tests/model/test_x.py"
    >>> module_folders([module])
    ['/repo/tests']
    """
    folders: List[str] = []
    for module in modules:
        path = getattr(module, "__file__", None)
        if not path:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        for _ in range(module.__name__.count(".")):
            folder = os.path.dirname(folder)
        if folder not in folders:
            folders.append(folder)
    return folders


__all__ = ["RUNNER_NAMES", "SparkTestSettings", "module_folders", "runner_for",
           "shared_connect_server", "shared_connect_session", "shared_spark_session",
           "test_pipeline"]
