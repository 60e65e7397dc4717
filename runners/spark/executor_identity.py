"""Which executor a task runs on, named from inside its Python worker.

A Python worker has no handle on its executor (no SparkContext, no ``SparkEnv``), but the
cluster manager leaves the executor's identity in the environment the worker inherits, each
its own way (measured on a standalone cluster; read in Spark's sources for the others):

* Kubernetes sets ``SPARK_EXECUTOR_ID`` in the executor's pod;
* a standalone worker gives its executor the URLs of its logs, which name it
  (``SPARK_LOG_URL_STDERR=http://...?appId=...&executorId=1&logType=stderr``);
* YARN runs each executor in a container of its own (``CONTAINER_ID``);
* elsewhere (a local master) the executor's local directories, unique per executor, name it.

The name is ``<executor>@<host>``: Spark's executor id where the environment holds it, as
Spark's UI shows it, so a report line and the UI agree.

>>> executor_name({"SPARK_LOG_URL_STDERR": "http://h:8081/logPage/?appId=app-1&executorId=3"
...                "&logType=stderr"}, "worker-a")
'3@worker-a'
>>> executor_name({"SPARK_LOCAL_DIRS": "/tmp/blockmgr-1"}, "laptop")
'/tmp/blockmgr-1@laptop'
"""

from __future__ import annotations

import functools
import os
import re
import socket
from typing import Mapping, Optional

_LOG_URL_EXECUTOR = re.compile(r"[?&]executorId=([^&]+)")


def executor_name(environ: Optional[Mapping[str, str]] = None,
                  host: Optional[str] = None) -> str:
    """This process's executor (see the module docstring); ``environ`` and ``host`` default
    to the process's own."""
    if environ is None and host is None:
        return _own_executor_name()
    environ = os.environ if environ is None else environ
    host = socket.gethostname() if host is None else host
    return f"{_executor_id(environ)}@{host}"


@functools.lru_cache(maxsize=1)
def _own_executor_name() -> str:
    # A worker process serves one executor for its whole life: named once.
    return executor_name(os.environ, socket.gethostname())


def _executor_id(environ: Mapping[str, str]) -> str:
    if environ.get("SPARK_EXECUTOR_ID"):
        return environ["SPARK_EXECUTOR_ID"]
    found = _LOG_URL_EXECUTOR.search(environ.get("SPARK_LOG_URL_STDERR", ""))
    if found:
        return found.group(1)
    return (environ.get("CONTAINER_ID") or environ.get("SPARK_EXECUTOR_DIRS")
            or environ.get("SPARK_LOCAL_DIRS") or "driver")
