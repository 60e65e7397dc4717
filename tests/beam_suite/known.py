"""Why a Beam test that passes on the DirectRunner fails on our runner, when we know.

Each entry names a test (a prefix of its id, ``apache_beam/<file>::<class>::<test>``), the
runners it fails on, and the cause; :mod:`run` prints it beside the failure. A cause is one
of: a known problem being fixed elsewhere (``known: ...``), or a test that assumes Beam's
in-process runner (``one process: ...``, ``one bundle: ...``), where the runner is right
and the test could not pass on any distributed runner.

>>> explain("apache_beam/nothing_test.py::T::test_x", "classic") is None
True
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

#: Test id prefix -> (runners, cause).
KNOWN: Dict[str, Tuple[Tuple[str, ...], str]] = {}


def explain(test: str, runner: str) -> Optional[str]:
    """The cause of ``test``'s failure on ``runner``, if known."""
    for prefix, (runners, cause) in KNOWN.items():
        if test.startswith(prefix) and runner in runners:
            return cause
    return None
