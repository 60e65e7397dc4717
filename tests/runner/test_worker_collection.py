"""The garbage collector's threshold while a stage runs (:mod:`runners.spark.worker.collection`):
raised for the partition, restored after it, left alone when collection is off. The run on
Spark, where a stage's DoFn sees the raised threshold and a plain RDD function in the same
workers Python's own, is in ``test_spark_runner_execution.py``."""

from __future__ import annotations

import gc
import threading

import pytest

from runners.spark.worker.collection import (
    STAGE_COLLECTION_THRESHOLD,
    young_objects_collected_less_often,
)


@pytest.fixture(autouse=True)
def _default_thresholds():
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_the_thresholds_are_restored_after_the_last_of_nested_partitions():
    outer = young_objects_collected_less_often()
    inner = young_objects_collected_less_often()
    outer.__enter__()
    inner.__enter__()
    assert gc.get_threshold() == (STAGE_COLLECTION_THRESHOLD, 10, 10)
    outer.__exit__(None, None, None)  # the other one still runs: not restored yet
    assert gc.get_threshold() == (STAGE_COLLECTION_THRESHOLD, 10, 10)
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_an_exception_restores_them():
    with pytest.raises(ValueError, match="a user's error"):
        with young_objects_collected_less_often():
            raise ValueError("a user's error")
    assert gc.get_threshold() == (700, 10, 10)


def test_collection_off_and_a_higher_threshold_are_left_as_they_are():
    for thresholds in ((0, 10, 10), (50_000, 5, 5)):
        gc.set_threshold(*thresholds)
        with young_objects_collected_less_often():
            assert gc.get_threshold() == thresholds
        assert gc.get_threshold() == thresholds


def test_partitions_in_threads_restore_once_all_have_ended():
    started, release = threading.Barrier(3), threading.Event()

    def partition():
        with young_objects_collected_less_often():
            started.wait()
            release.wait()

    threads = [threading.Thread(target=partition) for _ in range(2)]
    for thread in threads:
        thread.start()
    started.wait()
    assert gc.get_threshold()[0] == STAGE_COLLECTION_THRESHOLD
    release.set()
    for thread in threads:
        thread.join()
    assert gc.get_threshold() == (700, 10, 10)
