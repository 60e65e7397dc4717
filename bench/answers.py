"""What every engine must reproduce: each workload's answer by a plain Python loop.

Apart from :mod:`bench.workloads` because ``parse_filter_project``'s answer comes from
:mod:`bench.bids`, which builds on the workloads' events.

>>> from bench.workloads import EventSet, generate_shard
>>> events = EventSet(events=10, seed=1, shard_count=2)
>>> reference_answer("global_sum", events) == sum(
...     score for shard in events.shards() for _, score, _ in generate_shard(*shard))
True
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Tuple

from bench.bids import reference_digest
from bench.nexmark import queries as nexmark
from bench.workloads import (
    ELEMENT_WISE,
    GLOBAL_SUM,
    HOT_KEY_GROUP,
    PARSE_FILTER_PROJECT,
    EventSet,
    check_workload,
    digest,
    element_wise,
    generate_shard,
    group_key,
    output_line,
    window_start,
)


def reference_answer(workload: str, event_set: EventSet) -> Any:
    """The answer computed by a plain Python loop: what every engine must reproduce."""
    if workload in nexmark.WORKLOADS:
        return nexmark.reference_answer(workload, event_set)
    check_workload(workload)
    if workload == GLOBAL_SUM:
        return sum(score for shard in event_set.shards() for _, score, _ in generate_shard(*shard))
    if workload == PARSE_FILTER_PROJECT:
        return reference_digest(event_set)
    if workload in ELEMENT_WISE:
        records = (element_wise(workload, event) for shard in event_set.shards()
                   for event in generate_shard(*shard))
        return digest(output_line(record) for record in records if record is not None)
    if workload == HOT_KEY_GROUP:
        counts: Dict[str, List[int]] = defaultdict(lambda: [0, 0])
        for shard in event_set.shards():
            for event in generate_shard(*shard):
                entry = counts[group_key(event)]
                entry[0] += 1
                entry[1] += event[1]
        return {key: tuple(entry) for key, entry in counts.items()}
    sums: Dict[Tuple[str, int], int] = defaultdict(int)
    for shard in event_set.shards():
        for team, score, event_time in generate_shard(*shard):
            sums[(team, window_start(event_time))] += score
    return dict(sums)
