"""``make run`` in CI: ``python -m pipelines.live`` end to end, then its summary checked.

Two runs of the real thing (embedded broker, producer, team_scores on the SparkRunner in
streaming, leaderboard consumer), each a child process:

* a short run: it ends by itself; the summary's figures must hold together (events were
  produced, panes were seen and add up by timing, dead letters come only from malformed
  events), both pictures are real PNGs, and every process it started is gone;
* a run interrupted with SIGINT (Ctrl-C) once the job's Spark JVM runs: it stops cleanly,
  says so in its summary, and leaves no process behind (the JVM and Python workers included).

Nothing is timed: the timeouts only keep a hung run from hanging the suite.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from services.processes import process_alive
from project import PYTHON, REPO

#: A hung run fails the test after this long (a loaded 2-core machine runs slow batches).
RUN_TIMEOUT = 900


def _live(tmp_path: Path, *arguments: str) -> subprocess.Popen:
    log = open(tmp_path / "live.out", "w")
    return subprocess.Popen(
        [PYTHON, "-m", "pipelines.live", "--work_dir", str(tmp_path / "work"), *arguments],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)))


def _summary(output: str) -> dict:
    """The figures of the summary block at the end of the output."""
    text = output[output.rindex("summary (stopped by"):]

    def number(pattern: str):
        return re.search(pattern, text)

    produced = number(r"events produced:\s+(\d+) \((\d+) malformed")
    panes = number(r"panes:\s+(\d+) \((\d+) early, (\d+) on time, (\d+) late\)")
    dead = number(r"dead letters:\s+(\d+|unknown)")
    batches = number(r"batches:\s+(\d+)")
    processes = number(r"processes started: ([\d, ]+); still running: (.*)")
    assert all((produced, panes, dead, batches, processes)), text
    return {
        "stopped_by": re.match(r"summary \(stopped by (.*), after", text).group(1),
        "produced": int(produced.group(1)), "malformed": int(produced.group(2)),
        "panes": int(panes.group(1)), "by_timing": [int(panes.group(i)) for i in (2, 3, 4)],
        "dead_letters": None if dead.group(1) == "unknown" else int(dead.group(1)),
        "batches": int(batches.group(1)),
        "pids": [int(pid) for pid in processes.group(1).split(", ")],
        "still_running": processes.group(2).strip(),
    }


def _finish(run: subprocess.Popen, tmp_path: Path) -> str:
    try:
        run.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        run.kill()
        run.wait()
        pytest.fail("the live run hung:\n" + (tmp_path / "live.out").read_text()[-4000:])
    return (tmp_path / "live.out").read_text(errors="replace")


def test_a_short_live_run_ends_by_itself_with_a_consistent_summary(tmp_path):
    plot = tmp_path / "live.png"
    output = _finish(_live(tmp_path, "--duration", "15", "--plot", str(plot)), tmp_path)
    summary = _summary(output)
    assert summary["stopped_by"] == "the end of the run", output[-4000:]
    assert summary["produced"] > 0 and summary["batches"] >= 3
    assert summary["panes"] > 0 and sum(summary["by_timing"]) == summary["panes"]
    assert summary["by_timing"][1] > 0, "windows closed: on-time panes"
    # Dead letters are the malformed events the job read (it may stop before reading all).
    assert summary["dead_letters"] is not None
    assert 0 <= summary["dead_letters"] <= summary["malformed"]
    assert len(summary["pids"]) >= 2 and summary["still_running"] == "none"
    assert not [pid for pid in summary["pids"] if process_alive(pid)]
    assert "batches " in output and "| panes:" in output  # the progress lines
    for path in (plot, tmp_path / "live-throughput.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    # The run's own log and report stay in --work_dir for a look afterwards.
    assert (tmp_path / "work" / "streaming-report.jsonl").exists()


def test_ctrl_c_stops_the_live_run_cleanly_with_a_summary(tmp_path):
    run = _live(tmp_path, "--duration", "600")
    # Interrupt once the job's Spark JVM runs (Spark logs its start), whatever it does then.
    job_log = tmp_path / "work" / "job.log"
    deadline = time.monotonic() + 240
    while not (job_log.exists() and "log4j" in job_log.read_text(errors="replace")):
        assert run.poll() is None and time.monotonic() < deadline, (
            (tmp_path / "live.out").read_text())
        time.sleep(0.5)
    time.sleep(5)
    run.send_signal(signal.SIGINT)
    output = _finish(run, tmp_path)
    summary = _summary(output)
    assert summary["stopped_by"] == "Ctrl-C (SIGINT)", output[-4000:]
    assert run.returncode == 0, output[-4000:]
    assert summary["still_running"] == "none" and len(summary["pids"]) > 2, output[-4000:]
    assert not [pid for pid in summary["pids"] if process_alive(pid)]
