"""Rescaling a stateful streaming job on a cluster: the re-split's time, batch times around it.

On a Spark standalone cluster of ``--cluster-workers`` 1-core workers (each with its own disk
where the machine allows: :mod:`services.cluster`), a driver process of its own runs the
state-scaling job (a new key per event: :func:`bench.streaming.beam.state_scaling`) with
``--checkpoint_dir`` on storage the workers share:

1. at 4 key partitions until it holds ``--rescale-keys`` keys, and stops (its final
   checkpoint);
2. resumed with ``--spark_parallelism=8``: the runner re-splits the state of 1M keys into 8
   partitions before its first batch (the ``rescale_millis`` metric), then runs on.

It prints the re-split's time, its rate (keys a second) and the p50 batch time before (the
last batches at 4 partitions) and after (at 8, from the second batch: the first rebuilds
every store from the new snapshots), with the final panes checked against a plain Python
reference. Run by ``python -m bench.streaming --only rescale``, or alone::

    python -m bench.streaming.rescale --rescale-keys 200000     # a smoke run (~2 min)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from bench.report import percentile
from bench.session import REPOSITORY_ROOT
from bench.streaming import beam as streaming_beam
from bench.streaming import workloads

#: Storage a cluster's workers share (each has a private /tmp when isolated).
CLUSTER_SHARED_ROOT = "/var/tmp"
#: Key partitions before and after.
BEFORE, AFTER = 4, 8
#: Batches measured after the re-split.
BATCHES_AFTER = 5


def measure_on_cluster(keys: int, events_per_batch: int, workers: int,
                       shards: int = 4) -> Dict[str, Any]:
    """Start the cluster, run the driver (:func:`drive`) in a process of its own against it,
    and return its record."""
    from services.cluster import StandaloneCluster, isolation_available

    shared = tempfile.mkdtemp(prefix="bench-rescale-", dir=CLUSTER_SHARED_ROOT)
    try:
        cluster = StandaloneCluster(state_dir=os.path.join(shared, "cluster"), workers=workers,
                                    worker_cores=1, isolated=isolation_available())
        with cluster:
            output = os.path.join(shared, "record.json")
            settings = cluster.driver_conf()
            command = [sys.executable, "-m", "bench.streaming.rescale", "--driver",
                       "--master", settings.pop("spark.master"), "--shared-dir", shared,
                       "--rescale-keys", str(keys), "--events-per-batch", str(events_per_batch),
                       "--shards", str(shards), "--record", output,
                       *[f"--conf={key}={value}" for key, value in settings.items()]]
            subprocess.run(command, check=True, cwd=REPOSITORY_ROOT)
            with open(output, encoding="utf-8") as record:
                measured = json.load(record)
        measured.update(workers=workers, isolated=cluster.isolated)
        return measured
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def drive(session: Any, master: str, shared: str, keys: int, events_per_batch: int,
          shards: int) -> Dict[str, Any]:
    """The driver's part: the job at 4 partitions, then resumed (re-split) at 8."""
    batches = max(3, keys // events_per_batch)
    total = batches + BATCHES_AFTER
    checkpoints = os.path.join(shared, "checkpoints")
    panes = tempfile.mkdtemp(prefix="panes-", dir=shared)
    common = dict(drain=False, source_batches=total, checkpoint_dir=checkpoints,
                  checkpoint_interval=batches, panes_dir=panes)
    before = streaming_beam.run(session, streaming_beam.state_scaling, master, BEFORE, shards,
                                events_per_batch, batches, 2024, **common)
    after = streaming_beam.run(session, streaming_beam.state_scaling, master, AFTER, shards,
                               events_per_batch, BATCHES_AFTER, 2024, **common)
    held = sum(before["lines"][-1]["state_keys"].values())
    before_millis = [line["millis"] for line in before["lines"]][1:]
    after_millis = [line["millis"] for line in after["lines"]]
    window = min(5, len(before_millis))
    expected = workloads.scaling_reference(before["events_per_batch"] * total)
    return {
        "keys_held": held, "events_per_batch": before["events_per_batch"],
        "partitions": [BEFORE, AFTER],
        "rescale_seconds": round(after["rescale_millis"] / 1000, 2),
        "rescale_keys_per_second": round(held / (after["rescale_millis"] / 1000)),
        "before_p50_millis": percentile(before_millis[-window:], 0.5),
        "after_first_millis": after_millis[0],
        "after_p50_millis": percentile(after_millis[1:], 0.5),
        "after_keys_held": sum(after["lines"][-1]["state_keys"].values()),
        "stores_loaded_after": [sum(line.get("stores_loaded", {}).values())
                                for line in after["lines"]],
        "agrees": {key: total for (key, _), total in after["panes"].items()} == expected,
    }


def print_record(record: Dict[str, Any]) -> None:
    print(f"rescale ({record['workers']}-worker cluster, isolated={record['isolated']}): "
          f"{record['keys_held']:,} keys re-split from {record['partitions'][0]} into "
          f"{record['partitions'][1]} key partitions in {record['rescale_seconds']} s "
          f"({record['rescale_keys_per_second']:,} keys/s)")
    print(f"  batch p50 before (4 partitions) {record['before_p50_millis']:.0f} ms, after "
          f"(8) {record['after_p50_millis']:.0f} ms; first batch after "
          f"{record['after_first_millis']:.0f} ms (rebuilds every store); panes "
          f"{'agree' if record['agrees'] else 'DIFFER'}")


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming.rescale",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rescale-keys", type=int, default=1_000_000,
                        help="keys held when the job is re-split (1,000,000)")
    parser.add_argument("--events-per-batch", type=int, default=100_000,
                        help="events a batch while the keys are made (100,000)")
    parser.add_argument("--shards", type=int, default=4, help="source restrictions (4)")
    parser.add_argument("--cluster-workers", type=int, default=2,
                        help="1-core workers of the standalone cluster (2)")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--master", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--shared-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--conf", action="append", default=[], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    if arguments.driver:
        from bench.session import bench_session

        conf = dict(entry.split("=", 1) for entry in arguments.conf)
        session = bench_session(arguments.master, AFTER, conf)
        record = drive(session, arguments.master, arguments.shared_dir, arguments.rescale_keys,
                       arguments.events_per_batch, arguments.shards)
        arguments.record.write_text(json.dumps(record, sort_keys=True))
        if not record["agrees"]:
            print(f"FAILED: the final panes differ from the reference: {record}",
                  file=sys.stderr)
        return 0 if record["agrees"] else 1
    record = measure_on_cluster(arguments.rescale_keys, arguments.events_per_batch,
                                arguments.cluster_workers, arguments.shards)
    print_record(record)
    return 0 if record["agrees"] else 1


if __name__ == "__main__":
    sys.exit(main())
