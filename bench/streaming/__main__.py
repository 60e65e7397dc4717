"""``python -m bench.streaming``: the streaming SparkRunner against Spark Structured Streaming.

Four measurements in one run, on one SparkSession (``local[2]`` by default), each engine
on the same events (:mod:`bench.streaming.workloads`), each engine's final panes checked
against a plain Python reference (a difference fails the run):

1. **latency**: the keyed windowed sum with early and late firings (20 keys, 60 s windows,
   a pane every batch for open windows, late data) at 10k events a batch: p50 and p95 batch
   time of each engine, and their ratio; ours once more with ``--checkpoint_dir`` (keyed
   state durable at every batch, as Spark's query commits its RocksDB changelog every
   batch);
2. **throughput**: the same job at 100k events a batch: events per second;
3. **state scaling**: a new key per event, 10k events a batch, for 100 batches: state grows
   from 10k to 1M keys; the batch time along the way (a curve, and a PNG), the p50 of the
   first and of the last ten batches and their ratio, the p50, p99 and max over the whole
   run and max / p50 per engine (goal: max <= 2x p50), and the memory of the driver, the JVM
   and the Python workers at the end;
4. **cluster**: the latency workload, durable, on a Spark standalone cluster of
   ``--cluster-workers`` 1-core workers started here (each with its own disk where the
   machine allows: :mod:`services.cluster`), printed beside ``local[2]``;
5. **rescale**: on such a cluster, the state-scaling job holding ``--rescale-keys`` keys
   (1M) in 4 key partitions, resumed with ``--spark_parallelism=8``: the re-split's time,
   and the batch time before and after (:mod:`bench.streaming.rescale`).

Each of ours runs once more on Spark Connect (unless ``--no-connect``): on a Connect server
started here on the same master (``local[2]``), and for the cluster on a Connect server
driving the same cluster; the rows print beside classic's with their ratio.

Beam runs on the SparkRunner's streaming loop (:mod:`bench.streaming.beam`, a synthetic
unbounded source); Spark Structured Streaming runs its own DataFrame query over the same
events written to files (:mod:`bench.streaming.native`). Batch 0 of each run (workers start,
queries are planned) is not measured. With ``--warmup-runs N``, the latency
measurement first runs its workload N times on every engine, unmeasured (ours on classic
and on Connect, Spark's own query): a Spark Connect server started for the run plans each
micro-batch's query in code its JVM has not compiled yet, and its first runs are slower
(measured on 2 cores, consecutive runs of the latency workload on one new server: p50 314,
275, 243 (durable), 235 ms), which batch 0 alone does not absorb; a classic session warms
too (its first run's p50 230 ms, after one unmeasured run 185-192 ms). Each run
appends one JSON record to ``bench/results/streaming-<timestamp>.jsonl`` and draws
``streaming-scaling-<timestamp>.png``.

Examples::

    python -m bench.streaming                                  # everything (~10 min)
    python -m bench.streaming --only latency --latency-batches 8
    python -m bench.streaming --only latency --warmup-runs 2     # steady state, every engine
    python -m bench.streaming --only scaling                   # state scaling alone (~9 min)
    python -m bench.streaming --only scaling --no-connect --scaling-batches 12 \
        --scaling-events-per-batch 2000                        # a smoke run (~1 min)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench.report import MAX_OVER_P50_GOAL, RESULTS_DIR, batch_time_spread, percentile, write_jsonl
from bench.session import REPOSITORY_ROOT
from bench.streaming import beam as streaming_beam
from bench.streaming import native as streaming_native
from bench.streaming import rescale as streaming_rescale
from bench.streaming import workloads

MEASUREMENTS = ("latency", "throughput", "scaling", "cluster", "rescale")
#: Storage a cluster's workers share (each has a private /tmp when isolated).
CLUSTER_SHARED_ROOT = "/var/tmp"


def windowed_sum_batches(seed: int, events_per_batch: int, batches: int):
    for batch in range(batches):
        start = batch * events_per_batch
        yield [workloads.windowed_sum_event(seed, index)
               for index in range(start, start + events_per_batch)]


def scaling_batches(events_per_batch: int, batches: int):
    for batch in range(batches):
        start = batch * events_per_batch
        yield [workloads.scaling_event(index, batch)
               for index in range(start, start + events_per_batch)]


def _ours(run: Dict[str, Any], batches: int) -> Dict[str, Any]:
    """Figures of a Beam run from its per-batch report (batches 1.. that read events)."""
    lines = run["lines"]
    measured = [line["millis"] for line in lines[1:batches]]
    jobs = [line["spark_jobs"] for line in lines[1:batches]]
    return {"batch_millis_p50": percentile(measured, 0.5),
            "batch_millis_p95": percentile(measured, 0.95),
            "events_per_second": round(run["events_per_batch"] * len(measured)
                                       / (sum(measured) / 1000), 1),
            "spark_jobs_per_batch": round(sum(jobs) / len(jobs), 2),
            "first_batch_millis": lines[0]["millis"], "batches": len(lines),
            "seconds": round(run["seconds"], 1)}


def _native(run: Dict[str, Any], events_per_batch: int) -> Dict[str, Any]:
    measured = run["millis"][1:]
    return {"batch_millis_p50": percentile(measured, 0.5),
            "batch_millis_p95": percentile(measured, 0.95),
            "events_per_second": round(events_per_batch * len(measured)
                                       / (sum(measured) / 1000), 1),
            "first_batch_millis": run["millis"][0], "batches": len(run["millis"]),
            "seconds": round(run["seconds"], 1)}


def measure_on_connect(connect: Any, arguments: argparse.Namespace, events_per_batch: int,
                       batches: int, expected: Dict[Any, Any],
                       durable: bool) -> Dict[str, Any]:
    """Ours on the Connect ``session``: plain, or durable (state files every batch)."""
    with tempfile.TemporaryDirectory(prefix="bench-connect-",
                                     dir=arguments.shared_dir) as checkpoints:
        run = streaming_beam.run(
            connect, streaming_beam.windowed_sum, None, arguments.parallelism, arguments.shards,
            events_per_batch, batches, arguments.seed,
            checkpoint_dir=checkpoints if durable else None,
            panes_dir=_scratch(arguments, "connect-panes"))
    figures = _ours(run, batches)
    figures["agrees"] = run["panes"] == expected
    figures["stores_loaded"] = sum(sum(line.get("stores_loaded", {}).values())
                                   for line in run["lines"][1:batches])
    return figures


def measure_windowed_sum(session: Any, arguments: argparse.Namespace, events_per_batch: int,
                         batches: int, durable: bool = False,
                         connect: Any = None) -> Dict[str, Any]:
    """The windowed sum on both engines at ``events_per_batch``; with ``durable``, ours also
    with ``--checkpoint_dir`` (state files written at every batch). On a cluster master ours
    runs durable only (a cluster refuses keyed state without a checkpoint location)."""
    from runners.spark.options import is_local_master

    record: Dict[str, Any] = {"events_per_batch": events_per_batch}
    expected = None
    if is_local_master(arguments.master):
        ours = streaming_beam.run(session, streaming_beam.windowed_sum, arguments.master,
                                  arguments.parallelism, arguments.shards, events_per_batch,
                                  batches, arguments.seed, panes_dir=_scratch(arguments, "panes"))
        expected = workloads.windowed_sum_reference(arguments.seed, ours["events"])
        record.update(events=ours["events"], windows=len(expected),
                      beam_spark_runner=_ours(ours, batches))
        record["beam_spark_runner"]["agrees"] = ours["panes"] == expected
    if durable:
        with tempfile.TemporaryDirectory(prefix="bench-durable-",
                                         dir=arguments.shared_dir) as checkpoints:
            kept = streaming_beam.run(
                session, streaming_beam.windowed_sum, arguments.master, arguments.parallelism,
                arguments.shards, events_per_batch, batches, arguments.seed,
                checkpoint_dir=checkpoints, panes_dir=_scratch(arguments, "durable-panes"))
            state_files = _directory_bytes(os.path.join(checkpoints, "state"))
        if expected is None:
            expected = workloads.windowed_sum_reference(arguments.seed, kept["events"])
            record.update(events=kept["events"], windows=len(expected))
        record["beam_spark_runner_durable"] = _ours(kept, batches)
        record["beam_spark_runner_durable"]["agrees"] = kept["panes"] == expected
        record["beam_spark_runner_durable"]["state_files_bytes"] = state_files
        if "beam_spark_runner" in record:
            record["durable_over_plain_p50"] = round(
                record["beam_spark_runner_durable"]["batch_millis_p50"]
                / record["beam_spark_runner"]["batch_millis_p50"], 2)
    if connect is not None:
        record["beam_on_connect"] = measure_on_connect(connect, arguments, events_per_batch,
                                                       batches, expected, durable=False)
        record["connect_over_classic_p50"] = round(
            record["beam_on_connect"]["batch_millis_p50"]
            / record["beam_spark_runner"]["batch_millis_p50"], 2)
        if durable:
            record["beam_on_connect_durable"] = measure_on_connect(
                connect, arguments, events_per_batch, batches, expected, durable=True)
            record["connect_over_classic_durable_p50"] = round(
                record["beam_on_connect_durable"]["batch_millis_p50"]
                / record["beam_spark_runner_durable"]["batch_millis_p50"], 2)
    if arguments.beam_only:
        return record
    native = streaming_native.run(
        session, windowed_sum_batches(arguments.seed, events_per_batch, batches),
        workloads.WINDOW_SECONDS, workloads.ALLOWED_LATENESS + workloads.DISORDER_SECONDS,
        arguments.parallelism)
    record["spark_structured_streaming"] = _native(native, events_per_batch)
    record["spark_structured_streaming"]["agrees"] = native["latest"] == expected
    native_p50 = record["spark_structured_streaming"]["batch_millis_p50"]
    record["p50_ratio"] = round(record["beam_spark_runner"]["batch_millis_p50"] / native_p50, 2)
    if durable:
        record["durable_over_native_p50"] = round(
            record["beam_spark_runner_durable"]["batch_millis_p50"] / native_p50, 2)
    return record


def warm_up(session: Any, arguments: argparse.Namespace, connect: Any = None) -> None:
    """``--warmup-runs`` unmeasured runs of the latency workload on every engine the
    measurement times: ours on ``session`` and on ``connect``, Spark's own query."""
    from runners.spark.options import is_local_master

    ours = ([(session, arguments.master)] if is_local_master(arguments.master) else []) + (
        [(connect, None)] if connect is not None else [])
    for _ in range(arguments.warmup_runs):
        for engine, master in ours:
            streaming_beam.run(engine, streaming_beam.windowed_sum, master,
                               arguments.parallelism, arguments.shards,
                               arguments.events_per_batch, arguments.latency_batches,
                               arguments.seed)
        if not arguments.beam_only:
            streaming_native.run(
                session, windowed_sum_batches(arguments.seed, arguments.events_per_batch,
                                              arguments.latency_batches),
                workloads.WINDOW_SECONDS,
                workloads.ALLOWED_LATENESS + workloads.DISORDER_SECONDS, arguments.parallelism)


def _scratch(arguments: argparse.Namespace, name: str) -> Optional[str]:
    """A fresh directory for panes on the shared storage of a cluster run (None: the
    benchmark's own temporary directory)."""
    if not arguments.shared_dir:
        return None
    return tempfile.mkdtemp(prefix=f"{name}-", dir=arguments.shared_dir)


def measure_on_cluster(arguments: argparse.Namespace) -> Dict[str, Any]:
    """The latency workload (durable) on a standalone cluster started for it: a driver
    process of its own (this one holds the local session) runs ``--only latency`` there."""
    import shutil
    import subprocess

    from services.cluster import StandaloneCluster, isolation_available

    shared = tempfile.mkdtemp(prefix="bench-cluster-", dir=CLUSTER_SHARED_ROOT)
    try:
        cluster = StandaloneCluster(state_dir=os.path.join(shared, "cluster"),
                                    workers=arguments.cluster_workers, worker_cores=1,
                                    isolated=isolation_available())
        with cluster:
            output = os.path.join(shared, "record.json")
            settings = cluster.driver_conf()
            command = [sys.executable, "-m", "bench.streaming", "--only", "latency",
                       "--beam-only", "--no-connect", "--master", settings.pop("spark.master"),
                       "--parallelism", str(arguments.parallelism),
                       "--events-per-batch", str(arguments.events_per_batch),
                       "--latency-batches", str(arguments.latency_batches),
                       "--shards", str(arguments.shards), "--seed", str(arguments.seed),
                       "--shared-dir", shared, "--record", output,
                       *[f"--conf={key}={value}" for key, value in settings.items()]]
            subprocess.run(command, check=True, cwd=REPOSITORY_ROOT)
            with open(output, encoding="utf-8") as record:
                measured = json.load(record)["latency"]
            if arguments.connect:
                measured["beam_on_connect_durable"] = _latency_on_cluster_connect(
                    arguments, cluster, shared)
                measured["connect_over_classic_durable_p50"] = round(
                    measured["beam_on_connect_durable"]["batch_millis_p50"]
                    / measured["beam_spark_runner_durable"]["batch_millis_p50"], 2)
        measured.update(workers=arguments.cluster_workers, isolated=cluster.isolated)
        return measured
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _latency_on_cluster_connect(arguments: argparse.Namespace, cluster: Any,
                                shared: str) -> Dict[str, Any]:
    """The latency workload, durable, on a Connect server driving ``cluster`` (this process
    is its client; the classic driver has ended, so the cluster's cores are free)."""
    from bench.session import bench_connect_server

    settings = cluster.driver_conf()
    master = settings.pop("spark.master")
    server = bench_connect_server(master, arguments.parallelism, settings)
    session = None
    try:
        session = server.session()
        on_cluster = argparse.Namespace(**{**vars(arguments), "shared_dir": shared})
        events = (max(1, arguments.events_per_batch // arguments.shards) * arguments.shards
                  * arguments.latency_batches)
        expected = workloads.windowed_sum_reference(arguments.seed, events)
        return measure_on_connect(session, on_cluster, arguments.events_per_batch,
                                  arguments.latency_batches, expected, durable=True)
    finally:
        _stop_connect(session, server)


def _stop_connect(session: Any, server: Any) -> None:
    """The client session first: one left open on a stopped server keeps retrying its
    release, and the process does not exit (measured: a run hung after its last line)."""
    if session is not None:
        try:
            session.stop()
        except Exception:  # the server is what matters to stop; the session goes with it
            pass
    server.stop()


def scaling_on_connect(connect: Any, arguments: argparse.Namespace) -> Dict[str, Any]:
    """The state-scaling run on Connect (checkpointed as classic's; not resumed)."""
    per_batch, batches = arguments.scaling_events_per_batch, arguments.scaling_batches
    with tempfile.TemporaryDirectory(prefix="bench-connect-scaling-") as scratch:
        panes = os.path.join(scratch, "panes")
        os.makedirs(panes)
        run = streaming_beam.run(
            connect, streaming_beam.state_scaling, None, arguments.parallelism,
            arguments.shards, per_batch, batches, arguments.seed, drain=False,
            checkpoint_dir=os.path.join(scratch, "checkpoints"),
            checkpoint_interval=arguments.scaling_checkpoint_interval, panes_dir=panes)
    millis = [line["millis"] for line in run["lines"]]
    window = min(10, max(1, (batches - 1) // 2))
    expected = workloads.scaling_reference(run["events"])
    return {"millis": millis, "first_p50": percentile(millis[1:1 + window], 0.5),
            "last_p50": percentile(millis[-window:], 0.5),
            "whole_run": batch_time_spread(millis[1:]),
            "agrees": {key: total for (key, _), total in run["panes"].items()} == expected,
            "seconds": round(run["seconds"], 1)}


def measure_scaling(session: Any, arguments: argparse.Namespace,
                    connect: Any = None) -> Dict[str, Any]:
    """A new key per event: batch times as state grows, on both engines. Ours checkpoints
    every ``--scaling-checkpoint-interval`` batches (as Spark's query commits every batch);
    then a second driver resumes from that checkpoint for a few batches: the first of
    them rebuilds every partition's store from the checkpoint files.

    Besides the p50 of the first and last batches, each engine's ``*_whole_run`` (and the
    Connect run's ``whole_run``) holds :func:`bench.report.batch_time_spread` of batches
    1.. of the run (batch 0 is not measured; nor are the resumed driver's batches): p50,
    p99 and max (nearest rank), the slowest batch, max / p50 and whether it is within the
    goal ``max_over_p50_goal`` (max <= 2x p50)."""
    per_batch, batches = arguments.scaling_events_per_batch, arguments.scaling_batches
    resumed_batches = 3
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as scratch:
        checkpoints, panes = os.path.join(scratch, "checkpoints"), os.path.join(scratch, "panes")
        os.makedirs(panes)
        ours = streaming_beam.run(
            session, streaming_beam.state_scaling, arguments.master, arguments.parallelism,
            arguments.shards, per_batch, batches, arguments.seed, drain=False,
            source_batches=batches + resumed_batches, checkpoint_dir=checkpoints,
            checkpoint_interval=arguments.scaling_checkpoint_interval, panes_dir=panes)
        resumed = streaming_beam.run(
            session, streaming_beam.state_scaling, arguments.master, arguments.parallelism,
            arguments.shards, per_batch, resumed_batches, arguments.seed, drain=False,
            source_batches=batches + resumed_batches, checkpoint_dir=checkpoints,
            checkpoint_interval=arguments.scaling_checkpoint_interval, panes_dir=panes)
        state_on_disk = _directory_bytes(os.path.join(checkpoints, "state"))
    expected = workloads.scaling_reference(per_batch * (batches + resumed_batches))
    native = streaming_native.run(session, scaling_batches(per_batch, batches),
                                  workloads.SCALING_WINDOW_SECONDS,
                                  workloads.DISORDER_SECONDS, arguments.parallelism)
    ours_millis = [line["millis"] for line in ours["lines"]]
    keys = [sum(line["state_keys"].values()) for line in ours["lines"]]
    window = min(10, max(1, (batches - 1) // 2))
    first, last = ours_millis[1:1 + window], ours_millis[-window:]
    native_millis = native["millis"]
    interval = arguments.scaling_checkpoint_interval
    checkpointed = [ours_millis[index] for index in range(1, len(ours_millis))
                    if (index + 1) % interval == 0]
    record = {
        "events_per_batch": per_batch, "events": ours["events"], "batches": batches,
        "keys_held_at_end": keys[-1],
        "curve": [{"batch": index, "keys_held": keys[index], "beam_millis": ours_millis[index],
                   "native_millis": native_millis[index] if index < len(native_millis) else None,
                   "spark_jobs": ours["lines"][index]["spark_jobs"],
                   "touched_keys": sum(ours["lines"][index]["touched_keys"].values())}
                  for index in range(len(ours_millis))],
        "beam_first_p50": percentile(first, 0.5), "beam_last_p50": percentile(last, 0.5),
        "beam_first_keys": (keys[1], keys[window]), "beam_last_keys": (keys[-window], keys[-1]),
        "native_first_p50": percentile(native_millis[1:1 + window], 0.5),
        "native_last_p50": percentile(native_millis[-window:], 0.5),
        "beam_whole_run": batch_time_spread(ours_millis[1:]),
        "native_whole_run": batch_time_spread(native_millis[1:]),
        "max_over_p50_goal": MAX_OVER_P50_GOAL,
        "state_bytes_at_end": sum(ours["lines"][-1]["state_bytes"].values()),
        "peak_memory_mib": ours["peak_memory_mib"],
        "checkpoint_interval": interval,
        "checkpoint_batch_millis_p50": percentile(checkpointed, 0.5) if checkpointed else None,
        "checkpoint_files_bytes": state_on_disk,
        "resumed_millis": [line["millis"] for line in resumed["lines"]],
        "resumed_keys": [sum(line["state_keys"].values()) for line in resumed["lines"]],
        # every key's latest pane, from both drivers: one pane per key, its value
        "beam_agrees": {key: total for (key, _), total in resumed["panes"].items()} == expected,
        "native_agrees": {key: total for (key, _), total in native["latest"].items()}
        == workloads.scaling_reference(ours["events"]),
        "beam_seconds": round(ours["seconds"], 1), "native_seconds": round(native["seconds"], 1),
    }
    record["beam_last_over_first"] = round(record["beam_last_p50"] / record["beam_first_p50"], 2)
    record["beam_over_native_last"] = round(record["beam_last_p50"] / record["native_last_p50"], 2)
    if connect is not None:
        on_connect = record["beam_on_connect"] = scaling_on_connect(connect, arguments)
        on_connect["last_over_first"] = round(on_connect["last_p50"] / on_connect["first_p50"], 2)
        on_connect["last_over_classic_last"] = round(
            on_connect["last_p50"] / record["beam_last_p50"], 2)
        for point, connect_millis in zip(record["curve"], on_connect["millis"]):
            point["connect_millis"] = connect_millis
    return record


def _directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def plot_scaling(record: Dict[str, Any], path: Path) -> Optional[Path]:
    """Batch time against keys held, both engines (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return None
    curve = record["curve"][1:]
    figure, axes = pyplot.subplots(figsize=(8, 4.5))
    axes.plot([point["keys_held"] / 1000 for point in curve],
              [point["beam_millis"] for point in curve], label="Beam on our SparkRunner")
    on_connect = [point for point in curve if point.get("connect_millis") is not None]
    if on_connect:
        axes.plot([point["keys_held"] / 1000 for point in on_connect],
                  [point["connect_millis"] for point in on_connect],
                  label="Beam on our SparkRunner, Spark Connect")
    native = [point for point in curve if point["native_millis"] is not None]
    axes.plot([point["keys_held"] / 1000 for point in native],
              [point["native_millis"] for point in native],
              label="Spark Structured Streaming (RocksDB state store)")
    axes.set_xlabel("keys held (thousands)")
    axes.set_ylabel("batch time (ms)")
    axes.set_ylim(bottom=0)
    axes.set_title(f"A new key per event, {record['events_per_batch']:,} events a batch")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def run(arguments: argparse.Namespace) -> Dict[str, Any]:
    from bench.session import bench_session

    record: Dict[str, Any] = {"master": arguments.master, "parallelism": arguments.parallelism,
                              "cpus": os.cpu_count()}
    if set(arguments.only) <= {"cluster", "rescale"}:
        _measure_clusters(arguments, record)
        return record
    session = bench_session(arguments.master, arguments.parallelism, arguments.conf)
    server = connect = None
    if arguments.connect and set(arguments.only) - {"cluster"}:
        from bench.session import bench_connect_server

        server = bench_connect_server(arguments.master, arguments.parallelism)
        connect = server.session()
    try:
        if "latency" in arguments.only:
            warm_up(session, arguments, connect)
            record["latency"] = measure_windowed_sum(
                session, arguments, arguments.events_per_batch, arguments.latency_batches,
                durable=True, connect=connect)
            record["latency"]["warmup_runs"] = arguments.warmup_runs
        if "throughput" in arguments.only:
            record["throughput"] = measure_windowed_sum(
                session, arguments, arguments.throughput_events_per_batch,
                arguments.throughput_batches, connect=connect)
        if "scaling" in arguments.only:
            record["scaling"] = measure_scaling(session, arguments, connect)
    finally:
        if server is not None:
            _stop_connect(connect, server)
    if set(arguments.only) & {"cluster", "rescale"}:
        session.stop()  # the cluster's driver runs beside: this one's workers would compete
    _measure_clusters(arguments, record)
    return record


def _measure_clusters(arguments: argparse.Namespace, record: Dict[str, Any]) -> None:
    """The measurements on a cluster of their own (each starts and stops it)."""
    if "cluster" in arguments.only:
        record["cluster"] = measure_on_cluster(arguments)
    if "rescale" in arguments.only:
        record["rescale"] = streaming_rescale.measure_on_cluster(
            arguments.rescale_keys, arguments.rescale_events_per_batch,
            arguments.cluster_workers, arguments.shards)
    record["load_average_1min"] = round(os.getloadavg()[0], 2)


def agrees(record: Dict[str, Any]) -> bool:
    checks = []
    for name in ("latency", "throughput", "cluster"):
        for engine in ("beam_spark_runner", "beam_spark_runner_durable", "beam_on_connect",
                       "beam_on_connect_durable", "spark_structured_streaming"):
            if engine in record.get(name, {}):
                checks.append(record[name][engine]["agrees"])
    if "scaling" in record:
        checks += [record["scaling"]["beam_agrees"], record["scaling"]["native_agrees"],
                   record["scaling"].get("beam_on_connect", {}).get("agrees", True)]
    if "rescale" in record:
        checks.append(record["rescale"]["agrees"])
    return all(checks)


def print_record(record: Dict[str, Any]) -> None:
    for name, label in (("latency", "latency"), ("throughput", "throughput")):
        if name not in record:
            continue
        entry = record[name]
        ours, native = entry["beam_spark_runner"], entry["spark_structured_streaming"]
        warmed = (f", after {entry['warmup_runs']} unmeasured run(s) per engine"
                  if entry.get("warmup_runs") else "")
        print(f"\n{label}: windowed sum, early and late firings, "
              f"{entry['events_per_batch']:,} events a batch ({entry['windows']} windows)"
              f"{warmed}")
        print(f"  {'':38s} {'p50 ms':>8s} {'p95 ms':>8s} {'events/s':>10s} {'jobs/batch':>10s}"
              f" {'panes':>7s}")
        print(f"  {'Beam on our SparkRunner':38s} {ours['batch_millis_p50']:8.0f} "
              f"{ours['batch_millis_p95']:8.0f} {ours['events_per_second']:10,.0f} "
              f"{ours['spark_jobs_per_batch']:10.2f} {_ok(ours['agrees']):>7s}")
        if "beam_spark_runner_durable" in entry:
            durable = entry["beam_spark_runner_durable"]
            print(f"  {'  the same, state durable every batch':38s} "
                  f"{durable['batch_millis_p50']:8.0f} {durable['batch_millis_p95']:8.0f} "
                  f"{durable['events_per_second']:10,.0f} "
                  f"{durable['spark_jobs_per_batch']:10.2f} {_ok(durable['agrees']):>7s}")
        for engine, label in (("beam_on_connect", "Beam on our SparkRunner, Spark Connect"),
                              ("beam_on_connect_durable", "  the same, state durable")):
            if engine in entry:
                figures = entry[engine]
                print(f"  {label:38s} {figures['batch_millis_p50']:8.0f} "
                      f"{figures['batch_millis_p95']:8.0f} {figures['events_per_second']:10,.0f} "
                      f"{figures['spark_jobs_per_batch']:10.2f} {_ok(figures['agrees']):>7s}")
        print(f"  {'Spark Structured Streaming (RocksDB)':38s} {native['batch_millis_p50']:8.0f} "
              f"{native['batch_millis_p95']:8.0f} {native['events_per_second']:10,.0f} "
              f"{'':10s} {_ok(native['agrees']):>7s}")
        print(f"  p50 ratio (ours / Spark's): {entry['p50_ratio']}")
        if "connect_over_classic_p50" in entry:
            print(f"  Spark Connect / classic p50: x{entry['connect_over_classic_p50']}"
                  + (f", durable x{entry['connect_over_classic_durable_p50']}"
                     if "connect_over_classic_durable_p50" in entry else ""))
        if "durable_over_plain_p50" in entry:
            print(f"  durable state: p50 x{entry['durable_over_plain_p50']} ours without it, "
                  f"x{entry['durable_over_native_p50']} Spark's; state files "
                  f"{entry['beam_spark_runner_durable']['state_files_bytes'] / 1e6:.1f} MB")
    if "scaling" in record:
        entry = record["scaling"]
        print(f"\nstate scaling: a new key per event, {entry['events_per_batch']:,} events a "
              f"batch, {entry['batches']} batches")
        print(f"  {'keys held':>10s} {'ours ms':>8s} {'Spark ms':>9s} {'jobs':>5s} "
              f"{'touched':>8s}")
        curve = entry["curve"]
        for point in curve[1::max(1, len(curve) // 10)] + [curve[-1]]:
            native = point["native_millis"]
            print(f"  {point['keys_held']:10,d} {point['beam_millis']:8d} "
                  f"{'-' if native is None else native:>9} {point['spark_jobs']:5d} "
                  f"{point['touched_keys']:8,d}")
        print(f"  ours: p50 {entry['beam_first_p50']} ms at {entry['beam_first_keys'][0]:,}-"
              f"{entry['beam_first_keys'][1]:,} keys, {entry['beam_last_p50']} ms at "
              f"{entry['beam_last_keys'][0]:,}-{entry['beam_last_keys'][1]:,} keys: "
              f"x{entry['beam_last_over_first']}")
        print(f"  Spark: p50 {entry['native_first_p50']} ms first, {entry['native_last_p50']} ms "
              f"last; ours/Spark at the end: x{entry['beam_over_native_last']}")
        memory = entry["peak_memory_mib"]
        print(f"  peak memory (PSS, MiB) driver {memory.get('driver')}, JVM {memory.get('jvm')}, "
              f"Python workers {memory.get('python_workers')}; state "
              f"{entry['state_bytes_at_end'] / 1e6:.0f} MB encoded")
        print(f"  checkpoints every {entry['checkpoint_interval']} batches: p50 "
              f"{entry['checkpoint_batch_millis_p50']} ms for a checkpointed batch; files "
              f"{entry['checkpoint_files_bytes'] / 1e6:.0f} MB")
        print(f"  resumed from the checkpoint in a new driver: batches "
              f"{entry['resumed_millis']} ms, keys held {entry['resumed_keys']}")
        print(f"  panes: ours {_ok(entry['beam_agrees'])}, Spark {_ok(entry['native_agrees'])}")
        if "beam_on_connect" in entry:
            on_connect = entry["beam_on_connect"]
            print(f"  Spark Connect: p50 {on_connect['first_p50']} ms first, "
                  f"{on_connect['last_p50']} ms last: x{on_connect['last_over_first']}; "
                  f"x{on_connect['last_over_classic_last']} classic's last; panes "
                  f"{_ok(on_connect['agrees'])}")
        print_spread_table(entry)
    if "cluster" in record:
        entry = record["cluster"]
        print(f"\ncluster: the latency workload on {entry['workers']} 1-core workers"
              f"{' with a disk each' if entry['isolated'] else ''}, state durable every batch")
        print(f"  {'':38s} {'p50 ms':>8s} {'p95 ms':>8s} {'events/s':>10s} {'panes':>7s}")
        rows = [("cluster, durable", entry["beam_spark_runner_durable"])]
        if "beam_on_connect_durable" in entry:
            rows.append(("cluster, Spark Connect, durable", entry["beam_on_connect_durable"]))
        if "latency" in record:
            rows += [("local[2], plain", record["latency"]["beam_spark_runner"]),
                     ("local[2], durable", record["latency"]["beam_spark_runner_durable"])]
        for label, figures in rows:
            print(f"  {label:38s} {figures['batch_millis_p50']:8.0f} "
                  f"{figures['batch_millis_p95']:8.0f} {figures['events_per_second']:10,.0f} "
                  f"{_ok(figures['agrees']):>7s}")
        if "connect_over_classic_durable_p50" in entry:
            print(f"  Spark Connect / classic p50 on the cluster: "
                  f"x{entry['connect_over_classic_durable_p50']}; stores rebuilt in measured "
                  f"batches: {entry['beam_on_connect_durable']['stores_loaded']}")
    if "rescale" in record:
        print()
        streaming_rescale.print_record(record["rescale"])
    print(f"\nload average {record['load_average_1min']} on {record['cpus']} cpus")


def print_spread_table(entry: Dict[str, Any]) -> None:
    """The state-scaling run's batch times over the whole run, a line per engine."""
    rows = [("Beam on our SparkRunner", entry["beam_whole_run"])]
    if "beam_on_connect" in entry:
        rows.append(("Beam on our SparkRunner, Spark Connect",
                     entry["beam_on_connect"]["whole_run"]))
    rows.append(("Spark Structured Streaming (RocksDB)", entry["native_whole_run"]))
    goal = entry["max_over_p50_goal"]
    print(f"  whole run, batches 1-{entry['batches'] - 1} (nearest rank; "
          f"goal: max <= {goal:g}x p50)")
    print(f"  {'':38s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} {'at batch':>8s} "
          f"{'max/p50':>8s} {f'<= {goal:g}x':>7s}")
    for label, spread in rows:
        print(f"  {label:38s} {spread['p50']:8.0f} {spread['p99']:8.0f} {spread['max']:8.0f} "
              f"{spread['max_batch']:8d} {'x' + format(spread['max_over_p50'], '.2f'):>8s} "
              f"{'met' if spread['within_goal'] else 'MISSED':>7s}")


def _ok(agrees: bool) -> str:
    return "ok" if agrees else "WRONG"


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help=f"comma-separated subset of {', '.join(MEASUREMENTS)}")
    parser.add_argument("--events-per-batch", type=int, default=10_000,
                        help="latency: events a batch (10,000)")
    parser.add_argument("--latency-batches", type=int, default=12,
                        help="latency: measured batches (12)")
    parser.add_argument("--warmup-runs", type=int, default=0,
                        help="latency: unmeasured runs of its workload on every engine first "
                             "(0)")
    parser.add_argument("--throughput-events-per-batch", type=int, default=100_000,
                        help="throughput: events a batch (100,000)")
    parser.add_argument("--throughput-batches", type=int, default=6,
                        help="throughput: measured batches (6)")
    parser.add_argument("--scaling-events-per-batch", type=int, default=10_000,
                        help="state scaling: events a batch, each a new key (10,000)")
    parser.add_argument("--scaling-batches", type=int, default=100,
                        help="state scaling: batches (100: 1M keys at 10,000 a batch)")
    parser.add_argument("--scaling-checkpoint-interval", type=int, default=10,
                        help="state scaling: batches between checkpoints (10)")
    parser.add_argument("--shards", type=int, default=4, help="source restrictions (4)")
    parser.add_argument("--rescale-keys", type=int, default=1_000_000,
                        help="rescale: keys held when the job is re-split (1,000,000)")
    parser.add_argument("--rescale-events-per-batch", type=int, default=100_000,
                        help="rescale: events a batch while the keys are made (100,000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="key partitions and Spark partitions (2)")
    parser.add_argument("--seed", type=int, default=2024, help="event generator seed (2024)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where each run appends its records (bench/results)")
    parser.add_argument("--cluster-workers", type=int, default=2,
                        help="cluster: 1-core workers of the standalone cluster (2)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the benchmark's session; repeatable")
    parser.add_argument("--no-connect", dest="connect", action="store_false",
                        help="leave out the runs on Spark Connect")
    parser.add_argument("--beam-only", action="store_true",
                        help="measure our runner only (the cluster measurement's driver)")
    parser.add_argument("--shared-dir", default=None,
                        help="panes and checkpoints here (storage a cluster's workers share)")
    parser.add_argument("--record", type=Path, default=None,
                        help="write the record here as JSON, not to --results-dir")
    arguments = parser.parse_args(argv)
    try:
        arguments.conf = dict(entry.split("=", 1) for entry in arguments.conf)
    except ValueError:
        parser.error("--conf: give KEY=VALUE")
    arguments.only = [name.strip() for name in arguments.only.split(",") if name.strip()]
    unknown = set(arguments.only) - set(MEASUREMENTS)
    if unknown:
        parser.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(MEASUREMENTS)}")
    if arguments.warmup_runs < 0:
        parser.error("--warmup-runs: give 0 or more")
    if min(arguments.latency_batches, arguments.throughput_batches,
           arguments.scaling_batches) < 3:
        parser.error("every measurement needs at least 3 batches (batch 0 is not measured)")
    return arguments


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    record = run(arguments)
    if arguments.record is not None:  # a driver run for the cluster measurement
        arguments.record.write_text(json.dumps(record, sort_keys=True))
        return 0 if agrees(record) else 1
    arguments.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if "scaling" in record:
        picture = plot_scaling(record["scaling"],
                               arguments.results_dir / f"streaming-scaling-{stamp}.png")
        record["scaling"]["picture"] = None if picture is None else str(picture)
    write_jsonl(arguments.results_dir / f"streaming-{stamp}.jsonl", [record])
    print_record(record)
    if "scaling" in record and record["scaling"]["picture"]:
        print(f"curve: {record['scaling']['picture']}")
    if not agrees(record):
        print("FAILED: some engine's final panes differ from the reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
