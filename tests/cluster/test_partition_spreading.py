"""Which key partitions move onto executors that joined a streaming job, and when the
affinity looks (``runners/spark/backends/spreading.py``); how a task names its executor
(``runners/spark/executor_identity.py``). The moves themselves, on a cluster a worker joins
mid-stream, are in ``test_spark_cluster_spreading.py``."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from runners.spark.backends.spreading import SpreadCheck, plan_moves
from runners.spark.executor_identity import executor_name


def test_a_joined_executor_takes_half_of_a_lone_executors_partitions_and_the_rest_stay():
    holders = {partition: "0@a" for partition in range(4)}
    moves = plan_moves(holders, ["0@a", "1@b"])
    assert moves == {2: "1@b", 3: "1@b"}


def test_nothing_moves_while_no_executor_holds_more_than_its_share():
    assert plan_moves({0: "a", 1: "b", 2: "a", 3: "b"}, ["a", "b"]) == {}
    # Three executors for four partitions: two each is the share (ceil), one may have none.
    assert plan_moves({0: "a", 1: "a", 2: "b", 3: "b"}, ["a", "b", "c"]) == {}
    assert plan_moves({}, ["a", "b"]) == {}
    assert plan_moves({0: "a"}, []) == {}


def test_partitions_of_executors_that_left_are_left_to_land_anywhere():
    # "gone" is not live: its partitions' next tasks run anywhere and rebuild there.
    holders = {0: "gone", 1: "gone", 2: "a", 3: "a", 4: "a", 5: "a"}
    assert plan_moves(holders, ["a", "b"]) == {4: "b", 5: "b"}


@pytest.mark.parametrize("seed", range(100))
def test_moves_are_the_fewest_that_leave_no_executor_above_its_share(seed):
    rng = random.Random(seed)
    executors = [f"e{index}" for index in range(rng.randint(1, 6))]
    partitions = rng.randint(1, 24)
    # Partitions crowd on a few executors, as they do before new ones join.
    crowded = executors[:rng.randint(1, len(executors))]
    holders = {partition: rng.choice(crowded) for partition in range(partitions)}
    moves = plan_moves(holders, executors)

    cap = math.ceil(partitions / len(executors))
    before = Counter(holders.values())
    after = Counter({**holders, **moves}.values())
    assert max(after.values()) <= cap
    assert len(moves) == sum(max(0, count - cap) for count in before.values())
    assert all(holders[partition] != target for partition, target in moves.items())
    if max(before.values()) <= cap:
        assert moves == {}


def test_the_check_looks_every_few_batches_and_tries_each_new_set_a_few_times():
    check = SpreadCheck(every=5, attempts=3)
    assert [batch for batch in range(12) if check.due(batch, now=batch)] == [0, 5, 10]
    # Where a look is a job, it also waits for seconds to pass (batches of 10 s here).
    timed = SpreadCheck(every=5, seconds=30.0)
    assert [batch for batch in range(12) if timed.due(batch, now=10.0 * batch)] == [0, 5, 10]
    timed = SpreadCheck(every=5, seconds=30.0)  # batches of 1 s
    assert [batch for batch in range(70) if timed.due(batch, now=float(batch))] == [0, 30, 60]
    assert not check.wanted({"a"})  # the first look: where the job started, left as it is
    joined = {"a", "b"}
    for _ in range(3):  # moves made, not (all) taken: tried again, three times at most
        assert check.wanted(joined)
        check.tried()
    assert not check.wanted(joined)
    assert check.wanted({"a", "b", "c"})  # another set: tries anew
    check.settle({"a", "b", "c"})  # found even: nothing until the set changes
    assert not check.wanted({"a", "b", "c"})
    assert check.wanted({"a", "c"})  # one left


@pytest.mark.parametrize("environ, expected", [
    # A standalone worker's executor: its id is in the URL of its logs (measured).
    ({"SPARK_LOG_URL_STDERR": "http://127.0.0.1:38825/logPage/?appId=app-2026-0000"
                              "&executorId=1&logType=stderr",
      "SPARK_LOCAL_DIRS": "/tmp/spark-worker-local/x/blockmgr-y"}, "1@host"),
    ({"SPARK_EXECUTOR_ID": "7", "SPARK_LOG_URL_STDERR": "unrelated"}, "7@host"),  # Kubernetes
    ({"CONTAINER_ID": "container_1_0001_01_000002"}, "container_1_0001_01_000002@host"),  # YARN
    ({"SPARK_LOCAL_DIRS": "/tmp/blockmgr-1"}, "/tmp/blockmgr-1@host"),  # a local master
    ({}, "driver@host"),
])
def test_a_task_names_its_executor_from_the_environment_it_inherits(environ, expected):
    assert executor_name(environ, "host") == expected
