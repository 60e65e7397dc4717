"""The executor profile of Beam's Nexmark (``python -m bench.nexmark.profile``): its meters
charge a partition function its own CPU, not its input's, and its attribution splits a
profile by step and by kind of work as documented. Pure functions and in-process meters:
no Spark here (the profile itself is a benchmark, run by hand).
"""

from __future__ import annotations

import time

import pytest

from bench.nexmark import attribution, meters


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_metered_function_is_charged_its_own_cpu_not_its_input_s():
    def slow_input():
        for number in range(4):
            _burn(0.02)  # the upstream's work: 80 ms in all
            yield number

    def stage(records):
        for record in records:
            _burn(0.01)  # the stage's own work: 40 ms in all
            yield record

    outer = meters.PartitionMeter(stage, "stage", directory=None, run_id="test-own")

    assert list(outer(slow_input())) == [0, 1, 2, 3]
    charged = meters.totals()
    assert 0.035 < charged["stage"].cpu < 0.07
    assert charged[meters.OUTSIDE].cpu >= 0.075


def test_pipelined_functions_each_get_their_own_time():
    def upstream(records):
        for record in records:
            _burn(0.01)
            yield record

    def downstream(records):
        for record in records:
            _burn(0.03)
            yield record

    first = meters.PartitionMeter(upstream, "upstream", None, run_id="test-pipelined")
    second = meters.PartitionMeter(downstream, "downstream", None, run_id="test-pipelined")

    assert list(second(first(iter(range(3))))) == [0, 1, 2]
    charged = meters.totals()
    assert 0.025 < charged["upstream"].cpu < 0.05
    assert 0.085 < charged["downstream"].cpu < 0.13


def test_garbage_collections_are_charged_to_the_function_that_triggered_them():
    def cyclic(records):
        for record in records:
            for _ in range(20_000):
                node = []
                node.append(node)  # a cycle: only the collector frees it
            yield record

    meter = meters.PartitionMeter(cyclic, "cyclic", None, run_id="test-gc")

    assert list(meter(iter(range(3)))) == [0, 1, 2]
    charged = meters.totals()["cyclic"]
    assert charged.collections >= 1
    assert 0.0 < charged.gc_cpu <= charged.cpu


NEXMARK = "/x/apache_beam/testing/benchmarks/nexmark"
ROOT = (f"{NEXMARK}/nexmark_util.py", 145, "process")
OTHER_ROOT = (f"{NEXMARK}/monitor.py", 53, "process")
LOADS = ("/usr/lib/python3.11/json/decoder.py", 332, "decode")
SCANNER = ("~", 0, "<built-in method _json.scanstring>")
CHAIN = ("<chained steps>", 4, "chain")
STAMP = ("/x/apache_beam/utils/timestamp.py", 60, "__init__")


def _entry(calls, own, cumulative, callers):
    return (calls, calls, own, cumulative, callers)


def test_a_profile_is_split_by_step_and_kind():
    # chain calls the parser (root) and the monitor (root); both make Timestamps; the
    # parser calls json, which calls a built-in scanner.
    stats = {
        CHAIN: _entry(10, 1.0, 10.0, {}),
        ROOT: _entry(10, 2.0, 7.0, {CHAIN: (10, 10, 2.0, 7.0)}),
        OTHER_ROOT: _entry(10, 1.0, 2.0, {CHAIN: (10, 10, 1.0, 2.0)}),
        LOADS: _entry(10, 1.0, 3.0, {ROOT: (10, 10, 1.0, 3.0)}),
        SCANNER: _entry(10, 2.0, 2.0, {LOADS: (10, 10, 2.0, 2.0)}),
        STAMP: _entry(20, 2.0, 2.0, {ROOT: (10, 10, 1.5, 1.5), OTHER_ROOT: (10, 10, 0.5, 0.5)}),
    }
    roots = {"nexmark_util.py:145:process": "deserialization",
             "monitor.py:53:process": "event_monitor"}

    rows = attribution.breakdown(stats, roots, profiled_cpu=9.0, unprofiled_cpu=4.5,
                                 overhead=(0.0, 0.0))
    profiled = {key: round(value[0], 6) for key, value in rows.items()}

    assert profiled == {
        (attribution.NO_STEP, attribution.CHAINS): 1.0,
        ("deserialization", attribution.USER): 2.0,
        ("deserialization", attribution.JSON): 3.0,  # json and the built-in it calls
        ("deserialization", attribution.TIMESTAMPS): 1.5,  # by the time through each edge
        ("event_monitor", attribution.USER): 1.0,
        ("event_monitor", attribution.TIMESTAMPS): 0.5,
    }
    assert sum(value[0] for value in rows.values()) == pytest.approx(9.0)
    # Without cProfile's cost per call, the estimate is scaled to the unprofiled CPU.
    assert sum(value[1] for value in rows.values()) == pytest.approx(4.5)


def test_a_root_called_under_another_step_counts_under_that_step():
    decode = ("/x/apache_beam/coders/coders.py", 457, "decode")
    stats = {
        ROOT: _entry(1, 1.0, 3.0, {}),
        decode: _entry(2, 2.0, 2.0, {ROOT: (1, 1, 1.5, 1.5), CHAIN: (1, 1, 0.5, 0.5)}),
        CHAIN: _entry(1, 0.0, 0.5, {}),
    }
    roots = {"nexmark_util.py:145:process": "deserialization",
             "coders.py:457:decode": "write/DoOnce/Map(decode)"}

    rows = attribution.breakdown(stats, roots, 3.0, None, (0.0, 0.0))

    assert rows[("deserialization", attribution.DECODE)][0] == pytest.approx(1.5)
    assert rows[("write/DoOnce/Map(decode)", attribution.DECODE)][0] == pytest.approx(0.5)


def test_kinds_of_beam_s_functions():
    assert attribution.kind_of(("~", 0, "<method 'process' of "
                                "'apache_beam.runners.worker.operations.DoOperation' objects>")
                               ) == attribution.OPERATIONS
    assert attribution.kind_of(("~", 0, "<built-in method builtins.isinstance>")) is None
    assert attribution.kind_of(("/x/runners/spark/chains/window_assignment.py", 163,
                                "process")) == attribution.WINDOWS
    assert attribution.kind_of(("/x/apache_beam/io/range_trackers.py", 117,
                                "try_claim")) == attribution.TRACKER
