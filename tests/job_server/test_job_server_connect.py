"""The job server on a Spark Connect session: portable clients' pipelines run on Connect.

``python -m runners.spark.job_server --spark_remote sc://...`` serves Beam's Job API and runs
every job on a session of the Connect server (the test process's own, ``connect_fixtures``);
Beam's own wordcount, submitted through it, writes what it writes through the classic job
server (``test_job_server.job_endpoint``).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from connect_fixtures import shared_connect_server
from test_job_server import job_endpoint, read_lines, running_job_server  # noqa: F401

pytestmark = pytest.mark.timeout(900)

TEXT = "\n".join(f"line {number} of words {number % 7} and more words {number % 3}"
                 for number in range(300))


def _wordcount(endpoint: str, source, output: str, directory) -> list:
    completed = subprocess.run(
        [sys.executable, "-m", "apache_beam.examples.wordcount", f"--input={source}",
         f"--output={output}", f"--job_endpoint={endpoint}", "--runner=PortableRunner",
         "--environment_type=LOOPBACK"],
        cwd=str(directory), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Job state changed to DONE" in completed.stderr
    return sorted(read_lines(output))


def test_beams_wordcount_through_a_job_server_on_connect_equals_classics(job_endpoint,
                                                                         tmp_path):
    source = tmp_path / "words.txt"
    source.write_text(TEXT)
    url = shared_connect_server().url
    with running_job_server(str(tmp_path / "server.log"),
                            spark=("--spark_remote", url)) as connect_endpoint:
        on_connect = _wordcount(connect_endpoint, source, str(tmp_path / "connect"), tmp_path)
    on_classic = _wordcount(job_endpoint, source, str(tmp_path / "classic"), tmp_path)
    assert on_connect == on_classic
    assert "words: 600" in on_connect and len(on_connect) == 305
