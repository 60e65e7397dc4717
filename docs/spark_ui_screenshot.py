"""Screenshots of Spark's web UI during one micro-batch of a streaming Beam job.

What it runs: a small streaming team-scores job on the project's SparkRunner, on a local
SparkSession of its own (``local[2]``, everything bound to 127.0.0.1, the web UI *on*,
unlike the sessions the runner makes for local masters). The job:

    ReadGameEvents (a TestStream of GameEvents, one micro-batch per step of the stream)
    -> TeamScores (pipelines.team_scores: per-team sums in 60 s event-time windows, early
       panes every 10 s of processing time, late panes for 2 minutes, accumulating)
    -> PanesPerTeam (a stateful DoFn: numbers each team's panes)
    -> WriteScores (appends one JSON line per pane to a file in a temporary directory)

with ``--streaming``, ``--checkpoint_dir`` (a temporary directory) and
``--streaming_compact_rounds=false`` (so each fused stage and shuffle is a Spark stage of its
own, as on a cluster, rather than one task per round). A progress listener holds the run's
thread after micro-batch :data:`HELD_BATCH` (``--batch``) while the UI is up; the script
finds that micro-batch's Spark jobs (its job group, ``<run>-batch-000003``) with Spark's
REST API, takes the screenshots with headless Chromium, lets the run finish and stops the
session:

* ``docs/spark-ui-micro-batch.png``: the Jobs tab, its table paged to exactly the jobs of
  that micro-batch: the job id with its job group, and the description the runner gives
  (``Beam micro-batch 3: round 3: run TeamScores/TeamAndScore, ...``) above the job's last
  stage's name;
* ``docs/spark-ui-stages.png``: the stages that micro-batch ran, each named after the fused
  Beam steps it runs (``-> step`` when it ends in a shuffle for that step): the job's own
  page (with its job group) when the micro-batch ran one Spark job, else the Stages tab
  paged to them.

Re-run it from the repository's root (about a minute; needs Java, the project's virtualenv
and Chromium, e.g. ``apt-get install -y chromium``, which is not a project dependency)::

    .venv/bin/python docs/spark_ui_screenshot.py            # writes the two PNGs in docs/
    .venv/bin/python docs/spark_ui_screenshot.py --out_dir /tmp/shots --chromium chromium

Ports: everything listens on 127.0.0.1 only: Spark's UI on a port the OS reports free
(``spark.port.maxRetries=0``: that port or an error, never a neighbour), the driver and
block manager on ports the OS picks; Chromium opens none (no remote debugging) and reads
only the UI. Processes: it stops only what it started: a Chromium that hangs (over 120 s)
by the PID of the one it launched (and that PID's process group, its own helpers), and
the SparkSession it created, with ``session.stop()`` (which ends Spark's Python workers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import apache_beam as beam  # noqa: E402
from apache_beam.coders.coders import VarIntCoder  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402
from apache_beam.testing.test_stream import TestStream  # noqa: E402
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec  # noqa: E402
from apache_beam.transforms.window import TimestampedValue  # noqa: E402

from pipelines.events import GameEvent  # noqa: E402
from pipelines.team_scores import TeamScores  # noqa: E402

#: The micro-batch the screenshots show (0-based). Each event of a TestStream is a
#: micro-batch of its own (elements, processing time, watermark): 3 is the second batch of
#: game events, which run through every step (and update state the first batch wrote).
HELD_BATCH = 3
#: Browser window: wide enough for the stage names, short enough to stay under ~400 KB.
WINDOW = (1500, 1000)
#: Event time of the first window's start (2024-01-01 12:00:00 UTC).
T0 = 1704110400.0


def _free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _game_events() -> TestStream:
    """Game events: seven times a few events, processing time moving 10 s (early panes) and
    the watermark 15 s, then one late event. Each of these is a micro-batch of its own."""
    users = {"ann": "red", "bob": "blue", "cy": "red", "dee": "green", "eve": "blue"}
    stream = TestStream()
    for step in range(7):
        events = []
        for number, (user, team) in enumerate(users.items()):
            if (step + number) % 2:
                at = T0 + step * 15 + number
                events.append(TimestampedValue(GameEvent(user, team, 1 + number + step, at), at))
        stream = (stream.add_elements(events)
                  .advance_processing_time(10)
                  .advance_watermark_to(T0 + step * 15))
    late = GameEvent("bob", "blue", 7, T0 + 30)
    return (stream.add_elements([TimestampedValue(late, late.timestamp)])
            .advance_watermark_to_infinity())


class NumberPanes(beam.DoFn):
    """Numbers the panes of each team (a keyed state cell per team)."""

    PANES = ReadModifyWriteStateSpec("panes", VarIntCoder())

    def process(self, team_and_sum, window=beam.DoFn.WindowParam,
                pane=beam.DoFn.PaneInfoParam, panes=beam.DoFn.StateParam(PANES)):
        team, total = team_and_sum
        number = (panes.read() or 0) + 1
        panes.write(number)
        yield json.dumps({"team": team, "sum": total, "team_pane": number,
                          "window_start": float(window.start), "timing": str(pane.timing)})


class AppendTo(beam.DoFn):
    """Appends each line to a file (the job's sink)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, line):
        with open(self._path, "a", encoding="utf-8") as sink:
            sink.write(line + "\n")


def build(pipeline: beam.Pipeline, sink: str) -> None:
    _ = (pipeline
         | "ReadGameEvents" >> _game_events()
         | "TeamScores" >> TeamScores(window_seconds=60, early_seconds=10, allowed_lateness=120)
         | "PanesPerTeam" >> beam.ParDo(NumberPanes()).with_input_types(Tuple[str, int])
         | "WriteScores" >> beam.ParDo(AppendTo(sink)))


def spark_session(ui_port: int, app_name: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {
        "spark.master": "local[2]",
        "spark.app.name": app_name,
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
        "spark.port.maxRetries": "0",  # that port or fail, never a neighbour
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.python.daemon.module": "runners.spark.daemon",
        "spark.executorEnv.PYTHONPATH": str(REPO),
    }
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def batch_jobs(ui: str, batch: int) -> List[Dict[str, Any]]:
    """The Spark jobs of micro-batch ``batch``'s job group, from the UI's REST API."""
    app = _get_json(f"{ui}/api/v1/applications")[0]["id"]
    jobs = _get_json(f"{ui}/api/v1/applications/{app}/jobs")
    suffix = f"-batch-{batch:06d}"
    return [job for job in jobs if str(job.get("jobGroup", "")).endswith(suffix)]


def screenshot(chromium: str, url: str, out: Path, window=WINDOW) -> None:
    """A PNG of ``url`` by headless Chromium (a profile of its own, removed afterwards)."""
    profile = tempfile.mkdtemp(prefix="spark-ui-chromium-")
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
               "--disable-dev-shm-usage", "--disable-background-networking",
               "--disable-extensions", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}",
               "--virtual-time-budget=5000", f"--screenshot={out}", url]
    browser = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        _, errors = browser.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(browser.pid, signal.SIGKILL)  # the group of the browser this started
        browser.wait()
        raise RuntimeError(f"Chromium took more than 120 s on {url}")
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if browser.returncode != 0 or not out.exists():
        raise RuntimeError(f"Chromium failed on {url} (exit {browser.returncode}):\n"
                           f"{errors.decode(errors='replace')[-2000:]}")
    print(f"wrote {out} ({out.stat().st_size // 1024} KB) from {url}")


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", default=str(REPO / "docs"),
                        help="where the two PNGs are written (the checkout's docs/)")
    parser.add_argument("--chromium", default="chromium",
                        help="the Chromium to run: a command on the PATH or a path")
    parser.add_argument("--batch", type=int, default=HELD_BATCH,
                        help="the micro-batch to show (0-based)")
    args = parser.parse_args(argv)
    if not shutil.which(args.chromium):
        parser.error(f"{args.chromium}: not found (apt-get install -y chromium)")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    from apache_beam.runners.runner import PipelineState
    from runners.spark import SparkRunner

    session = spark_session(_free_loopback_port(), "team_scores on Beam")
    work = tempfile.mkdtemp(prefix="spark-ui-screenshot-")
    held, release = threading.Event(), threading.Event()

    def hold_after_batch(progress: Dict[str, Any]) -> None:
        print(f"micro-batch {progress['batch']}: {progress['source_elements']} events, "
              f"{progress['rounds']} rounds, {progress['spark_jobs']} Spark jobs, "
              f"{progress['millis']} ms")
        if progress["batch"] == args.batch:
            held.set()
            release.wait(300)

    try:
        ui = session.sparkContext.uiWebUrl.rstrip("/")
        print(f"Spark UI: {ui}")
        options = PipelineOptions([
            "--streaming", f"--checkpoint_dir={os.path.join(work, 'checkpoints')}",
            "--streaming_compact_rounds=false"])
        pipeline = beam.Pipeline(runner=SparkRunner(session, progress_listeners=[
            hold_after_batch]), options=options)
        build(pipeline, os.path.join(work, "scores.jsonl"))
        result = pipeline.run()
        try:
            if not held.wait(600):
                raise RuntimeError(f"micro-batch {args.batch} did not finish in 10 minutes")
            time.sleep(1)  # the UI's listener catches up with the last job's events
            jobs = batch_jobs(ui, args.batch)
            if not jobs:
                raise RuntimeError(f"no Spark job in micro-batch {args.batch}'s job group")
            print(f"micro-batch {args.batch}: Spark jobs {[job['jobId'] for job in jobs]}")
            for job in jobs:
                print(f"  job {job['jobId']}: {job.get('description')}\n"
                      f"    last stage: {job['name']}")
            # The Jobs tab, newest first, as many rows as the micro-batch has jobs: just its
            # own (the window as tall as that table needs).
            screenshot(args.chromium, f"{ui}/jobs/?completedJob.pageSize={len(jobs)}",
                       out_dir / "spark-ui-micro-batch.png",
                       window=(WINDOW[0], min(WINDOW[1], 600 + 90 * len(jobs))))
            if len(jobs) == 1:
                # The job's page: its job group (the micro-batch) and its stages.
                stages_url = f"{ui}/jobs/job/?id={jobs[0]['jobId']}"
            else:
                # The Stages tab, newest first, as many rows as the micro-batch ran stages.
                ran = sum(job["numCompletedStages"] for job in jobs)
                stages_url = (f"{ui}/stages/?completedStage.sort=Stage+Id"
                              f"&completedStage.desc=true&completedStage.pageSize={ran}")
            screenshot(args.chromium, stages_url, out_dir / "spark-ui-stages.png")
        finally:
            release.set()
            state = result.wait_until_finish()
            print(f"the job ended {state}")
        if state != PipelineState.DONE:
            raise RuntimeError(f"the job ended {state}, not DONE")
    finally:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
