"""Processes the project starts itself (the embedded broker, a Spark standalone cluster, a
Spark Connect server): free loopback ports, starting with a log, liveness, the tail of a log
for an error message, and stopping by PID, never by name.

>>> port = free_loopback_port()
>>> 1024 <= port < 65536
True
>>> process_alive(os.getpid())
True
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

LOOPBACK = "127.0.0.1"
#: How long a process gets to exit after SIGTERM before it is sent SIGKILL.
STOP_GRACE_SECONDS = 10.0


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the service binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    return True


def process_command(pid: int) -> str:
    """The command line of ``pid``, or "" if it is gone."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        if cmdline.exists():
            return cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def start_logged(command: Sequence[str], log_path: Union[str, "os.PathLike[str]"], *,
                 env: Optional[Mapping[str, str]] = None, cwd: Optional[Path] = None,
                 detach: bool = True) -> subprocess.Popen:
    """Start ``command`` with no input and its output and errors appended to ``log_path``;
    ``detach``: in a session of its own, so a Ctrl-C in the shell that started it does not
    stop it."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=detach)


def log_tail(path: Union[str, "os.PathLike[str]", None], lines: int) -> str:
    """The last ``lines`` lines of a process's log, for an error message."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except (OSError, TypeError):  # no log yet, or no path
        return "(no log)"


def process_tree(pid: Optional[int]) -> List[int]:
    """``pid`` and every live process below it; empty once ``pid`` is gone."""
    if not pid or not process_alive(pid):
        return []
    return [pid] + [child for child in descendants([pid]) if process_alive(child)]


def descendants(pids: List[int]) -> List[int]:
    """Every live process below ``pids`` (e.g. executor JVMs and their Python workers)."""
    listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True)
    children: Dict[int, List[int]] = {}
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 2:
            children.setdefault(int(fields[1]), []).append(int(fields[0]))
    found: List[int] = []
    frontier = list(pids)
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


def _signal(pids: List[int], signal_number: int) -> None:
    for pid in pids:
        if process_alive(pid):
            try:
                os.kill(pid, signal_number)
            except ProcessLookupError:
                pass


def terminate(
    pids: List[int],
    grace_seconds: float = STOP_GRACE_SECONDS,
    reap: Optional[Dict[int, subprocess.Popen]] = None,
) -> None:
    """SIGTERM ``pids``, wait up to ``grace_seconds``, then SIGKILL whatever still runs.

    ``reap`` holds the ``Popen`` objects of our own children among them: they are polled
    while waiting and waited for at the end, or they would linger as zombies.
    """
    reap = reap or {}
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and any(process_alive(pid) for pid in pids):
        for popen in reap.values():
            popen.poll()
        time.sleep(0.05)
    _signal(pids, signal.SIGKILL)
    for popen in reap.values():
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
