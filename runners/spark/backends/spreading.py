"""Key partitions spread over executors that join a running streaming job: when, and which.

A keyed step's partition runs where its state store is (the backend's
:class:`~runners.spark.backends.base.PartitionAffinity`), so an executor that joins later
(dynamic allocation, a worker added to a cluster) would never get a keyed task: every
partition already has a home. Between batches the affinity looks at the executors, at most
once every :data:`SPREAD_EVERY_BATCHES` batches (:class:`SpreadCheck`), and when the set
changed since it last found the partitions evenly spread, asks :func:`plan_moves` which
partitions to move where. A moved partition's store is rebuilt from the checkpoint location
once, on its new executor, and stays there; the others do not move. Executors that leave
need none of this: their partitions' tasks run elsewhere and rebuild there, as before.

>>> plan_moves({0: "a", 1: "a", 2: "a", 3: "a"}, ["a", "b"])
{2: 'b', 3: 'b'}
"""

from __future__ import annotations

import math
import time
from typing import Collection, Dict, FrozenSet, Iterable, List, Mapping, Optional

#: Batches between two looks at the executors (a look costs a call to the driver's JVM on
#: classic Spark, ~0.4 ms measured; a small Spark job on Spark Connect, see
#: :data:`SPREAD_PROBE_SHARE`).
SPREAD_EVERY_BATCHES = 5
#: Tries to spread the partitions over one set of executors (see :class:`SpreadCheck`).
SPREAD_ATTEMPTS = 3
#: Where a look is a Spark job (Spark Connect: ~0.5 s measured on the test cluster), the
#: share of the time looks may take: the next look waits ``its duration / share`` seconds.
SPREAD_PROBE_SHARE = 0.02


def plan_moves(holders: Mapping[int, str], executors: Iterable[str]) -> Dict[int, str]:
    """Which partitions move, and to which executor (partition -> executor).

    ``holders`` names the executor holding each partition's store (partitions missing, or
    held by an executor not among ``executors``, are left to land where Spark puts them);
    ``executors`` are the live ones. Nothing moves while the spread is even: no executor
    holds more than ``ceil(held partitions / executors)``. Otherwise each executor above that
    gives its highest-numbered partitions, one at a time, to the executor holding fewest
    (by name on a tie) until none is above: the fewest partitions move, and each only once.

    >>> plan_moves({0: "a", 1: "a", 2: "b", 3: "b"}, ["a", "b", "c"])  # even enough
    {}
    >>> plan_moves({0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}, ["a", "b", "c", "d"])
    {2: 'c', 5: 'd'}
    """
    live = sorted(set(executors))
    held: Dict[str, List[int]] = {executor: [] for executor in live}
    for partition, executor in sorted(holders.items()):
        if executor in held:
            held[executor].append(partition)
    placed = sum(len(partitions) for partitions in held.values())
    if not live or not placed:
        return {}
    cap = math.ceil(placed / len(live))
    moves: Dict[int, str] = {}
    for executor in live:
        while len(held[executor]) > cap:
            target = min(live, key=lambda name: (len(held[name]), name))
            partition = held[executor].pop()
            held[target].append(partition)
            moves[partition] = target
    return dict(sorted(moves.items()))


def spread_note(place: str, moves: Mapping[int, str], holders: Mapping[int, str]) -> str:
    """What moved, for the log line.

    >>> spread_note("Sum/GroupByKey", {3: "b"}, {3: "a"})
    'Sum/GroupByKey: partition 3 a -> b'
    """
    return f"{place}: " + ", ".join(f"partition {partition} {holders.get(partition, '?')} -> "
                                    f"{target}" for partition, target in sorted(moves.items()))


class SpreadCheck:
    """When an affinity looks at the executors, and whether it plans moves.

    It looks at most once every ``every`` batches, and ``seconds`` seconds. The first set it
    finds is where the job started: its partitions stay where Spark put them, as before
    executors could join. It plans moves when the set differs from the one it last found
    evenly spread (:meth:`settle`), and tries at most ``attempts`` times on one set: a move
    is a preference, which Spark drops when the executor named stays busy past its locality
    wait (a new executor's first tasks start its Python workers); the next try moves what
    did not move (each try costs one look and the moved partitions' reloads, never a
    partition that stayed).

    >>> check = SpreadCheck(every=5, attempts=2)
    >>> check.due(0, now=0.0), check.due(3, now=1.0), check.due(5, now=2.0)
    (True, False, True)
    >>> check.wanted({"a"})  # where the job started
    False
    >>> check.wanted({"a", "b"}), check.tried(), check.wanted({"a", "b"}), check.tried()
    (True, None, True, None)
    >>> check.wanted({"a", "b"})  # two tries on this set: wait for another set
    False
    >>> check.settle({"a", "b", "c"}); check.wanted({"a", "b", "c"}), check.wanted({"a"})
    (False, True)
    """

    def __init__(self, every: int = SPREAD_EVERY_BATCHES, attempts: int = SPREAD_ATTEMPTS,
                 seconds: float = 0.0) -> None:
        self.every = every
        self.attempts = attempts
        self.seconds = seconds
        self._last: Optional[int] = None
        self._last_time = 0.0
        #: the set last found evenly spread (None: no look yet)
        self.seen: Optional[FrozenSet[str]] = None
        self._trying: FrozenSet[str] = frozenset()
        self._tries = 0

    def due(self, batch: int, now: Optional[float] = None) -> bool:
        """True when ``every`` batches and ``seconds`` seconds passed since the last look
        (which this becomes); ``now`` is a monotonic clock, the process's by default."""
        now = time.monotonic() if now is None else now
        if self._last is not None and (batch - self._last < self.every
                                       or now - self._last_time < self.seconds):
            return False
        self._last, self._last_time = batch, now
        return True

    def wanted(self, executors: Collection[str]) -> bool:
        """Plan moves over ``executors`` (see the class docstring)?"""
        executors = frozenset(executors)
        if self.seen is None:
            self.seen = executors
        if executors == self.seen:
            return False
        if executors != self._trying:
            self._trying, self._tries = executors, 0
        return self._tries < self.attempts

    def tried(self) -> None:
        """Moves were made over the set :meth:`wanted` was last asked about."""
        self._tries += 1

    def settle(self, executors: Collection[str]) -> None:
        """The partitions are spread evenly over ``executors``: look again once they
        change."""
        self.seen = frozenset(executors)
