"""``make run``: a live leaderboard of team scores, from Kafka, on Spark, for a bounded time.

``python -m pipelines.live --duration 60`` starts, on loopback, and stops again:

1. an embedded Kafka-protocol broker (:mod:`services.broker`; or ``--bootstrap_servers`` to
   use your own Kafka) with three fresh topics: events (4 partitions), panes, dead letters;
2. a producer (a thread here) that sends seeded game events (:mod:`pipelines.generator`) at
   their arrival times: event time is *now*, most arrive a second or so later and out of
   order, a few are held back for many seconds (late data), a few are malformed;
3. the job, ``python -m pipelines.team_scores --source kafka`` on the SparkRunner in
   streaming (wall-clock micro-batches of ``--batch_interval_seconds``), as a child process
   that reads the events topic and writes every pane to the panes topic;
4. a consumer of the panes topic (a thread) that feeds the live leaderboard
   (:mod:`pipelines.live.console`), printed under a progress line read from the job's
   ``--streaming_report``.

The job streams for ``--duration`` seconds after its first micro-batch (Spark's start-up
comes first) and at least :data:`MIN_BATCHES` batches, then gets SIGINT, on which it cancels its run and exits; Ctrl-C (SIGINT) ends
the run early the same clean way. Whatever of the job still runs after a grace period (its
Spark JVM, its Python workers: all PIDs found below it) gets SIGTERM, then SIGKILL; the
broker is stopped by its PID. The summary lists the PIDs started and
that none is left. ``--plot FILE.png`` draws the pane diagram of what was seen and
``FILE-throughput.png`` (events per second and watermark lag per batch).

Run it::

    make run                    # about a minute
    make run DURATION=20
    python -m pipelines.live --duration 30 --plot out/live.png --rate 40
    python -m pipelines.live --spark_master_url spark://127.0.0.1:7077   # a Spark cluster
    python -m pipelines.live --connect          # on a Spark Connect server started for the run
    make run RUN_ARGS=--connect
    python -m pipelines.live --spark_remote sc://127.0.0.1:15002        # your Connect server

With ``--connect`` a Spark Connect server (``local[2]``, from pyspark's jars:
:mod:`services.connect_server`) is started for the run and stopped by its PID at the end;
the job is its client, with no SparkContext, as on Databricks serverless.

Options the orchestrator does not know go to the job (``python -m pipelines.team_scores``);
it runs with ``--spark_parallelism 1`` unless given another (the demo's rate fits one partition).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import List, Optional, Sequence

from pipelines.live.console import (LiveView, RunSummary, format_summary, median,
                                    pane_latencies, progress_line)
from pipelines.live.kafka_topics import PaneReader, Producer, count_records, create_topics
from pipelines.live.report import BatchReport, ReportTail

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4
#: Seconds Spark and the job get to start before the run is given up.
STARTUP_SECONDS = 240.0
#: Batches a run waits for, however long they take (the first ones read the backlog and
#: start the workers; panes need a batch after the one that read their data).
MIN_BATCHES = 3
#: Seconds a stopping job gets after SIGINT before SIGTERM (then SIGKILL, see processes).
INTERRUPT_GRACE_SECONDS = 20.0


def job_command(args: argparse.Namespace, servers: str, topics: Sequence[str],
                report_path: str) -> List[str]:
    """The team_scores command line the run starts (streaming, on ``args.runner``)."""
    events, panes, dead_letters = topics
    job_options = list(getattr(args, "job_options", []))
    if not any(option.startswith("--spark_parallelism") for option in job_options):
        # Each partition of a shuffle is a Python task of ~0.1-0.2 s however few its records;
        # the demo's rate fits one: measured, a batch took 2.6-3.2 s with 2, 1.5-1.9 s with 1.
        job_options += ["--spark_parallelism", "1"]
    return [sys.executable, "-m", "pipelines.team_scores", "--source", "kafka",
            "--bootstrap_servers", servers, "--input_topic", events, "--output_topic", panes,
            "--dead_letter_topic", dead_letters, "--window_seconds", f"{args.window_seconds:g}",
            "--early_seconds", f"{args.early_seconds:g}",
            "--allowed_lateness", f"{args.allowed_lateness:g}", "--idle_timeout_seconds", "5",
            "--runner", args.runner, "--streaming",
            "--batch_interval_seconds", f"{args.batch_interval_seconds:g}",
            "--streaming_report", report_path, "--spark_conf", "spark.ui.enabled=false",
            *job_options]


class _Screen:
    """Redraws in place on a terminal; elsewhere (CI, a pipe) prints panes and progress lines."""

    def __init__(self, stream=sys.stdout) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last_progress = 0.0

    def show(self, view: LiveView, progress: str, new_panes: Sequence[dict], changed: bool) -> None:
        if self._tty:
            if changed or time.monotonic() - self._last_progress >= 0.5:
                self._stream.write("\x1b[H\x1b[2J" + view.render(progress))
                self._stream.flush()
                self._last_progress = time.monotonic()
            return
        from pipelines.output import format_pane

        for pane in new_panes:
            print("pane  " + format_pane(pane), file=self._stream, flush=True)
        if time.monotonic() - self._last_progress >= 5.0:
            print(progress, file=self._stream, flush=True)
            self._last_progress = time.monotonic()


def _progress(view: LiveView, started: float, producer: Producer,
              last: Optional[BatchReport], batches: int) -> str:
    elapsed = time.time() - started
    produced = len(producer.sent)
    window = [sent for sent, _ in producer.sent[-200:] if sent >= time.time() - 5]
    return progress_line(elapsed=elapsed, batches=batches if last else None, produced=produced,
                         produced_rate=len(window) / 5.0, read_rate=last.rate if last else None,
                         watermark=last.watermark if last else None,
                         lag=last.watermark_age if last else None, panes=view.panes_by_timing)


def _stop_job(job: subprocess.Popen, reaped: List[int], job_pids: List[int]) -> None:
    """SIGINT the job (it cancels its run and exits), then SIGTERM / SIGKILL whatever of it
    (its Spark JVM, Python workers) still runs after the grace period."""
    from services.processes import descendants, terminate

    if job.poll() is None:
        members = [job.pid] + descendants([job.pid])
        job_pids.extend(pid for pid in members if pid not in job_pids)
        reaped.extend(pid for pid in members if pid not in reaped)
        try:
            job.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            job.wait(timeout=INTERRUPT_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    # The job's own processes only (the broker's PID is in the run's list too).
    members = [pid for pid in reaped if pid in job_pids]
    terminate(members, reap={job.pid: job})


def run(args: argparse.Namespace) -> RunSummary:
    """One live run (see the module docstring); returns its summary."""
    from services.broker import EmbeddedBroker
    from services.processes import descendants, process_alive

    run_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="live-run-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    stopped_by = ["the end of the run"]
    interrupted = threading.Event()

    def on_interrupt(_signal, _frame):
        stopped_by[0] = "Ctrl-C (SIGINT)"
        interrupted.set()

    previous_handler = signal.signal(signal.SIGINT, on_interrupt)
    broker = connect_server = None
    pids: List[int] = []
    job_pids: List[int] = []
    stop = threading.Event()
    producer = reader = job = None
    started = time.time()
    try:
        servers = args.bootstrap_servers
        if servers is None:
            broker = EmbeddedBroker(kind=args.broker).start()
            servers = broker.bootstrap_servers
            pids.append(broker.pid)
            print(f"live: {args.broker} broker PID {broker.pid} on {servers}", flush=True)
        suffix = uuid.uuid4().hex[:8]
        topics = [f"live-events-{suffix}", f"live-panes-{suffix}", f"live-dead-letters-{suffix}"]
        create_topics(servers, topics, PARTITIONS)
        report_path = str(run_dir / "streaming-report.jsonl")
        command = job_command(args, servers, topics, report_path)
        if args.connect:
            from services.connect_server import ConnectServer

            connect_server = ConnectServer(state_dir=run_dir / "connect-server").start()
            pids.append(connect_server.pid)
            command += ["--spark_remote", connect_server.url]
            print(f"live: Spark Connect server PID {connect_server.pid} at {connect_server.url} "
                  f"(started in {connect_server.startup_seconds:.0f} s)", flush=True)
        with open(run_dir / "job.log", "w") as log:
            job = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=dict(os.environ, PYTHONPATH=str(REPO)))
        pids.append(job.pid)
        job_pids.append(job.pid)
        print(f"live: team_scores on the {args.runner} PID {job.pid} (log {run_dir / 'job.log'})",
              flush=True)
        producer = Producer(servers, topics[0], rate=args.rate, seed=args.seed,
                            seconds=args.duration + STARTUP_SECONDS, stop=stop)
        reader = PaneReader(servers, topics[1], stop)
        producer.start()
        reader.start()
        view, screen, tail = LiveView(windows=args.windows, top=args.top), _Screen(), ReportTail(report_path)
        reports: List[BatchReport] = []
        deadline = time.time() + args.duration + STARTUP_SECONDS
        last_scan = 0.0
        while job.poll() is None and not interrupted.is_set() and time.time() < deadline:
            if time.monotonic() - last_scan >= 2.0:  # `ps` costs: every 2 s is enough
                last_scan = time.monotonic()
                for pid in descendants([job.pid]):
                    if pid not in job_pids:
                        job_pids.append(pid)
                        pids.append(pid)
            reports.extend(tail.read())
            if (len(reports) >= MIN_BATCHES and time.time() - reports[0].time >= args.duration):
                break  # --duration seconds of streaming since the first batch
            new = [pane for _, pane in reader.take()]
            changed = any([view.add_pane(pane) for pane in new])
            screen.show(view, _progress(view, started, producer, reports[-1] if reports else None,
                                        len(reports)), new, changed)
            interrupted.wait(0.5)
        if job.poll() is None and not interrupted.is_set() and not reports:
            stopped_by[0] = f"no first batch within {STARTUP_SECONDS:.0f} s"
        _stop_job(job, pids, job_pids)
        time.sleep(1.0)  # the last panes reach the reader
        reports.extend(tail.read())
        for _, pane in reader.take():
            view.add_pane(pane)
        stop.set()
        producer.join(timeout=30)
        reader.join(timeout=30)
        try:
            dead_letters: Optional[int] = count_records(servers, topics[2])
        except Exception as error:  # the count is a figure of the summary, not the run
            print(f"live: could not count dead letters: {error}", file=sys.stderr)
            dead_letters = None
        log_text = (run_dir / "job.log").read_text(errors="replace")
        if job.returncode != 0 and stopped_by[0] == "the end of the run":
            print(f"live: the job failed (exit code {job.returncode}); its log ends:\n"
                  + log_text[-3000:], file=sys.stderr)
            stopped_by[0] = f"a job failure (exit code {job.returncode})"
        print("\n" + view.render(_progress(view, started, producer,
                                            reports[-1] if reports else None, len(reports))))
        if args.plot:
            from pipelines.live.pictures import draw_live_pictures

            files = draw_live_pictures(args.plot, producer, reader.seen, reports, started)
            print(f"live: pictures: {', '.join(files)}", flush=True)
    finally:
        stop.set()
        if job is not None and job.poll() is None:
            _stop_job(job, pids, job_pids)
        if connect_server is not None:
            connect_server.stop()
        if broker is not None:
            broker.stop()
        signal.signal(signal.SIGINT, previous_handler)
    first, last = (reports[0], reports[-1]) if len(reports) > 1 else (None, None)
    read_rate = (sum(r.input_elements for r in reports[1:]) / (last.time - first.time)
                 if first and last.time > first.time else None)
    malformed = sum(1 for _, record in producer.sent if _is_malformed(record))
    time.sleep(0.2)
    first_pane = (reader.seen[0][0] - (reports[0].time - reports[0].millis / 1000)
                  if reports and reader.seen else None)
    return RunSummary(
        seconds=time.time() - started, produced=len(producer.sent), malformed_sent=malformed,
        panes_by_timing=dict(view.panes_by_timing), dead_letters=dead_letters,
        dropped=sum(1 for line in log_text.splitlines() if line.startswith("dropped: ")),
        batches=len(reports), read_rate=read_rate, totals=view.totals(), pids=pids,
        pids_left=[pid for pid in pids if process_alive(pid)], stopped_by=stopped_by[0],
        batch_millis_p50=median([report.millis for report in reports[1:]]),
        refresh_seconds_p50=median([later.time - earlier.time
                                    for earlier, later in zip(reports[1:], reports[2:])]),
        first_pane_seconds=first_pane,
        pane_latency_seconds_p50=median(pane_latencies(
            _valid_events(producer.sent, args.window_seconds), reader.seen)))


def _valid_events(sent: Sequence, window_seconds: float) -> List:
    """(time sent, team, window start, score) of every well-formed event sent."""
    events = []
    for sent_at, record in sent:
        if not _is_malformed(record):
            timestamp = float(record.fields["timestamp"])
            start = timestamp - timestamp % window_seconds
            events.append((sent_at, str(record.fields["team"]), start, record.fields["score"]))
    return events


def _is_malformed(record) -> bool:
    from pipelines.events import GameEvent
    from pipelines.pane_diagram import typed_elements

    return not list(typed_elements(GameEvent, lambda event: [event])(record))


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.live",
        description="A live leaderboard of team scores: Kafka in, team_scores on Spark "
        "(streaming), Kafka out, for a bounded time. Ctrl-C stops it cleanly.")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds the job streams (default: 60; Spark starts first)")
    parser.add_argument("--runner", default="SparkRunner",
                        help="the job's runner (default: SparkRunner, in streaming; Beam's "
                        "DirectRunner holds a Kafka read's watermark until the read ends, so "
                        "it shows nothing live)")
    parser.add_argument("--broker", default=os.environ.get("KAFKA_BROKER", "noida"),
                        choices=("noida", "tansu"), help="embedded broker (default: noida)")
    parser.add_argument("--bootstrap_servers", help="use this Kafka instead of an embedded broker")
    parser.add_argument("--rate", type=float, default=20.0, help="events per second (default: 20)")
    parser.add_argument("--seed", type=int, default=42, help="generator seed (default: 42)")
    parser.add_argument("--window_seconds", type=float, default=10.0,
                        help="event-time window size (default: 10)")
    parser.add_argument("--early_seconds", type=float, default=2.0,
                        help="early panes every this many seconds (default: 2)")
    parser.add_argument("--allowed_lateness", type=float, default=20.0,
                        help="late data within this many seconds updates a window (default: 20)")
    parser.add_argument("--batch_interval_seconds", type=float, default=1.0,
                        help="seconds between Spark micro-batches (default: 1)")
    parser.add_argument("--windows", type=int, default=3, help="windows on screen (default: 3)")
    parser.add_argument("--top", type=int, default=4, help="teams per window (default: 4)")
    parser.add_argument("--plot", metavar="FILE.png",
                        help="at the end, draw the pane diagram to FILE and throughput and "
                        "watermark lag to FILE-throughput")
    parser.add_argument("--work_dir", help="where the job's log and report go (default: a temp dir)")
    parser.add_argument("--connect", action="store_true",
                        help="run the job on a Spark Connect server started for the run "
                        "(local[2]; the job is its client, with no SparkContext)")
    # Anything else is the job's (e.g. --spark_master_url spark://..., --spark_conf k=v).
    args, args.job_options = parser.parse_known_args(argv)
    for name in ("duration", "rate", "window_seconds", "batch_interval_seconds"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name}={getattr(args, name)} must be greater than 0")
    for name in ("early_seconds", "allowed_lateness"):
        if getattr(args, name) < 0:
            parser.error(f"--{name}={getattr(args, name)} must not be negative")
    if args.connect:
        chosen = [option.split("=", 1)[0] for option in args.job_options
                  if option.split("=", 1)[0] in ("--spark_remote", "--spark_master_url")]
        if args.runner != "SparkRunner" or chosen:
            parser.error("--connect starts a Spark Connect server for the SparkRunner: drop "
                         f"{' and '.join(chosen) or '--runner ' + args.runner}, or --connect")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point: run, print the summary; exit code 0 unless the job failed."""
    import logging

    # The broker's clients log every reconnect, Beam's import an optional GCP client: the
    # run reports what matters itself (and the job's own log keeps everything).
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    logging.getLogger().setLevel(logging.ERROR)
    args = _parse_args(argv)
    summary = run(args)
    print(format_summary(summary, top=args.top), flush=True)
    return 1 if summary.stopped_by.startswith("a job failure") or summary.pids_left else 0

