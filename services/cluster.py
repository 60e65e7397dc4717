"""A Spark standalone cluster (one master, N workers) on loopback, from pyspark's own jars.

Tests and benchmarks need a real ``spark://`` master, not only ``local[N]``: with a cluster,
executors are separate JVMs started by workers, with their own Python workers, so a job
proves that everything it ships (functions, the project's modules, state) works off the
driver, and with several workers that a task may run on another executor than the last one.

The pyspark wheel is a complete Spark distribution except for ``sbin/start-master.sh`` and
``sbin/start-worker.sh`` (it ships only ``spark-daemon.sh`` and the Connect and history
server scripts). Those scripts only wrap ``bin/spark-class``, which the wheel does ship, so
this module launches ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker`` through ``bin/spark-class`` directly. Because
``spark-class`` ends in ``exec java ...``, the PID we start is the daemon's JVM itself:
we stop exactly what we started, by PID, never by name.

**Workers as other hosts.** Each worker has its own work directory (executor logs, files
shipped to its executors) and its own local directories (shuffle files, the runner's
executor-side state), as hosts of a real cluster do; they share nothing else but what the
user names (a checkpoint directory). With ``isolated=True`` (root, Linux) each worker and
everything it starts also gets a private ``/tmp``: a tmpfs mounted in a mount namespace of
its own (``unshare --mount``), so a path under ``/tmp`` on one worker is not there on the
other, as on two machines. Isolated workers set ``spark.shuffle.readHostLocalDisk=false`` in
:meth:`StandaloneCluster.driver_conf`: executors on one host would otherwise read each
other's shuffle files straight from disk, which another host cannot.

Everything binds to 127.0.0.1 on free ports; the master's REST submission server (a fixed
port, 6066) is disabled. Executors run the driver's Python (``PYSPARK_PYTHON``), which
imports the project because it is installed in that environment (unless a job ships it).

Command line (the state file lets ``stop`` run from another process)::

    python -m services.cluster start [--state-dir DIR] [--workers N] [--worker-cores C]
    python -m services.cluster status [--state-dir DIR]
    python -m services.cluster stop [--state-dir DIR]

Python:

>>> from services.cluster import StandaloneCluster
>>> with StandaloneCluster(state_dir="/tmp/doc-cluster", workers=2,
...                        worker_cores=1) as cluster:  # doctest: +SKIP
...     print(cluster.master_url, cluster.worker_roles())
spark://127.0.0.1:40517 ['worker-0', 'worker-1']
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

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

#: Where ``python -m services.cluster`` keeps its state file and logs (git-ignored).
DEFAULT_STATE_DIR = Path(__file__).resolve().parent.parent / ".spark-cluster"
STATE_FILE_NAME = "cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Where an isolated worker keeps its local directories: in its private /tmp.
ISOLATED_LOCAL_DIR = "/tmp/spark-worker-local"


class ClusterError(RuntimeError):
    """The cluster could not be started, reached, or stopped; the message says why."""


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package.

    ``SPARK_HOME`` from the environment is deliberately not used: a Spark of another
    version there would give daemons that the pyspark driver cannot talk to.
    """
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    spark_class = home / "bin" / "spark-class"
    if not spark_class.is_file() or not (home / "jars").is_dir():
        raise ClusterError(
            f"pyspark at {home} has no bin/spark-class or jars/: reinstall pyspark from a wheel "
            "(pip install --force-reinstall pyspark)."
        )
    return home


def isolation_available() -> bool:
    """Whether workers can get a private /tmp here (root, and ``unshare`` on the PATH)."""
    return (sys.platform.startswith("linux") and hasattr(os, "geteuid") and os.geteuid() == 0
            and shutil.which("unshare") is not None)


def master_status(web_ui_url: str, timeout: float = 2.0) -> Optional[Dict[str, Any]]:
    """The master's own JSON status (``/json/`` on its web UI), or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{web_ui_url}/json/", timeout=timeout) as response:
            return json.loads(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None


class StandaloneCluster:
    """One Spark master and ``workers`` workers on 127.0.0.1, started and stopped by PID.

    Args:
      state_dir: holds ``cluster.json`` (master URL, PIDs), daemon logs and each worker's
        work directory (``workers/<i>/work``: executor logs).
      workers: how many workers (each with its own work and local directories).
      worker_cores: cores each worker offers (1 or 2 on a small machine).
      worker_memory: memory each worker offers to executors, e.g. ``"1g"``.
      start_timeout: seconds to wait for the master to answer and the workers to register.
      isolated: give each worker a private ``/tmp`` (see the module docstring); needs
        :func:`isolation_available`, else ClusterError.

    ``start()`` (or ``with``) blocks until every worker has registered with the master;
    ``master_url`` is then ``spark://127.0.0.1:<port>``. ``driver_conf()`` gives the Spark
    settings a driver needs to use this cluster from loopback; ``kill_worker(i)`` takes a
    worker away as a lost host would go (SIGKILL to it, its executors and their Python).
    """

    def __init__(
        self,
        state_dir: "os.PathLike[str] | str" = DEFAULT_STATE_DIR,
        worker_cores: int = 2,
        worker_memory: str = "1g",
        start_timeout: float = 90.0,
        workers: int = 1,
        isolated: bool = False,
    ) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers={workers!r}: give a positive integer, e.g. 2")
        if not isinstance(worker_cores, int) or worker_cores < 1:
            raise ValueError(f"worker_cores={worker_cores!r}: give a positive integer, e.g. 2")
        if not isinstance(worker_memory, str) or not worker_memory[:-1].isdigit() or (
            worker_memory[-1].lower() not in "mg"
        ):
            raise ValueError(f"worker_memory={worker_memory!r}: give megabytes or gigabytes, e.g. '1g'")
        if start_timeout <= 0:
            raise ValueError(f"start_timeout={start_timeout!r}: give a positive number of seconds")
        if isolated and not isolation_available():
            raise ClusterError("isolated=True needs Linux, root and `unshare` (a private /tmp "
                               "per worker); start the cluster with isolated=False")
        self.state_dir = Path(state_dir).resolve()
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.start_timeout = start_timeout
        self.isolated = isolated
        self.master_url: Optional[str] = None
        self.web_ui_url: Optional[str] = None
        self.pids: Dict[str, int] = {}
        self.worker_ports: Dict[str, int] = {}
        self.startup_seconds: Optional[float] = None
        self._popens: Dict[int, subprocess.Popen] = {}

    @classmethod
    def attach(cls, state_dir: "os.PathLike[str] | str" = DEFAULT_STATE_DIR) -> "StandaloneCluster":
        """A handle on the cluster another process started and recorded in ``state_dir``."""
        state = read_state(state_dir)
        if state is None:
            raise ClusterError(
                f"no cluster recorded in {state_dir}: start one with "
                f"python -m services.cluster start --state-dir {state_dir}"
            )
        cluster = cls(state_dir, state["worker_cores"], state["worker_memory"],
                      workers=state.get("workers", 1))
        cluster.isolated = state.get("isolated", False)
        cluster.master_url = state["master_url"]
        cluster.web_ui_url = state["master_web_ui"]
        cluster.pids = dict(state["pids"])
        cluster.worker_ports = dict(state.get("worker_ports", {}))
        return cluster

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE_NAME

    def worker_roles(self) -> List[str]:
        return [f"worker-{index}" for index in range(self.workers)]

    def worker_directory(self, index: int) -> Path:
        """Worker ``index``'s own directory: ``work/`` (executor logs and files)."""
        return self.state_dir / "workers" / str(index)

    def _environment(self, role: str) -> Dict[str, str]:
        environment = dict(os.environ)
        environment.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_LOCAL_HOSTNAME="localhost",
            SPARK_MASTER_HOST=LOOPBACK,
            SPARK_LOG_DIR=str(self.state_dir / "logs"),
            # The REST server would take the fixed port 6066; nothing here submits through it.
            # maxRetries=0: a port taken meanwhile fails loudly instead of moving elsewhere.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false -Dspark.port.maxRetries=0",
            SPARK_WORKER_OPTS="-Dspark.port.maxRetries=0",
            # The daemons compute little: the quick JIT and serial GC halve their start-up CPU.
            SPARK_DAEMON_JAVA_OPTS=os.environ.get(
                "SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
            ),
            PYSPARK_PYTHON=sys.executable,
        )
        # A SPARK_CONF_DIR of the user's would bring spark-env.sh and defaults from elsewhere;
        # a worker is another host: the driver's PYTHONPATH is not there.
        environment.pop("SPARK_CONF_DIR", None)
        if role.startswith("worker-"):
            environment.pop("PYTHONPATH", None)
        if role.startswith("worker-"):
            index = int(role.split("-", 1)[1])
            own = self.worker_directory(index)
            environment["SPARK_WORKER_DIR"] = str(own / "work")
            # Executors of this worker keep shuffle files and state only here.
            environment["SPARK_LOCAL_DIRS"] = (ISOLATED_LOCAL_DIR if self.isolated
                                               else str(own / "local"))
        return environment

    def _command(self, role: str, main_class: str, arguments: List[str]) -> List[str]:
        command = [str(spark_home() / "bin" / "spark-class"), main_class, *arguments]
        if not (self.isolated and role.startswith("worker-")):
            return command
        # A mount namespace of its own with a tmpfs on /tmp; what the worker runs from
        # (Python, Spark, the project, this cluster's directory) stays visible when it is
        # under /tmp: the tmpfs is made elsewhere, those entries bound into it from the
        # host's /tmp, then moved onto /tmp. `exec` keeps one PID all the way down to the
        # worker's JVM (unshare without --fork execs its command too).
        stage = self.state_dir / f"private-tmp-{role}"
        stage.mkdir(parents=True, exist_ok=True)
        steps = [f'mount -t tmpfs -o mode=1777 beam-worker-tmp "{stage}"']
        for entry in _entries_under_tmp(self.state_dir):
            steps.append(f'mkdir -p "{stage}/{entry}" && mount --bind "/tmp/{entry}" '
                         f'"{stage}/{entry}"')
        steps.append(f'mount --move "{stage}" /tmp')
        script = " && ".join(steps + ['mkdir -p "$0"', 'exec "$@"'])
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                script, ISOLATED_LOCAL_DIR, *command]

    def _launch(self, role: str, main_class: str, arguments: List[str]) -> int:
        log_path = self.state_dir / "logs" / f"{role}.log"
        popen = start_logged(self._command(role, main_class, arguments), log_path,
                             env=self._environment(role), cwd=self.state_dir)
        self._popens[popen.pid] = popen
        self.pids[role] = popen.pid
        return popen.pid

    def _wait_until(self, condition, what: str, role: str, deadline: float) -> Dict[str, Any]:
        while time.monotonic() < deadline:
            for name, pid in self.pids.items():
                popen = self._popens.get(pid)
                if popen is not None and popen.poll() is not None:
                    log = self.state_dir / "logs" / f"{name}.log"
                    raise ClusterError(
                        f"Spark {name} exited with code {popen.returncode} while waiting for "
                        f"{what}; last lines of {log}:\n{log_tail(log, 25)}"
                    )
            status = master_status(self.web_ui_url)
            if status is not None and condition(status):
                return status
            time.sleep(0.25)
        log = self.state_dir / "logs" / f"{role}.log"
        raise ClusterError(
            f"timed out after {self.start_timeout:.0f}s waiting for {what}; "
            f"last lines of {log}:\n{log_tail(log, 25)}"
        )

    def start(self) -> "StandaloneCluster":
        """Start the master, then the workers; return once every worker is registered."""
        existing = read_state(self.state_dir)
        if existing is not None and live_daemons(existing):
            raise ClusterError(
                f"a cluster from {self.state_file} is still running ({existing['master_url']}); "
                f"stop it first: python -m services.cluster stop --state-dir {self.state_dir}"
            )
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        deadline = began + self.start_timeout
        master_port, master_ui_port = free_loopback_port(), free_loopback_port()
        self.web_ui_url = f"http://{LOOPBACK}:{master_ui_port}"
        worker_ui_ports: Dict[str, int] = {}
        try:
            self._launch("master", MASTER_CLASS, [
                "--host", LOOPBACK, "--port", str(master_port), "--webui-port", str(master_ui_port),
            ])
            # The workers start only after the master answers: a worker that finds no master
            # backs off for 5-15 s before retrying its registration.
            status = self._wait_until(
                lambda s: s.get("status") == "ALIVE", "the master to answer", "master", deadline
            )
            self.master_url = status["url"]
            for index in range(self.workers):
                worker_ui_ports[f"worker-{index}"] = self._launch_worker(index)
            self._wait_for_workers(self.worker_roles(), deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        StateFile(self.state_dir, STATE_FILE_NAME).write({
            "master_url": self.master_url,
            "master_web_ui": self.web_ui_url,
            "worker_web_ui": {role: f"http://{LOOPBACK}:{port}"
                              for role, port in worker_ui_ports.items()},
            "workers": self.workers,
            "worker_ports": self.worker_ports,
            "worker_cores": self.worker_cores,
            "worker_memory": self.worker_memory,
            "isolated": self.isolated,
            "pids": self.pids,
            "spark_home": str(spark_home()),
            "python": sys.executable,
            "startup_seconds": round(self.startup_seconds, 2),
        })
        return self

    def _launch_worker(self, index: int) -> int:
        """Start worker ``index`` with its own directories; returns its web UI port."""
        role = f"worker-{index}"
        own = self.worker_directory(index)
        (own / "work").mkdir(parents=True, exist_ok=True)
        (own / "local").mkdir(parents=True, exist_ok=True)
        self.worker_ports[role] = free_loopback_port()
        ui_port = free_loopback_port()
        self._launch(role, WORKER_CLASS, [
            "--host", LOOPBACK, "--port", str(self.worker_ports[role]),
            "--webui-port", str(ui_port),
            "--cores", str(self.worker_cores), "--memory", self.worker_memory,
            "--work-dir", str(own / "work"), self.master_url,
        ])
        return ui_port

    def _wait_for_workers(self, roles: List[str], deadline: float) -> None:
        ports = {self.worker_ports[role] for role in roles}
        self._wait_until(
            lambda s: ports <= {worker.get("port") for worker in s.get("workers", [])
                                if worker.get("state") == "ALIVE"},
            "the workers to register with the master", roles[-1], deadline,
        )

    def start_worker(self, index: int) -> None:
        """Start worker ``index`` again (after :meth:`kill_worker`), as a new host would
        join; returns once it is registered."""
        if self.master_url is None:
            raise ClusterError("the cluster is not started: call start() or use `with`")
        role = f"worker-{index}"
        if self.worker_processes(index):
            raise ClusterError(f"{role} is still running (pid {self.pids[role]})")
        self._launch_worker(index)
        self._wait_for_workers([role], time.monotonic() + self.start_timeout)
        state = read_state(self.state_dir)
        if state is not None:
            state.update(pids=self.pids, worker_ports=self.worker_ports)
            StateFile(self.state_dir, STATE_FILE_NAME).write(state)

    def driver_conf(self) -> Dict[str, str]:
        """Spark settings for a driver on this machine using this cluster."""
        if self.master_url is None:
            raise ClusterError("the cluster is not started: call start() or use `with`")
        settings = driver_conf(self.master_url, self.worker_cores * self.workers,
                               self.worker_memory)
        if self.workers > 1:
            # One executor per worker, each with the worker's cores.
            settings["spark.executor.cores"] = str(self.worker_cores)
        if self.isolated:
            # Another host cannot read this one's shuffle files from disk.
            settings["spark.shuffle.readHostLocalDisk"] = "false"
        return settings

    def runner_options(self) -> List[str]:
        """Pipeline options running a Beam pipeline on this cluster with our SparkRunner.

        >>> options = cluster.runner_options()  # doctest: +SKIP
        ['--spark_master_url=spark://127.0.0.1:40517', '--spark_conf=spark.driver.host=...', ...]
        """
        settings = self.driver_conf()
        return [f"--spark_master_url={settings.pop('spark.master')}"] + [
            f"--spark_conf={key}={value}" for key, value in settings.items()
        ]

    def session_builder(self, app_name: str) -> Any:
        """A ``SparkSession.Builder`` for this cluster, with executors on the project's Python.

        >>> session = cluster.session_builder("my-job").getOrCreate()  # doctest: +SKIP
        """
        from pyspark.sql import SparkSession

        use_project_python()
        builder = SparkSession.builder.appName(app_name).config("spark.ui.enabled", "false")
        for key, value in self.driver_conf().items():
            builder = builder.config(key, value)
        return builder

    def worker_processes(self, index: int) -> List[int]:
        """PIDs of worker ``index`` and everything below it (executors, Python workers)."""
        return process_tree(self.pids.get(f"worker-{index}"))

    def kill_worker(self, index: int) -> List[int]:
        """Take worker ``index`` away as a lost host goes: SIGKILL to the worker, its
        executors and their Python workers at once. Returns the PIDs killed."""
        pids = self.worker_processes(index)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        popen = self._popens.get(self.pids.get(f"worker-{index}", -1))
        if popen is not None:
            popen.wait(timeout=10)
        return pids

    def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Stop the workers (and their executors), then the master; remove the state file."""
        workers = [pid for role, pid in self.pids.items() if role.startswith("worker") and pid]
        ours = workers + [pid for pid in [self.pids.get("master")] if pid]
        below = descendants(ours)
        terminate(workers, grace_seconds, self._popens)
        # The workers kill their executors on SIGTERM; anything left under them is still ours.
        terminate([pid for pid in below if process_alive(pid)], grace_seconds, {})
        terminate([pid for pid in [self.pids.get("master")] if pid], grace_seconds,
                  self._popens)
        StateFile(self.state_dir, STATE_FILE_NAME).remove()
        self.pids = {}
        self._popens = {}

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def _entries_under_tmp(*more: Path) -> List[str]:
    """The entries of /tmp that hold what a worker runs from (Python, Spark, the project):
    an isolated worker sees them, and nothing else of the host's /tmp."""
    needed = [Path(sys.prefix), Path(sys.executable), spark_home(),
              Path(__file__).resolve().parent.parent, *more]
    entries = set()
    for path in needed:
        resolved = path.resolve()
        if resolved.parts[:2] == ("/", "tmp") and len(resolved.parts) > 2:
            entries.add(resolved.parts[2])
    return sorted(entries)


def driver_conf(master_url: str, cores: int = 2, executor_memory: str = "1g") -> Dict[str, str]:
    """Spark settings for a loopback driver on ``master_url``, using ``cores`` cores."""
    return {
        "spark.master": master_url,
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.cores.max": str(cores),
        "spark.executor.memory": executor_memory,
    }


def use_project_python() -> None:
    """Make executors run this interpreter (call before the SparkContext is created).

    PySpark takes the executors' Python from the driver's ``PYSPARK_PYTHON`` (default
    ``python3``, which may not have the project installed); this sets it to ``sys.executable``
    unless the user chose one.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def read_state(state_dir: "os.PathLike[str] | str" = DEFAULT_STATE_DIR) -> Optional[Dict[str, Any]]:
    """The state written by ``start``, or None when no cluster was started there."""
    return StateFile(state_dir, STATE_FILE_NAME).read()


def live_daemons(state: Dict[str, Any]) -> Dict[str, int]:
    """Role -> PID of the recorded daemons that still run Spark's master or worker class (a
    PID reused by another process after a reboot is not ours)."""
    def expected(role: str) -> str:
        return MASTER_CLASS if role == "master" else WORKER_CLASS

    return {role: pid for role, pid in state["pids"].items()
            if runs_command(pid, expected(role))}


def stop_from_state(state_dir: "os.PathLike[str] | str" = DEFAULT_STATE_DIR) -> bool:
    """Stop the cluster recorded in ``state_dir``; False if there was none.

    A recorded PID whose process is no longer a Spark daemon (the PID was reused after a
    reboot) is left alone.
    """
    state = read_state(state_dir)
    if state is None:
        return False
    cluster = StandaloneCluster.attach(state_dir)
    cluster.pids = live_daemons(state)
    cluster.stop()
    return True


def main(argv: Optional[List[str]] = None, prog: str = "python -m services.cluster") -> int:
    """The command line (``prog``: its name in its help); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="A Spark standalone cluster (1 master, N workers) on 127.0.0.1.",
    )
    parser.add_argument("action", choices=["start", "stop", "status"],
                        help="start a cluster (prints its spark:// URL), stop the one "
                             "--state-dir records, or show it (exit status 3: not running)")
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR),
                        help=f"state file and logs (default {DEFAULT_STATE_DIR})")
    parser.add_argument("--workers", type=int, default=1,
                        help="workers, each with its own work and local directories")
    parser.add_argument("--worker-cores", type=int, default=2, help="cores of each worker")
    parser.add_argument("--worker-memory", default="1g", help="memory of each worker")
    parser.add_argument("--isolated", action="store_true",
                        help="a private /tmp per worker, like separate hosts (root, Linux)")
    arguments = parser.parse_args(argv)
    state_dir = arguments.state_dir
    state = read_state(state_dir)
    running = state is not None and bool(live_daemons(state))
    if arguments.action == "status":
        if not running:
            print("not running")
            return 3
        answer = master_status(state["master_web_ui"])
        print(json.dumps({**state, "master_answers": answer is not None,
                          "alive_workers": answer and answer.get("aliveworkers")}, indent=2))
        return 0
    if arguments.action == "stop" or state is not None and not running:
        # A state file without live daemons is left from a crash: clean it up before a start.
        stopped = stop_from_state(state_dir)
        if arguments.action == "stop":
            print(f"stopped {state['master_url']} (pids {state['pids']})" if stopped
                  else f"no cluster recorded in {state_dir}")
            return 0
    if running:
        print(f"already running: {state['master_url']} (pids {state['pids']})")
        return 0
    try:
        cluster = StandaloneCluster(state_dir, arguments.worker_cores, arguments.worker_memory,
                                    workers=arguments.workers,
                                    isolated=arguments.isolated).start()
    except (ClusterError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"started {cluster.master_url} with {cluster.workers} worker(s) in "
          f"{cluster.startup_seconds:.1f}s (pids {cluster.pids}; master UI {cluster.web_ui_url})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
