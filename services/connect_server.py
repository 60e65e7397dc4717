"""A Spark Connect server on loopback, from pyspark's own jars, started and stopped by PID.

Spark Connect is how more and more Python users reach Spark (Spark 4's thin client,
Databricks serverless): a server process owns the SparkContext, and clients talk to it over
gRPC (``sc://host:port``) with no SparkContext of their own. The pyspark wheel carries the
server (``jars/spark-connect_*.jar``); this module launches its main class,
``org.apache.spark.sql.connect.service.SparkConnectServer``, with ``bin/spark-submit`` (which
ends in ``exec java``: the PID we start is the server's JVM), on a free loopback port, with
``spark.port.maxRetries=0`` so a port taken meanwhile fails loudly instead of moving.

The server is the driver of its Spark: ``master="local[2]"`` for a server on this machine,
or a standalone cluster's ``spark://`` URL (with the cluster's driver settings, see
:meth:`services.cluster.StandaloneCluster.driver_conf`). Its Python workers run
``python`` (by default this interpreter, which has Beam and the project); ``daemon_module``
names a worker daemon that imports them once (``runners.spark.daemon``), as the runner's own
sessions do; leave it out to see what a server you do not control costs.

Command line (the state file lets ``stop`` run from another process)::

    python -m services.connect_server start [--state-dir DIR] [--master local[2]]
    python -m services.connect_server status [--state-dir DIR]
    python -m services.connect_server stop [--state-dir DIR]

Python:

>>> with ConnectServer(state_dir="/tmp/doc-connect") as server:  # doctest: +SKIP
...     print(server.url)
sc://127.0.0.1:40517
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from services.cluster import spark_home
from services.processes import (
    LOOPBACK,
    STOP_GRACE_SECONDS,
    descendants,
    free_loopback_port,
    log_tail,
    process_alive,
    process_tree,
    start_logged,
    terminate,
)
from services.state_file import StateFile, runs_command

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_STATE_DIR = Path(__file__).resolve().parent.parent / ".spark-connect"
STATE_FILE_NAME = "connect.json"
#: What the server logs once its gRPC service listens.
_STARTED = "Spark Connect server started at"
#: PySpark's mark of a process that made a Spark Connect session.
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


class ConnectServerError(RuntimeError):
    """The server could not be started or reached; the message says why."""


class ConnectServer:
    """A Spark Connect server on 127.0.0.1 (see the module docstring).

    Args:
      state_dir: holds ``connect.json`` (URL, PID) and the server's log.
      master: the server's Spark master (``local[N]`` or a cluster's URL).
      conf: more Spark settings of the server (``--conf``), e.g. a cluster's driver settings.
      python: the interpreter of its Python workers (default: this one).
      python_path: ``PYTHONPATH`` of its Python workers (e.g. folders of test modules).
      daemon_module: the Python worker daemon (``spark.python.daemon.module``), or None for
        PySpark's own.
      start_timeout: seconds to wait for the server to listen.
    """

    def __init__(self, state_dir: "os.PathLike[str] | str" = DEFAULT_STATE_DIR,
                 master: str = "local[2]", conf: Optional[Dict[str, str]] = None,
                 python: str = sys.executable, python_path: Optional[str] = None,
                 daemon_module: Optional[str] = "runners.spark.daemon",
                 start_timeout: float = 120.0) -> None:
        if start_timeout <= 0:
            raise ValueError(f"start_timeout={start_timeout!r}: give a positive number of seconds")
        self.state_dir = Path(state_dir).resolve()
        self.master = master
        self.conf = dict(conf or {})
        self.python = python
        self.python_path = python_path
        self.daemon_module = daemon_module
        self.start_timeout = start_timeout
        self.port: Optional[int] = None
        self.ui_port: Optional[int] = None
        self.pid: Optional[int] = None
        self.startup_seconds: Optional[float] = None
        self._popen: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        """What a client passes to ``SparkSession.builder.remote`` (or ``--spark_remote``)."""
        if self.port is None:
            raise ConnectServerError("the server is not started: call start() or use `with`")
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "connect-server.log"

    @property
    def ui_url(self) -> str:
        """The server's Spark UI (its REST API is under ``/api/v1``)."""
        return f"http://{LOOPBACK}:{self.ui_port}"

    def settings(self) -> Dict[str, str]:
        """Every Spark setting the server starts with."""
        settings = {
            "spark.connect.grpc.binding.address": LOOPBACK,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.ui.port": str(self.ui_port),
            "spark.port.maxRetries": "0",
            "spark.pyspark.python": self.python,
            "spark.pyspark.driver.python": self.python,
        }
        if self.daemon_module:
            settings["spark.python.daemon.module"] = self.daemon_module
        if self.python_path:
            settings["spark.executorEnv.PYTHONPATH"] = self.python_path
        settings.update(self.conf)
        return settings

    def _command(self) -> List[str]:
        command = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS,
                   "--name", "beam-spark-connect", "--master", self.master]
        for key, value in self.settings().items():
            command += ["--conf", f"{key}={value}"]
        return command

    def _environment(self) -> Dict[str, str]:
        environment = dict(os.environ)
        environment.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=LOOPBACK,
                           PYSPARK_PYTHON=self.python)
        # A SPARK_CONF_DIR of the user's would bring settings from elsewhere; a client's
        # SPARK_REMOTE means nothing to the server.
        for name in ("SPARK_CONF_DIR", "SPARK_REMOTE", _CONNECT_MODE):
            environment.pop(name, None)
        if self.python_path:
            environment["PYTHONPATH"] = self.python_path
        return environment

    def start(self) -> "ConnectServer":
        """Start the server; return once it listens (ConnectServerError if it does not)."""
        existing = read_state(self.state_dir)
        if existing is not None and runs_command(existing["pid"], SERVER_CLASS):
            raise ConnectServerError(
                f"a Spark Connect server from {self.state_dir / STATE_FILE_NAME} still runs "
                f"({existing['url']}); stop it first: python -m services.connect_server stop "
                f"--state-dir {self.state_dir}")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_loopback_port(), free_loopback_port()
        began = time.monotonic()
        self._popen = start_logged(self._command(), self.log_path, env=self._environment(),
                                   cwd=self.state_dir)
        self.pid = self._popen.pid
        try:
            self._wait_until_listening(began + self.start_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        StateFile(self.state_dir, STATE_FILE_NAME).write({
            "url": self.url, "pid": self.pid, "master": self.master,
            "ui": self.ui_url, "python": self.python,
            "startup_seconds": round(self.startup_seconds, 2)})
        return self

    def _wait_until_listening(self, deadline: float) -> None:
        expected = f"{_STARTED}: {LOOPBACK}:{self.port}"
        while time.monotonic() < deadline:
            if self._popen.poll() is not None:
                raise ConnectServerError(
                    f"the Spark Connect server exited with code {self._popen.returncode} "
                    f"while starting; last lines of {self.log_path}:\n"
                    f"{log_tail(self.log_path, 30)}")
            if expected in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise ConnectServerError(
            f"the Spark Connect server did not listen on {LOOPBACK}:{self.port} within "
            f"{self.start_timeout:.0f} s; last lines of {self.log_path}:\n"
            f"{log_tail(self.log_path, 30)}")

    def session(self) -> Any:
        """A new client session on this server (:func:`client_session`)."""
        return client_session(self.url)

    def processes(self) -> List[int]:
        """The server's PID and every process below it (Python workers, their daemon)."""
        return process_tree(self.pid)

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Stop the server and what it started; remove the state file."""
        if self.pid:
            below = descendants([self.pid])
            terminate([self.pid], grace_seconds,
                      {self.pid: self._popen} if self._popen is not None else {})
            terminate([pid for pid in below if process_alive(pid)], grace_seconds, {})
        StateFile(self.state_dir, STATE_FILE_NAME).remove()
        self.pid, self._popen = None, None

    def __enter__(self) -> "ConnectServer":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def client_session(url: str) -> Any:
    """A new Spark Connect session on the server at ``url``, kept out of the process's own
    Spark. PySpark's builder would mark the process as a Spark Connect one
    (``SPARK_CONNECT_MODE_ENABLED``: no classic session can be made in it after that) and make
    the session the thread's active one (which a SparkRunner given no Spark runs on): made
    with the Connect client's own class, it does neither, so a process that also runs classic
    Spark (tests, benchmarks comparing both) keeps doing so, and its active session stays
    the one it had."""
    from pyspark.sql.connect.session import SparkSession

    return SparkSession(connection=url)


def read_state(state_dir: "os.PathLike[str] | str" = DEFAULT_STATE_DIR) -> Optional[Dict[str, Any]]:
    """The state ``start`` wrote, or None when no server was started there."""
    return StateFile(state_dir, STATE_FILE_NAME).read()


def main(argv: Optional[List[str]] = None, prog: str = "python -m services.connect_server") -> int:
    """The command line (``prog``: its name in its help); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A Spark Connect server on 127.0.0.1, from pyspark's own jars.")
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start a server (prints its sc:// URL), stop the one --state-dir "
                             "records, or show it (exit status 3: not running)")
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR),
                        help=f"state file and log (default {DEFAULT_STATE_DIR})")
    parser.add_argument("--master", default="local[2]",
                        help="the server's Spark master (default local[2]; a cluster's "
                             "spark:// URL)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="another Spark setting of the server; repeatable")
    arguments = parser.parse_args(argv)
    state = read_state(arguments.state_dir)
    running = state is not None and runs_command(state["pid"], SERVER_CLASS)
    if arguments.action == "status":
        if not running:
            print("not running")
            return 3
        print(json.dumps(state, indent=2))
        return 0
    if arguments.action == "stop":
        if state is None:
            print(f"no Spark Connect server recorded in {arguments.state_dir}")
            return 0
        server = ConnectServer(arguments.state_dir)
        server.pid = state["pid"] if running else None
        server.stop()
        print(f"stopped {state['url']} (pid {state['pid']})" if running
              else f"{state['url']} was not running; state removed")
        return 0
    if running:
        print(f"already running: {state['url']} (pid {state['pid']})")
        return 0
    conf = {}
    for entry in arguments.conf:
        key, separator, value = entry.partition("=")
        if not separator:
            parser.error(f"--conf {entry!r}: give KEY=VALUE")
        conf[key] = value
    try:
        server = ConnectServer(arguments.state_dir, master=arguments.master, conf=conf).start()
    except ConnectServerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"started {server.url} in {server.startup_seconds:.1f}s (pid {server.pid}); run "
          f"pipelines with --spark_remote {server.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
