"""A streaming job's key partitions spread onto an executor that joins the cluster
mid-stream (``runners/spark/backends/spreading.py``), on classic Spark, where the anchors'
preferred locations move exactly the partitions chosen, and through a Connect server
driving the same cluster, where a step's pointer is made anew: see
:func:`joined_worker_checks.check_key_partitions_spread_onto_a_worker_that_joins`."""

from __future__ import annotations

import joined_worker_checks as checks
from cluster_fixtures import CLUSTER_MARKS, runner_options
from spark_fixtures import spark_session  # noqa: F401 (fixture)
from test_spark_cluster_connect import cluster_connect_server  # noqa: F401 (fixture)

pytestmark = CLUSTER_MARKS


def test_key_partitions_spread_onto_a_worker_that_joins_mid_stream(
        two_workers, shared_dir, spark_session, tmp_path):
    checks.check_key_partitions_spread_onto_a_worker_that_joins(
        two_workers, shared_dir, spark_session, tmp_path, *runner_options(two_workers))


def test_key_partitions_spread_onto_a_worker_that_joins_a_connect_server(
        two_workers, cluster_connect_server, shared_dir, spark_session, tmp_path):
    """Connect cannot name an executor per partition: the moved partitions are those the
    new pointer's tasks dealt to the new executor (the best of a few deals), which may take
    more than two moves; and its look is a job, taken every ~25 s here (more batches)."""
    checks.check_key_partitions_spread_onto_a_worker_that_joins(
        two_workers, shared_dir, spark_session, tmp_path,
        f"--spark_remote={cluster_connect_server.url}", batches=30, moved_within=50,
        fewest_moves=False)
