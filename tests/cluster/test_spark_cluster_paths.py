"""Relative paths on a Spark cluster whose workers share only what a test names
(``cluster_fixtures``: each isolated worker has a ``/tmp`` of its own).

A driver that changed into a directory its workers do not see is refused before its job
starts, naming the path its pipeline reads; a relative pattern that turns up only in the
data fails the task that opens it, naming it; in a directory every worker sees, the same
pipelines read and write there (``relative_paths_job.py``).
"""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest

from cluster_fixtures import CLUSTER_MARKS, finish_driver, runner_options, start_driver
from project import PYTHON

pytestmark = CLUSTER_MARKS


def test_relative_paths_on_workers_that_see_the_drivers_directory_or_not(
        two_workers, shared_dir, tmp_path):
    if not two_workers.isolated:
        pytest.skip("the workers share this machine's /tmp: a directory they do not see "
                    "needs isolated workers (root and unshare)")
    private = tempfile.mkdtemp(prefix="beam-test-private-", dir="/tmp")
    log = tmp_path / "driver.log"
    try:
        driver = start_driver([PYTHON, "tests/cluster/relative_paths_job.py", private,
                               str(shared_dir), *runner_options(two_workers)], log)
        text = finish_driver(driver, log)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    results = json.loads(text.strip().splitlines()[-1])

    assert results["started"] == "DONE"
    named = results["private"]["named"]
    assert named.startswith("RelativePathError: "), named
    assert "'./in.txt'" in named and private in named and "out/words" in named
    in_the_data = results["private"]["in_the_data"]
    assert "RelativePathError" in in_the_data and "'./*.txt'" in in_the_data, in_the_data
    assert results["shared"] == {"named": "DONE", "in_the_data": "DONE"}
    for prefix in ("words", "from-data"):
        written = sorted((shared_dir / "out").glob(f"{prefix}*"))
        assert [path.read_text() for path in written if path.read_text()] == ["SHARED\n"], (
            prefix, written)
