"""The cluster's joined-worker check, one body for classic Spark and for a Connect server
that drives the same cluster (``test_spark_cluster_spreading.py``): a keyed streaming job
starts on one worker of ``cluster_fixtures``' two, the other joins mid-stream, and key
partitions spread onto its executor (``runners/spark/backends/spreading.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import cluster_job
from cluster_fixtures import finish_driver, start_driver, wait_for_batches
from lost_worker_checks import keyed_job_command, report_lines
from services.cluster import master_status

#: TestStream batches of data (each a report line, its watermark advance another): enough
#: for the joined executor to register (~15 s), a look (every 5 batches), and batches after.
BATCHES = 20
#: Report lines before worker 1 joins: the job has placed every partition on worker 0.
JOIN_AFTER = 3
#: Report lines after the join by which the partitions have moved.
MOVED_WITHIN = 30


@contextlib.contextmanager
def second_worker_away(cluster: Any) -> Iterator[Callable[[], None]]:
    """Worker 1 stopped (its executors with it), and the master knowing it: what runs now
    has worker 0 alone. Yields what starts worker 1 again, as a host joins; it is started
    again on the way out whatever happened (the cluster is the session's)."""
    cluster.kill_worker(1)
    deadline = time.monotonic() + 60
    while (master_status(cluster.web_ui_url) or {}).get("aliveworkers") != 1:
        assert time.monotonic() < deadline, "the master still counts worker 1 alive"
        time.sleep(0.2)
    try:
        yield lambda: cluster.start_worker(1)
    finally:
        if not cluster.worker_processes(1):
            cluster.start_worker(1)


def executor_changes(lines: List[Dict[str, Any]], step: str) -> Dict[str, List[str]]:
    """Partition -> the executors that held it, in order, each once per stay."""
    held: Dict[str, List[str]] = {}
    for line in lines:
        for partition, executor in line["executors"].get(step, {}).items():
            stays = held.setdefault(partition, [])
            if not stays or stays[-1] != executor:
                stays.append(executor)
    return held


def check_key_partitions_spread_onto_a_worker_that_joins(
        cluster: Any, shared_dir: Path, spark_session: Any, tmp_path: Path,
        *driver_options: str, batches: int = BATCHES, moved_within: int = MOVED_WITHIN,
        fewest_moves: bool = True) -> None:
    """Started on worker 0 alone, every key partition of both keyed steps is there; worker 1
    joins mid-stream: within ``moved_within`` report lines each step has half its
    partitions on the new executor, and they stay. Each move rebuilt the partition's store
    from the checkpoint location once, and no store was rebuilt otherwise; with
    ``fewest_moves`` (classic Spark's exact placement) only two partitions of each step
    moved, once each. The panes are what classic ``local[2]`` (``spark_session``) writes."""
    panes, report, log = shared_dir / "panes", shared_dir / "report.jsonl", tmp_path / "job.log"
    with second_worker_away(cluster) as join:
        driver = start_driver(keyed_job_command(panes, str(shared_dir / "checkpoints"), report,
                                                batches, *driver_options), log)
        try:
            wait_for_batches(driver, report, JOIN_AFTER, log)
            join()
            joined_at = len(report.read_text().splitlines())
            expected = cluster_job.local_records(spark_session, tmp_path / "local", batches)
            finish_driver(driver, log)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)

    assert cluster_job.read_records(str(panes)) == expected
    lines = report_lines(report)
    steps = sorted(lines[-1]["executors"])
    assert len(steps) == 2 and "Sum/GroupByKey" in steps  # and the stateful stage
    (first,) = {executor for step in steps
                for executor in lines[joined_at - 1]["executors"][step].values()}
    for step in steps:
        changes = executor_changes(lines, step)
        final = lines[-1]["executors"][step]
        joined = {executor for executor in final.values() if executor != first}
        assert len(joined) == 1 and sorted(final.values()).count(first) == 2, (step, final)
        moves = sum(len(stays) - 1 for stays in changes.values())
        if fewest_moves:  # two partitions moved, once each, onto the new executor
            assert moves == 2 and all(len(stays) <= 2 for stays in changes.values()), (
                step, changes)
        # One store rebuilt per move, none otherwise (none before the join).
        loaded = [line["stores_loaded"][step] for line in lines]
        assert sum(loaded) == moves, (step, loaded, changes)
        assert sum(loaded[:joined_at]) == 0, (step, loaded)
        # Within a bounded number of batches of the join (the executor's start, a look
        # every few batches, another try if a preference lapsed), then no more moves.
        last_move = max(index for index, line in enumerate(lines)
                        if any(line["executors"][step].get(partition) != stays[-1]
                               for partition, stays in changes.items()))
        assert last_move + 1 - joined_at <= moved_within, (step, joined_at, last_move)
