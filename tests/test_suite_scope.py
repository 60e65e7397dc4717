"""The core suite's list of left-out tests names tests that exist (suite_scope.py)."""

from __future__ import annotations

from suite_scope import COLLECTED, CONNECT_EXTENDED, EXTENDED, FAULTS, is_extended


def test_every_left_out_or_fault_test_named_exists():
    """A renamed test must not slip back into the core suite (or out of ``faults``) unseen:
    each prefix whose file was collected names one of its tests (parameters aside, which
    KAFKA_BROKER and BEAM_TEST_RUNNERS choose)."""
    assert COLLECTED, "conftest.py did not record the collected tests"
    files = {node.split("::", 1)[0] for node in COLLECTED}
    tests = {node.split("[", 1)[0] for node in COLLECTED}
    stale = [prefix for prefix in (*EXTENDED, *CONNECT_EXTENDED, *FAULTS)
             if prefix.split("::", 1)[0] in files
             and not any(test.startswith(prefix.split("[", 1)[0]) for test in tests)]
    assert not stale, f"no collected test starts with {stale}"


def test_the_rules_leave_out_what_they_say():
    assert is_extended("runner/test_graph.py::test_x[SparkConnect]", "runner", "SparkConnect",
                       None) == ("a Spark Connect run outside tests/model, tests/conformance, "
                                 "tests/streaming, tests/state and tests/kafka")
    assert is_extended("state/test_state_table.py::test_x[SparkConnect]", "state", "SparkConnect",
                       None) is None
    assert is_extended("model/test_windows.py::test_x[SparkConnect]", "model", "SparkConnect",
                       None) is None
    assert is_extended("kafka/test_kafka_write.py::test_x[noida-SparkConnect]", "kafka",
                       "SparkConnect", "noida") is None
    assert "Connect" in is_extended("kafka/test_kafka_read.py::test_x[noida-SparkConnect]",
                                    "kafka", "SparkConnect", "noida")
    assert is_extended("kafka/test_kafka_faults.py::test_y[noida]", "kafka", None, "noida")
    assert is_extended("kafka/test_kafka_read.py::test_y[noida-SparkRunner]", "kafka",
                       "SparkRunner", "noida") is None
