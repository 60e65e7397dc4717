"""A user's exception raised in a Spark task comes back to the driver as itself, with the
worker's traceback attached: as a note where Python has them (3.11+), as its cause on 3.10
(where a note was silently dropped)."""

from __future__ import annotations

import sys

import pytest

from runners.spark.worker.errors import TaskFailure, WorkerTraceback, original_error


class InventoryError(Exception):
    """A user's exception type."""


def _raised_in_a_task() -> BaseException:
    try:
        raise InventoryError("shelf 3 is empty")
    except InventoryError as error:
        failure = TaskFailure.wrap("Count/Shelves", error)
    # Spark wraps the task's error in its own text (a Java exception's message).
    return RuntimeError(f"Job aborted: Task 0 failed: PythonException: {failure}")


def test_the_users_exception_comes_back_with_where_it_was_raised():
    error = original_error(_raised_in_a_task())
    assert type(error) is InventoryError and str(error) == "shelf 3 is empty"
    worker_traceback = (error.__notes__[0] if sys.version_info >= (3, 11)
                        else str(error.__cause__))
    assert "running stage Count/Shelves" in worker_traceback
    assert "_raised_in_a_task" in worker_traceback  # the worker's own frames


@pytest.mark.parametrize("notes", [True, False], ids=["notes", "python-3.10"])
def test_the_worker_traceback_is_a_note_or_the_cause(notes):
    if notes and sys.version_info < (3, 11):
        pytest.skip("exception notes are Python 3.11's")
    from runners.spark.worker.errors import with_worker_traceback

    error = with_worker_traceback(InventoryError("x"), "Worker traceback: ...", notes=notes)
    if notes:
        assert error.__notes__ == ["Worker traceback: ..."] and error.__cause__ is None
    else:
        assert isinstance(error.__cause__, WorkerTraceback)
        assert str(error.__cause__) == "Worker traceback: ..."
