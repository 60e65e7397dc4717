"""The Spark Connect backend's pure parts: rows, group keys, the session checks' verdicts.

The Connect backend itself runs on a real server (``test_spark_connect.py`` and every model
test's ``SparkConnect`` instance); these are the functions it is made of that need no Spark:
what a task writes and reads back, and what the runner says of a server it cannot use.
"""

from __future__ import annotations

import pickle

import apache_beam
import pyarrow as pa
import pytest

from runners.spark.backends import connect_rows as rows
from runners.spark.backends.connect_checks import (
    ConnectSessionError,
    _check_workers,
    server_version,
    splits_of,
)
from runners.spark.backends.connect_names import MAX_TAG, job_tag
from runners.spark.backends.connect_tasks import (
    ConnectBroadcast,
    KeyedWriter,
    MarkedTask,
    PartitionedWriter,
    PartitionTask,
    ReportSink,
    SourceRecords,
    groups_in,
    records_in,
)
from runners.spark.worker.records import Elements, MetricUpdates, StepReport


def _slices(*numbers):
    return [pa.record_batch([pa.array(list(numbers), pa.int64())], names=["id"])]


def test_records_cross_as_they_were_in_batches_of_bounded_size(monkeypatch):
    monkeypatch.setattr(rows, "BATCH_ROWS", 3)
    records = [Elements(index % 2, bytes([index]) * index) for index in range(10)]
    records.append(StepReport("Sum", 1, 2))
    batches = list(rows.write_records(records, pa.binary()))
    assert [batch.num_rows for batch in batches] == [3, 3, 3, 2]
    assert list(rows.read_records(batches)) == records
    assert list(rows.read_records(rows.write_records(records, pa.large_binary()))) == records


def test_a_partitioned_write_names_each_rows_partition_modulo_the_count():
    pairs = [(7, "a"), (2, "b"), (0, StepReport("Sum", 0, 1))]
    (batch,) = PartitionedWriter(3, pa.binary())(iter(pairs))
    assert batch.column(0).to_pylist() == [1, 2, 0]
    assert list(rows.read_records([batch])) == ["a", "b", StepReport("Sum", 0, 1)]
    (marked,) = PartitionedWriter(3, pa.binary(), markers=True)(iter(pairs))
    assert marked.column(0).to_pylist() == [1, 2, 0, 0, 1, 2]
    assert marked.column(1).to_pylist()[3:] == [None] * 3


@pytest.mark.parametrize("key", [b"", b"k", (b"k", b"w"), (b"", b""), (b"a" * 300,)])
def test_group_keys_are_encoded_so_equal_keys_and_only_they_are_equal(key):
    assert rows.decode_key(rows.encode_key(key)) == key
    others = [b"k2", (b"k", b"w2"), (b"k",), b"kw"]
    assert all(rows.encode_key(other) != rows.encode_key(key) for other in others if other != key)


def test_a_group_key_of_another_kind_is_refused_naming_it():
    with pytest.raises(TypeError, match="bytes or a tuple of bytes, got 5"):
        rows.encode_key(5)


def test_a_sorted_partition_is_read_group_by_group_across_batches():
    shared = b"x"
    pairs = [((shared, shared), b"1"), ((b"x", b"x"), b"2"), (b"k", b"3"), (b"k", b"4")]
    batches = list(KeyedWriter(1, lambda key: 0, pa.binary())(iter(pairs)))
    rows_in_order = [row for batch in batches for row in zip(
        batch.column(1).to_pylist(), batch.column(2).to_pylist())]
    rows_in_order.sort(key=lambda row: row[0])  # what sortWithinPartitions does
    split = [pa.record_batch([pa.array([key], pa.binary()), pa.array([value], pa.binary())],
                             names=[rows.KEY, rows.RECORD]) for key, value in rows_in_order]
    # The same object twice in a key and two equal objects are one group (pickle would not).
    assert list(groups_in(0, split)) == [(b"k", [b"3", b"4"]), ((b"x", b"x"), [b"1", b"2"])]


def test_a_source_deals_each_slice_its_share_whatever_task_reads_it():
    records = list(range(10))
    source = SourceRecords(records, 3)
    shares = [list(source(99, _slices(slice_))) for slice_ in range(3)]
    assert shares == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert list(source(0, _slices(0, 2))) == [0, 1, 2, 6, 7, 8, 9]
    assert list(SourceRecords([], 1)(0, _slices(0))) == []


def test_a_task_applies_its_steps_in_order_with_the_partition_index():
    task = PartitionTask(records_in, ((False, lambda records: (r * 2 for r in records)),
                                      (True, lambda index, records: (r + index for r in records))),
                         lambda records: rows.write_records(records, pa.binary()))
    batches = list(rows.write_records([1, 2], pa.binary()))
    assert list(rows.read_records(task.run(10, iter(batches)))) == [12, 14]


def _key_partition_rows(partition, records, marker_at):
    """A key partition's rows as its shuffle hands them over: ``(partition, record)``, the
    marker (a null record) at ``marker_at``, in batches of one row and an empty one."""
    values = [pickle.dumps(record) for record in records]
    values.insert(marker_at, None)
    return [pa.record_batch([pa.array([], pa.int32()), pa.array([], pa.binary())],
                            names=[rows.PARTITION, rows.RECORD])] + [
        pa.record_batch([pa.array([partition], pa.int32()), pa.array([value], pa.binary())],
                        names=[rows.PARTITION, rows.RECORD]) for value in values]


@pytest.mark.parametrize("marker_at", [0, 1, 2])
def test_a_marked_task_runs_as_the_key_partition_its_rows_name_without_the_marker(marker_at):
    numbered = (True, lambda index, records: ((index, record) for record in records))
    task = PartitionTask(records_in, (numbered,),
                         lambda records: rows.write_records(records, pa.binary()))
    batches = _key_partition_rows(5, ["a", "b"], marker_at)
    assert list(rows.read_records(MarkedTask(task)(iter(batches)))) == [(5, "a"), (5, "b")]


def test_a_marked_task_of_the_marker_alone_runs_with_no_input_and_no_rows_runs_nothing():
    seen = []
    task = PartitionTask(records_in, ((True, lambda index, records: seen.append(
        (index, list(records))) or ()),), lambda records: rows.write_records(records, pa.binary()))
    assert list(rows.read_records(MarkedTask(task)(iter(_key_partition_rows(3, [], 0))))) == []
    assert seen == [(3, [])]
    assert list(MarkedTask(task)(iter([]))) == [] and seen == [(3, [])]


def test_a_broadcast_pickles_without_its_value_when_it_went_as_a_file():
    value = {"k": "v" * 10}
    inline = ConnectBroadcast(value, pickle.dumps(value), None)
    assert pickle.loads(pickle.dumps(inline)).value == value
    filed = ConnectBroadcast(value, pickle.dumps(value), "beam-broadcast-x.pickle")
    state = pickle.loads(pickle.dumps(filed)).__getstate__()
    assert state["inline"] is None and state["artifact"] == "beam-broadcast-x.pickle"
    assert filed.value is value  # the driver keeps its own


def test_a_tasks_metrics_leave_as_a_report():
    (report,) = ReportSink().report([b"a", b"b"])
    assert report == MetricUpdates((b"a", b"b"))


def test_job_tags_hold_no_comma_and_are_bounded():
    assert job_tag("run A, B") == "run A; B"
    assert job_tag(" , ") == ";"
    assert job_tag("") == "Beam"
    assert len(job_tag("x" * 5000)) == MAX_TAG


def test_server_versions_and_the_default_parallelism_are_read_from_the_server():
    assert server_version("4.0.1") < (4, 1) <= server_version("4.1.0")
    assert server_version("garbage") == (0, 0)
    assert splits_of("== Physical Plan ==\n*(1) Range (0, 1, step=1, splits=12)") == 12
    assert splits_of("LocalTableScan") is None


def _workers(**overrides):
    found = {"python": "%d.%d.1" % __import__("sys").version_info[:2], "executable": "py",
             "apache_beam": apache_beam.__version__, "pyspark": "4.3.0",
             "runners.spark.worker.bundles": "yes"}
    found.update(overrides)
    return {key: value for key, value in found.items() if value is not None}


def test_workers_that_can_run_the_runner_pass_the_check():
    _check_workers(_workers(), "the server")


@pytest.mark.parametrize("overrides, says", [
    ({"python": "3.9.18"}, "run Python 3.9.18"),
    ({"apache_beam": None, "apache_beam error": "ModuleNotFoundError: no apache_beam"},
     "cannot import Apache Beam.*install apache-beam=="),
    ({"apache_beam": "2.60.0"}, "have apache-beam 2.60.0, this driver"),
    ({"runners.spark.worker.bundles": None, "runners.spark.worker.bundles error": "ImportError: lmdb"},
     "cannot import the runner's own code.*lmdb"),
])
def test_workers_that_cannot_are_refused_saying_what_to_do(overrides, says):
    with pytest.raises(ConnectSessionError, match=says):
        _check_workers(_workers(**overrides), "the server")
