"""Job names on Spark Connect: job tags.

A Connect client cannot set a job's description or a stage's call site (the server writes
its own: ``Spark Connect - <the request>``); what it can set are *tags*, kept per client
thread and attached to every operation the thread runs, which the server adds to the jobs
of that operation (Spark's UI and REST API list a job's tags) and which
``SparkSession.interruptTag`` cancels by. So a run's jobs carry the run's tag (what
cancelling the run interrupts) and, while a job runs, one naming it as a classic job's
description would: ``Beam micro-batch 12: round 40: run Parse; Sum/GroupByKey``.

>>> job_tag("Beam pipeline: run Read, Split, Count")
'Beam pipeline: run Read; Split; Count'
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

from runners.spark.backends.base import JobNames

#: Spark joins a job's tags with commas: a tag cannot hold one.
_TAG_SEPARATOR = ","
#: Longest tag: a job's description, as long as a classic one of a large pass may be.
MAX_TAG = 2000


def job_tag(text: str) -> str:
    """``text`` as a Spark job tag: no comma, not empty, at most :data:`MAX_TAG`
    characters."""
    tag = text.replace(_TAG_SEPARATOR, ";").strip() or "Beam"
    return tag if len(tag) <= MAX_TAG else tag[:MAX_TAG - 3] + "..."


class ConnectJobNames(JobNames):
    """Tags the jobs of one run (see the module docstring).

    Args:
      session: the run's Spark Connect session.
      run_tag: the run's tag.
    """

    def __init__(self, session: Any, run_tag: str) -> None:
        super().__init__(run_tag)
        self.session = session

    def start_run(self) -> None:
        self.session.addTag(self.run_tag)

    @contextlib.contextmanager
    def job(self, what: str, steps: Sequence[str] = ()) -> Iterator[None]:
        tag = job_tag(f"{self.scope}: {what}")
        held = tag in self.session.getTags()
        self.session.addTag(tag)
        try:
            yield
        finally:
            if not held:
                self.session.removeTag(tag)


class TaggedThread(threading.Thread):
    """A thread whose operations carry the tags its starter's had (tags are per thread)."""

    def __init__(self, session: Any, target: Callable[[], None], name: str) -> None:
        super().__init__(target=target, name=name, daemon=True)
        self._session = session
        self._tags: set = set()

    def start(self) -> None:
        self._tags = set(self._session.getTags())
        super().start()

    def run(self) -> None:
        for tag in self._tags:
            self._session.addTag(tag)
        super().run()
