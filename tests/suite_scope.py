"""What ``make test`` runs, and what it leaves to targets of their own.

``make test`` must stay within 15 minutes on a fresh clone of a 2-core machine: it runs the
*core* suite (``BEAM_TEST_SCOPE=core``). A test outside it is marked ``extended`` and runs in
``make test-all`` (every test, the default of a bare ``pytest``), ``make test-extended``
(only those), and its area's target (``make test-kafka``, ``make test-connect``,
``make test-faults``). Left out of the core suite, each for a stated reason:

* the Kafka tests on the second embedded broker (``tansu``): the connector's code is the
  same on both, and the core suite runs every Kafka test on ``noida``;
* the Spark Connect runs of the tests of ``tests/runner`` and ``tests/pipelines``: every
  model, conformance, streaming, state and Kafka test that names its runner runs on Connect
  in the core suite, with Connect's own tests; the runner's and the jobs' tests exercise the
  same backend again;
* the DirectRunner runs of the tests outside ``tests/model`` and ``tests/conformance``:
  Beam's own runner at a pinned version, the reference every model test is compared with in
  the core suite;
* the tests of :data:`EXTENDED`, and the Connect runs of :data:`CONNECT_EXTENDED`, each
  with why it can wait.

Fault tests (a process killed or restarted, nothing lost or doubled) are also marked
``faults`` (:data:`FAULTS`): ``make test-faults`` runs all of them; the core suite keeps a
worker lost under a keyed streaming job on the cluster, and a broker gone in the middle of a
Kafka write or restarted between a write and a read.

>>> is_extended("kafka/test_kafka_read.py::test_x[tansu-SparkRunner]", "kafka", "SparkRunner",
...             "tansu")
'the second embedded broker'
>>> is_extended("model/test_windows.py::test_x[DirectRunner]", "model", "DirectRunner", None)
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import pytest

#: The areas whose tests' Spark Connect runs are in the core suite.
CONNECT_CORE_AREAS = ("model", "conformance", "streaming", "state", "kafka")
#: The areas whose tests' DirectRunner runs are in the core suite (the reference each
#: SparkRunner result is compared with).
DIRECT_CORE_AREAS = ("model", "conformance")
#: Node-id prefixes (relative to tests/) of tests outside the core suite, and why.
EXTENDED: Dict[str, str] = {
    "cluster/test_spark_cluster_streaming.py::test_a_job_killed_and_restarted_from_a_checkpoint"
    "_on_s3": "a driver killed on the cluster and resumed from S3 (110 s); the core suite "
              "loses a cluster worker",
    "cluster/test_spark_cluster_streaming.py::test_a_lost_worker_under_an_exactly_once_kafka":
        "a worker lost under exactly-once Kafka (90 s); the core suite loses a worker under "
        "keyed state and writes exactly-once to Kafka",
    "kafka/test_kafka_restart.py::": "a Kafka job's driver killed and resumed, exactly-once "
                                     "and at-least-once (55-60 s each)",
    "kafka/test_kafka_drain.py::": "a drain of a Kafka job and its restart (55 s); the core "
                                   "suite drains a job on SIGTERM",
    "kafka/test_kafka_tls.py::test_team_scores_over_tls": "a whole job over mutual TLS (60 s); "
        "the core suite keeps the TLS handshake and refusal tests",
    "kafka/test_kafka_faults.py::": "a Python worker and a broker killed under a streaming job "
                                    "(70 s)",
    "state/test_spark_streaming_checkpoint.py::test_killed_driver_resumes": "a killed "
        "driver resumed from its local checkpoint (35 s); the core suite restarts drivers from "
        "checkpoints without a kill",
    "streaming/test_compact_rounds.py::": "the streaming model proofs again, with every round "
                                          "as Spark stages (45 s)",
    "runner/test_spark_connect.py::test_a_server_whose_workers_lack_beam": "a Connect server "
        "of its own to be refused (35 s); the probe's other refusals are unit-tested",
    "runner/test_spark_connect.py::test_batch_elements_on_a_server_whose_workers_are": "a "
        "Connect server of its own without the runner's daemon (220 s here); the core suite checks "
        "that a fresh Python process of an executor keys BatchElements alike",
    "cluster/test_spark_cluster_streaming.py::test_executors_without_the_project": "a user's "
        "package installed on cluster executors that lack the project (35 s); the core suite "
        "ships the project to the cluster and a package to a Connect server",
    "cluster/test_spark_cluster_connect.py::test_a_keyed_streaming_job_on_connect": "the "
        "cluster's keyed streaming job again through a Connect server (110 s); the core suite "
        "runs it on classic, and Connect's placement on the test process's server",
    "cluster/test_spark_cluster_connect.py::test_a_lost_worker_under_an_exactly_once": "Kafka "
        "exactly-once with a worker lost, through a Connect server (115 s)",
    "job_server/test_job_server_connect.py::test_beams_wordcount_through_a_job_server_on": "Beam's "
        "wordcount through a job server on Connect (53 s): the core suite runs the job "
        "server on classic Spark and the runner on Connect",
    "pipelines/test_make_run.py::": "the live demo end to end, run out and interrupted (50 s "
        "and 20 s): the core suite runs its parts (team_scores on Kafka in streaming, the "
        "leaderboard, the pictures)",
    "pipelines/test_cli.py::test_team_scores_replayed_to_files": "team_scores replayed in "
        "streaming to files (15 s); the core suite replays it to the terminal",
    "pipelines/test_plots.py::test_team_scores_plot_option": "team_scores drawing its "
        "pictures (12 s); the core suite draws them from a real run's panes",
    "cluster/test_spark_cluster_connect.py::test_a_batch_pipeline_runs_on_a_connect_server_of":
        "a batch pipeline through a Connect server of the cluster (64 s with the server's "
        "start); the core suite runs the cluster on classic Spark and every model test on a "
        "Connect server, and make test-connect runs this",
    "job_server/test_job_server.py::test_project_pipeline_gives_the_direct_runners_output":
        "a project pipeline through the job server against the DirectRunner (18 s): the core "
        "suite runs Beam's wordcount and TestStream panes through it",
    "job_server/test_job_server.py::test_a_failing_job_reports_the_users_error": "a failing "
        "job through the job server (17 s): the core suite checks the user's error through "
        "the runner, and the job server's state stream",
    "job_server/test_job_server.py::test_jobs_run_side_by_side_and_cancel_stops_one": "two "
        "jobs side by side on the job server, one cancelled (11 s): the core suite cancels a "
        "streaming job through it",
    "job_server/test_job_server.py::test_beam_wordcount_runs_on_the_job_server[BeamSparkRunner]":
        "Beam's wordcount through the job server named as Beam's Spark runner (6 s): the "
        "core suite runs it through the PortableRunner",
    "pipelines/test_cli.py::test_sensor_average_count_policy_replays_a_file": "sensor_average "
        "from its command line (9 s): the core suite runs the pipeline in-process and "
        "team_scores from its command line",
    "pipelines/test_cli.py::test_page_views_reads_a_generated_file": "page_views from its "
        "command line (6 s): the core suite runs the pipeline in-process",
    "state/test_storage_faults.py::test_a_job_resumed_on_a_corrupt_delta": "a job resumed "
        "on a delta with a flipped byte (18 s): the core suite refuses flipped deltas and "
        "snapshots where a store is rebuilt, and the error's way to the driver is the same",
    "state/test_storage_faults.py::test_a_full_checkpoint_location": "a job whose "
        "checkpoint location (a tmpfs) fills, and its restart (25 s): the core suite fills "
        "an executor's disk under a store and runs a job through object-store faults",
    "state/test_rescale.py::test_a_driver_killed_during_a_resplit": "a driver killed "
        "while it re-splits a checkpoint's state, resumed both ways (70 s): the core suite "
        "re-splits to more and fewer partitions and resumes from the old layout's files",
    "cluster/test_spark_cluster_spreading.py::test_key_partitions_spread_onto_a_worker_that"
    "_joins_mid_stream": "a worker joining a keyed job on the cluster (95 s, 120 s with the "
        "worker's restart): the core suite unit-tests the choice of partitions and the "
        "executors' names, and runs keyed jobs on the cluster through a lost worker",
    "cluster/test_spark_cluster_spreading.py::test_key_partitions_spread_onto_a_worker_that"
    "_joins_a_connect_server": "a worker joining a keyed job through a Connect server of the "
        "cluster (150 s with the server's start): the core suite joins one on classic Spark, "
        "and unit-tests the choice of partitions both backends share",
    "cluster/test_spark_cluster_paths.py::": "relative paths from a driver on the two-worker "
        "cluster, in a directory its workers do not see and in one they do (~40 s with the "
        "cluster's start): the core suite runs the paths' checks in-process, and relative "
        "paths after a chdir on classic Spark and Spark Connect",
    "runner/test_spark_ui_names.py::": "Beam's step names read back from the event log of a "
        "run in a driver of its own (25 s): the core suite runs the names' documented "
        "examples (stage_labels, replay_names)",
    "pipelines/test_bench_smoke.py::test_parse_filter_project_files_are_written_once_and"
    "_removed": "the benchmark's bid files written once and removed, through its command "
        "line (12 s): the core suite checks the workload's answer on RDDs and the "
        "DirectRunner",
    "job_server/test_job_server_artifacts.py::test_the_main_session_of_the_submitting_script":
        "a submitting script's main session through the job server (15 s): the core suite "
        "ships a script's main session to a Connect server, and staged packages through "
        "the job server",
    "launcher/test_launcher.py::test_a_failing_pipeline_exits_non_zero_with_the_users_exception"
    "[SparkRunner]": "a user's failing pipeline file on the SparkRunner through the launcher "
        "(a driver of its own: 7 s, 22 s on a loaded machine): the core suite fails one on "
        "the DirectRunner through it (the launcher's part), and the runner's failures carry "
        "the user's error (tests/runner)",
    "launcher/test_testing_kit.py::test_a_users_teststream_test_runs_on_the_direct_runner_and":
        "a user's TestStream test file, right and wrong, through the kit in a pytest of its "
        "own (16 s, 25 s loaded): CI's library path runs the same file through the kit "
        "after make test, and every model test runs on the kit's fixtures in make test",
    "launcher/test_testing_kit.py::test_a_users_teststream_test_runs_on_spark_connect_when":
        "a user's TestStream test through the kit on a Connect server of its own (32 s, the "
        "server's start most of it): the core suite runs the kit's SparkConnect runner on its "
        "shared server (every model test) and the user's file on the DirectRunner and "
        "classic Spark",
    "docs/test_doc_examples.py::test_every_example_of_a_page_runs": "the documentation's "
        "slow examples, page by page (make run, a Spark cluster, a Spark Connect server, "
        "Kafka, the jobs' command lines: minutes each): the core suite runs the fast examples "
        "of every page, and the parts the slow ones show have tests of their own; make "
        "test-docs runs them",
    "launcher/test_thin_client.py::": "the project's wheel installed into a new virtualenv "
        "beside PySpark's thin client, then pipelines on the suite's Connect server "
        "(38 s with the server's start; pip installs ~40 wheels): the core suite runs a "
        "pipeline through the launcher with --spark_remote and the active-session case in "
        "process",
}

#: Node-id prefixes of tests whose Spark Connect runs are outside the core suite, and why.
CONNECT_EXTENDED: Dict[str, str] = {
    "state/test_rescale.py::": "a job re-split into 8 and 2 partitions again on Connect "
        "(45 s): the re-split is one Spark job of the same datasets on both backends, and "
        "the core suite runs it on classic",
    "kafka/test_kafka_event_time.py::": "the Kafka reader's event-time policies again on "
        "Connect (~50 s): the connector's code is the same on both backends, and the core "
        "suite writes keyed records to Kafka and reads them back on Connect",
    "kafka/test_kafka_read.py::": "the Kafka reader's bounded reads and record metadata again "
        "on Connect (~65 s): the connector's code is the same on both backends, and the core "
        "suite writes keyed records to Kafka and reads them back on Connect",
    "kafka/test_team_scores_kafka.py::": "team_scores on Kafka again on Connect (20 s): the "
        "core suite runs it on classic Spark, every model test on Connect, and writes and "
        "reads Kafka on Connect",
    "kafka/test_kafka_recovery.py::test_a_job_that_fails_and_is_rerun_with_the_same_group":
        "a failed Kafka job rerun with its consumer group again on Connect (~30 s): the "
        "group's offsets are committed by the same connector code on both backends, and the "
        "core suite runs it on classic Spark",
}

#: Node-id prefixes of the tests that kill or restart a process (marker ``faults``).
FAULTS: Tuple[str, ...] = (
    "cluster/test_spark_cluster_streaming.py::test_a_job_killed_and_restarted",
    "cluster/test_spark_cluster_streaming.py::test_a_lost_worker_under",
    "cluster/test_spark_cluster_streaming.py::test_a_keyed_streaming_job_keeps_its_stores_and"
    "_survives_a_lost_worker",
    "cluster/test_spark_cluster_connect.py::test_a_keyed_streaming_job_on_connect",
    "cluster/test_spark_cluster_connect.py::test_a_lost_worker_under",
    "kafka/test_kafka_restart.py::",
    "kafka/test_kafka_faults.py::",
    "kafka/test_kafka_write.py::test_a_broker_gone_in_the_middle_of_a_bundle",
    "kafka/test_kafka_recovery.py::test_records_written_across_a_broker_restart",
    "state/test_spark_streaming_checkpoint.py::test_killed_driver_resumes",
    "state/test_storage_faults.py::",
    "state/test_rescale.py::test_a_driver_killed_during_a_resplit",
)


def scope() -> str:
    """``core`` (``make test``) or ``all`` (every test: a bare ``pytest``)."""
    value = os.environ.get("BEAM_TEST_SCOPE", "all")
    if value not in ("core", "all"):
        raise pytest.UsageError(f"BEAM_TEST_SCOPE={value!r}: use core or all")
    return value


def is_extended(node: str, area: Optional[str], runner: Optional[str],
                broker: Optional[str]) -> Optional[str]:
    """Why the test ``node`` (its id relative to tests/) is outside the core suite, or None."""
    if broker == "tansu":
        return "the second embedded broker"
    if runner == "SparkConnect" and area not in CONNECT_CORE_AREAS:
        return ("a Spark Connect run outside tests/model, tests/conformance, tests/streaming, "
                "tests/state and tests/kafka")
    if runner == "SparkConnect":
        for prefix, reason in CONNECT_EXTENDED.items():
            if node.startswith(prefix):
                return reason
    if runner == "DirectRunner" and area not in DIRECT_CORE_AREAS:
        return "a DirectRunner run outside tests/model and tests/conformance"
    for prefix, reason in EXTENDED.items():
        if node.startswith(prefix):
            return reason
    return None


#: The node ids (relative to tests/) this process collected, before any was deselected.
COLLECTED: List[str] = []


def select(config, items, area_of) -> None:
    """Mark ``extended`` and ``faults`` tests; in the core scope, deselect the extended."""
    core, kept, left_out = scope() == "core", [], []
    COLLECTED[:] = [item.nodeid.split("tests/", 1)[-1] for item in items]
    for item in items:
        node = item.nodeid.split("tests/", 1)[-1]
        params = getattr(getattr(item, "callspec", None), "params", {})
        if node.startswith(FAULTS):
            item.add_marker(pytest.mark.faults)
        reason = is_extended(node, area_of(item.path), params.get("runner_name"),
                             params.get("kafka_broker_kind"))
        if reason is not None:
            item.add_marker(pytest.mark.extended(reason=reason))
        (left_out if core and reason is not None else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
