"""The state file of a local service: what ``start`` records in one process so that
``status`` and ``stop``, run later from another, find the service's processes.

A recorded PID counts only while it still runs the command that was started: after a reboot
the PID may belong to someone else's process, which must never be stopped.

>>> import tempfile
>>> state = StateFile(tempfile.mkdtemp(), "service.json")
>>> state.read() is None
True
>>> state.write({"pid": os.getpid()})
>>> state.read()["pid"] == os.getpid()
True
>>> state.remove(); state.read() is None
True
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional

from services.processes import process_alive, process_command


class StateFile:
    """A JSON file ``file_name`` in ``state_dir``, written atomically."""

    def __init__(self, state_dir: "os.PathLike[str] | str", file_name: str) -> None:
        self.path = Path(state_dir) / file_name

    def read(self) -> Optional[Dict[str, Any]]:
        """The recorded state, or None when nothing (readable) was recorded."""
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def write(self, state: Dict[str, Any]) -> None:
        """Record ``state``: a reader sees the old file or the new one, never half of one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n")
        temporary.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def runs_command(pid: int, command_part: str) -> bool:
    """Whether ``pid`` is alive and its command line contains ``command_part``.

    >>> runs_command(os.getpid(), "python")
    True
    >>> runs_command(os.getpid(), "no-such-command")
    False
    """
    return process_alive(pid) and command_part in process_command(pid)
