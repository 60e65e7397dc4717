"""Keyed streaming steps on a user's Spark Connect session with adaptive query execution on.

The runner's own sessions turn adaptive execution off; a user's (a notebook's ``spark``)
usually has it on, Spark's default. A keyed step's tasks stay where their stores are because
its cogroup zips the cached pointer's partition ``i`` with the batch's input partition ``i``
in one task: a plan with no exchange on either side (beyond the input's own shuffle into
the key partitions). These tests check that plan on such a session from the step's first
batch on, and that the runner says once, naming the setting, what adaptive execution costs.
"""

from __future__ import annotations

import logging

import pytest

from connect_fixtures import no_classic_spark, shared_connect_server  # noqa: F401 (fixture)


def _seen(partition, records):
    yield partition, sorted(records)


@pytest.fixture
def adaptive_session(no_classic_spark):  # noqa: F811 (the fixture)
    """A new session on the test server, as a user's: adaptive execution on."""
    from services.connect_server import client_session

    session = client_session(shared_connect_server().url)
    session.conf.set("spark.sql.adaptive.enabled", "true")
    try:
        yield session
    finally:
        from runners.spark.backends.connect import ConnectBackend

        ConnectBackend._SESSIONS.pop(session.session_id, None)
        session.stop()


def test_keyed_steps_plan_no_exchange_from_their_first_batch_with_adaptive_execution(
        adaptive_session, caplog):
    """Each batch of a keyed step with input, and of one with due timers only, plans no
    exchange the adaptive planner adds (ENSURE_REQUIREMENTS: both sides hashed into
    ``spark.sql.shuffle.partitions`` tasks placed anywhere, stores rebuilt where they land),
    also in its first batch, before its pointer was ever computed; every key partition gets
    its own input; and the session's backend warns once, naming the setting."""
    from runners.spark.backends.connect import ConnectBackend
    from runners.spark.backends.connect_affinity import PointerAffinity

    with caplog.at_level(logging.WARNING, logger="runners.spark.backends.connect"):
        backend = ConnectBackend.of(adaptive_session)
        assert ConnectBackend.of(adaptive_session) is backend
    warnings = [record.getMessage() for record in caplog.records
                if "spark.sql.adaptive.enabled" in record.getMessage()]
    assert len(warnings) == 1, caplog.records
    assert backend.facts.adaptive
    placement = PointerAffinity(backend, 4, enabled=True)
    try:
        pairs = [(number % 4, number) for number in range(10) if number % 4 != 2]
        keyed = backend.source(pairs, 2).partition_by(4)
        expected = [(0, [0, 4, 8]), (1, [1, 5, 9]), (2, []), (3, [3, 7])]
        for batch in range(3):
            placed = placement.run("Sum", keyed, _seen)
            timers_only = placement.run(f"Count{batch // 2}", backend.source([], 4), _seen)
            for frame in (placed.frame(), timers_only.frame()):
                plan = frame._explain_string(extended=False)
                assert "ENSURE_REQUIREMENTS" not in plan, (batch, plan)
            assert sorted(backend.collect(placed)) == expected
            assert sorted(backend.collect(timers_only)) == [(partition, [])
                                                            for partition in range(4)]
    finally:
        placement.release()


def test_keyed_steps_on_one_executor_keep_their_key_partitions_with_adaptive_execution(
        adaptive_session):
    """On one executor (nothing to place: marker rows, no pointer), adaptive execution
    neither merges nor drops a key partition: each still gets its own input, also once the
    outputs are unioned and coalesced, and one with no input, or a step with due timers only,
    still runs, batch after batch."""
    from runners.spark.backends.connect import ConnectBackend
    from runners.spark.backends.connect_affinity import PointerAffinity

    backend = ConnectBackend.of(adaptive_session)
    placement = PointerAffinity(backend, 4, enabled=False)
    pairs = [(number % 4, number) for number in range(10) if number % 4 != 2]
    keyed = backend.source(pairs, 2).partition_by(4)
    expected = [(0, [0, 4, 8]), (1, [1, 5, 9]), (2, []), (3, [3, 7])]
    for _ in range(2):
        marked = placement.run("Sum", keyed, _seen)
        timers_only = placement.run("Count", backend.source([], 4), _seen)
        union = backend.union([timers_only, marked]).coalesce(1)
        assert sorted(backend.collect(union)) == sorted(
            expected + [(partition, []) for partition in range(4)])


def test_the_sessions_the_runner_makes_have_adaptive_execution_off(no_classic_spark, caplog):  # noqa: F811
    """A session of the runner's own (``--spark_remote``) turns it off: no warning."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark.backends.connect import ConnectBackend

    with caplog.at_level(logging.WARNING, logger="runners.spark.backends.connect"):
        backend = ConnectBackend.connect(shared_connect_server().url, PipelineOptions())
    assert not backend.facts.adaptive
    assert not any("spark.sql.adaptive.enabled" in record.getMessage()
                   for record in caplog.records)
