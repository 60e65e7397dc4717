"""Faults inside a running Kafka job on the SparkRunner: nothing lost, panes unchanged.

* A Python worker killed during a batch (``tests/kafka/kafka_fault_job.py``: once in the stage that
  reads the planned offset ranges, once in the stage that fires panes and writes them): Spark
  retries the task (``local[2,4]`` allows four attempts), the retry reads the same ranges from
  the same state, and the panes equal those of an uninterrupted run. On noida the sink is
  transactional, so a read-committed consumer sees exactly the reference panes; tansu has no
  transactions, so there the test asks for no pane lost and nothing but copies of them.
* A broker restarted under load (noida keeps its log in its data directory): the job,
  reading a backlog in capped batches, sees the broker go away mid-run, says so once, waits,
  and reads on when it is back; the last pane of every window then holds every record
  produced, before and after the restart, each counted once.
"""

from __future__ import annotations

import collections
import json
import time
from typing import Dict, List, Tuple

from kafka_fixtures import KafkaTestHelper, recent_base_seconds
from kafka_jobs import (
    PARTITIONS,
    PER_PARTITION,
    WINDOW,
    finish_job,
    game_records,
    kill_job,
    log_tail,
    start_job,
    topic_panes,
    wait_for_records,
)
from project import PYTHON, QUICK_JVM_OPTIONS, REPO
from services.broker import EmbeddedBroker

#: How long the broker stays away at most, waiting for the job to notice.
BROKER_AWAY_LIMIT_SECONDS = 120


def _command(bootstrap_servers: str, source: str, output: str, *extra: str) -> List[str]:
    return [PYTHON, str(REPO / "tests" / "kafka" / "kafka_fault_job.py"),
            "--bootstrap_servers", bootstrap_servers, "--input_topic", source,
            "--output_topic", output, "--batch_max_records_per_partition", "2",
            "--window_seconds", str(WINDOW), "--early_seconds", "0",
            "--allowed_lateness", "600", "--idle_timeout_seconds", "3600",
            "--runner", "SparkRunner", "--streaming", "--batch_interval_seconds", "0.2",
            "--spark_parallelism", "1", "--spark_conf", "spark.ui.enabled=false",
            *QUICK_JVM_OPTIONS, *extra]


def test_a_python_worker_killed_during_a_batch_leaves_the_panes_unchanged(
        kafka, kafka_broker_kind, tmp_path):
    exactly_once = kafka_broker_kind == "noida"  # tansu has no transactions
    base = recent_base_seconds()
    source = kafka.create_topic(partitions=PARTITIONS)
    kafka.produce(source, game_records(base, PARTITIONS, PER_PARTITION))
    reference_topic, output = kafka.create_topic(), kafka.create_topic()
    faults = tmp_path / "faults"
    faults.mkdir()
    common = ["--max_records", str(PER_PARTITION), "--spark_master_url", "local[2,4]",
              *(["--exactly_once"] if exactly_once else [])]
    reference_log, faulty_log = tmp_path / "reference.log", tmp_path / "faulty.log"
    reference = start_job(_command(kafka.bootstrap_servers, source, reference_topic, *common),
                          reference_log)
    faulty = start_job(_command(kafka.bootstrap_servers, source, output, *common,
                                "--fault_dir", str(faults), "--fault_from_seconds",
                                str(base + 20)), faulty_log)
    try:
        finish_job(faulty, faulty_log)
        finish_job(reference, reference_log)
    finally:
        kill_job(reference)
        kill_job(faulty)
    assert sorted(path.name for path in faults.iterdir()) == ["read", "write"], (
        "both faults fired:\n" + log_tail(faulty_log))
    retried = faulty_log.read_text(errors="replace").count("WARN TaskSetManager: Lost task")
    assert retried == 2, f"Spark retried each killed task once, not {retried} tasks"

    expected = topic_panes(kafka.bootstrap_servers, reference_topic, committed_only=exactly_once)
    assert {json.loads(pane)["pane"]["timing"] for pane in expected} == {"ON_TIME", "LATE"}
    seen = topic_panes(kafka.bootstrap_servers, output, committed_only=exactly_once)
    if exactly_once:
        assert seen == expected
    else:
        assert not expected - seen, f"panes lost: {expected - seen}"
        assert set(seen) == set(expected), f"records that are no pane of the run: {seen - expected}"


def _window_totals(records: List[tuple]) -> Dict[Tuple[str, float], int]:
    """``(team, window start) -> sum of scores`` of produced game records."""
    totals: Dict[Tuple[str, float], int] = collections.Counter()
    for record in records:
        event = json.loads(record[1])
        totals[event["team"], event["timestamp"] // WINDOW * WINDOW] += event["score"]
    return dict(totals)


def _last_pane_totals(panes) -> Dict[Tuple[str, float], int]:
    """``(team, window start) -> value`` of the pane with the highest index of each window."""
    last: Dict[Tuple[str, float], dict] = {}
    for pane in map(json.loads, panes):
        window = (pane["key"], pane["window"]["start"])
        if window not in last or pane["pane"]["index"] > last[window]["pane"]["index"]:
            last[window] = pane
    return {window: pane["value"] for window, pane in last.items()}


def _says_it_waits(log_text: str) -> bool:
    return "does not answer" in log_text or "waits for Kafka" in log_text


def test_a_broker_restarted_under_load_loses_no_record(tmp_path):
    """This test starts its own noida broker whatever KAFKA_BROKER says: tansu keeps its log in
    memory, so a restart empties it and there is nothing to keep."""
    base = recent_base_seconds()
    per_partition = 40
    records = game_records(base, PARTITIONS, per_partition)
    # Every partition gets its first half before the job starts, its second after the restart.
    halves = ([], [])
    for number, record in enumerate(records):
        halves[number % per_partition >= per_partition // 2].append(record)
    first, second = halves
    with EmbeddedBroker(kind="noida") as broker:
        kafka = KafkaTestHelper(broker.bootstrap_servers, "broker-under-load")
        source = kafka.create_topic(partitions=PARTITIONS)
        output = kafka.create_topic()
        kafka.produce(source, first)
        log = tmp_path / "job.log"
        job = start_job(_command(broker.bootstrap_servers, source, output,
                                 "--max_records", str(per_partition)), log)
        try:
            # The job reads its backlog two records per partition a batch: stop the broker
            # once some panes are out, keep it away until the job has said it waits for it
            # (the planner before a batch, or a batch's write caught in the middle), then
            # produce the rest.
            wait_for_records(job, broker.bootstrap_servers, output, 3, log)
            broker.stop(remove_data=False)
            deadline = time.monotonic() + BROKER_AWAY_LIMIT_SECONDS
            while not _says_it_waits(log.read_text(errors="replace")):
                assert job.poll() is None, f"the job died with the broker:\n{log_tail(log)}"
                assert time.monotonic() < deadline, f"no wait for the broker:\n{log_tail(log)}"
                time.sleep(0.5)
            broker.start()
            kafka.produce(source, second)
            finish_job(job, log)
        finally:
            kill_job(job)
        panes = topic_panes(broker.bootstrap_servers, output, committed_only=False)
    text = log.read_text(errors="replace")
    # One line when it starts waiting and one when it goes on, from each side that noticed
    # (the planner before a batch, a batch's write caught in the middle; a broker starting
    # again may answer connections before its metadata, so both may notice), never one
    # per attempt.
    waits = [text.count("does not answer"), text.count("waits for Kafka")]
    assert 1 <= sum(waits) and max(waits) == 1, text[-4000:]
    assert "answers again" in text or "accepts connections again" in text, text[-4000:]
    assert _last_pane_totals(panes) == _window_totals(records)
