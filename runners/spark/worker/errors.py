"""Carry a user's exception from a Spark task back to the driver, intact.

Spark reports a failed Python task as a Java exception whose text holds the worker's
traceback; the user would see Py4J noise instead of their own error. A task therefore
wraps any exception in :class:`TaskFailure`, whose message embeds the original exception
(pickled, base64); on the driver :func:`original_error` finds it in Spark's error text and
rebuilds it: same type, same message (Beam already appends ``[while running '<transform>']``),
with the worker's traceback attached as a note (on Python 3.10, as its cause).
"""

from __future__ import annotations

import base64
import contextlib
import pickle
import re
import sys
import traceback
from typing import Callable, Iterator, Optional

from pyspark import cloudpickle

_BEGIN = "<<beam-spark-task-failure:"
_END = ":beam-spark-task-failure>>"
_PATTERN = re.compile(re.escape(_BEGIN) + r"([A-Za-z0-9+/=]+)" + re.escape(_END))


class TaskFailure(Exception):
    """An exception raised in a stage's task, packed so the driver can re-raise it."""

    @classmethod
    def wrap(cls, stage_name: str, error: BaseException) -> "TaskFailure":
        try:
            pickled: Optional[bytes] = cloudpickle.dumps(error)
        except Exception:  # an exception we cannot pickle still reports type and message
            pickled = None
        payload = {
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error),
            "stage": stage_name,
            "traceback": "".join(
                traceback.format_exception(type(error), error, error.__traceback__)),
            "pickled": pickled,
        }
        packed = base64.b64encode(cloudpickle.dumps(payload)).decode("ascii")
        return cls(f"{payload['type']}: {payload['message']}\n{_BEGIN}{packed}{_END}")


@contextlib.contextmanager
def failing_as_task(stage_name: str,
                    on_failure: Callable[[], None] = lambda: None) -> Iterator[None]:
    """What a task's work raises leaves it as the task's failure: ``on_failure`` runs (a
    bundle processor that failed is shut down, never reused), and the exception is raised as
    a :class:`TaskFailure` naming ``stage_name``; a ``TaskFailure`` from an upstream stage
    pipelined into the task passes unchanged.

    >>> with failing_as_task("Parse"):
    ...     int("x")
    Traceback (most recent call last):
    ...
    runners.spark.worker.errors.TaskFailure: builtins.ValueError: invalid literal for int() with base 10: 'x'
    ...
    """
    try:
        yield
    except TaskFailure:
        on_failure()
        raise
    except Exception as error:
        on_failure()
        raise TaskFailure.wrap(stage_name, error) from None


class StageError(RuntimeError):
    """A task failed with an exception that could not be rebuilt on the driver."""


class WorkerTraceback(Exception):
    """Where a user's exception was raised in a Spark task: the worker's traceback, shown as
    the exception's cause on Python 3.10, which has no exception notes."""


def original_error(spark_error: BaseException) -> Optional[BaseException]:
    """The user's exception inside a Spark job failure, or None if there is none."""
    match = _PATTERN.search(str(spark_error))
    if match is None:
        return None
    payload = pickle.loads(base64.b64decode(match.group(1)))
    error: Optional[BaseException] = None
    if payload["pickled"] is not None:
        try:
            error = pickle.loads(payload["pickled"])
        except Exception:
            error = None
    if error is None:
        error = StageError(f"{payload['type']}: {payload['message']}")
    note = (f"Raised in a Spark task running stage {payload['stage']}. "
            f"Worker traceback:\n{payload['traceback']}")
    return with_worker_traceback(error, note)


def with_worker_traceback(error: BaseException, note: str,
                          notes: bool = sys.version_info >= (3, 11)) -> BaseException:
    """``error`` with ``note`` (where the worker raised it) attached: as a note where Python
    has exception notes (3.11+), else as its cause, which a traceback prints above it.

    >>> error = with_worker_traceback(ValueError("bad"), "in a task", notes=False)
    >>> type(error.__cause__).__name__, str(error.__cause__)
    ('WorkerTraceback', 'in a task')
    """
    if notes:
        error.add_note(note)
    elif error.__cause__ is None:
        error.__cause__ = WorkerTraceback(note)
    return error
