"""``python -m bench.kafka``: Kafka -> team scores -> Kafka on the SparkRunner in streaming.

Sustained records per second and end-to-end latency (produce time to the first pane that
includes the record, readable on the output topic), on ``local[2]`` with an embedded broker
(``services.broker.EmbeddedBroker``; kind from ``KAFKA_BROKER``, default noida; stopped by its
PID at the end, even on error).

For each ``--rates`` value, on fresh topics:

1. the job starts (``--streaming``, ``--batch_interval_seconds``, ``--streaming_report``);
   200 warm-up records (left out of the figures) go through it, so that every stage has
   started its workers and DoFns, then a few batches run without records;
2. a producer process (:mod:`bench.kafka.clients`) writes game events at that fixed rate
   for ``--seconds`` into a
   ``--partitions``-partition topic (record ``i`` to partition ``i % partitions``); each
   event's ``timestamp`` field is the wall-clock time of its ``send`` (its produce time, and
   its event time);
3. a consumer thread reads the output topic and notes when it sees each pane.

The job is team_scores' Kafka path, built here so that a pane fires every micro-batch:
``ReadFromKafka`` (event time from the ``timestamp`` field, as ``pipelines.kafka_events``
reads it) -> ``ParseJson(GameEvent)`` -> ``(team, (score, produce time))`` -> fixed event-time
windows (``--window-seconds``) with ``Repeatedly(AfterCount(1))`` (``every_n_elements(1)``),
discarding -> per team and window the sum, count and oldest / newest produce time ->
``WriteToKafka``. ``TeamScores`` itself cannot fire every batch: its early firings are
processing-time delays in whole seconds (``early_seconds >= 1``), and its late-data count
adds a keyed join. Discarding makes every record appear in exactly one pane: its first.

Latency: a pane seen at ``t`` holding records produced in ``[oldest, newest]``: each of its
records waited between ``t - newest`` and ``t - oldest``. ``t - newest`` is the newest
record's latency (an upper bound for it: the consumer sees a pane a little after it is
readable); weighted by the records of each pane, the percentiles of these two bounds bracket
the true per-record percentiles. The ``estimate`` spreads a pane's records evenly between
its oldest and newest produce time (the producer's rate is constant). ``pane_latency`` is
per pane, unweighted. Target: p50 <= batch interval + 500 ms.

On the SparkRunner the source's reads are planned (``transforms/kafka/planning.py``): each
batch reads, per partition, exactly the offsets the driver saw at its start, without
waiting on polls. ``--seconds-per-bundle`` and ``--poll-timeout`` apply where the source runs
as a plain splittable DoFn (other runners); ``--records-per-bundle`` caps each fetch.

Throughput: records the job read (``source_elements`` of the per-batch report) from the
first record's production until the end of production, over that time; when it falls
behind the rate (or a backlog remains), the job does not keep up. ``capacity`` is records
read over the busy time of the batches (sum of ``millis``). Every record produced must reach
a pane (the pane counts are checked against the producer's); a difference fails the run.

Capacity with nothing else on the machine (``--backlog N``): on a 2-core machine a
pure-Python producer at 20,000 records/s takes about a core from the job it feeds. So, after
the rates, N records are produced before the job starts, and the job reads them
``--batch-max-records`` a batch, as after an outage; the drain rate is the highest rate the
job sustains (see :func:`measure_backlog`).

Each run appends one JSON record per rate to ``bench/results/kafka-<timestamp>.jsonl``.
All clocks are ``time.time()`` on one machine (loopback).

Examples::

    python -m bench.kafka                                # 1000, 2000, 4000 records/s, 60 s each
    python -m bench.kafka --rates 2000 --seconds 15      # a quick check
    python -m bench.kafka --rates 4000,20000 --seconds 20 --backlog 300000 --batch-max-records 40000
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import apache_beam as beam

from bench.kafka.clients import WARM_UP_TEAM, PaneConsumer, Producer
from bench.report import RESULTS_DIR, weighted_percentile, write_jsonl

#: Seconds the job may take to run its first micro-batches (Spark workers start).
STARTUP_SECONDS = 180.0
#: Before production, this many records of team WARM_UP_TEAM go through the whole job (the
#: first batch with records starts every stage's DoFns); they are left out of the figures.
WARM_UP_RECORDS = 200
#: Batches without records run after the warm-up, before production (their cost is reported).
IDLE_BATCHES = 3


class PaneStatsFn(beam.CombineFn):
    """(score, produce time) -> (sum of scores, records, oldest produce time, newest)."""

    def create_accumulator(self):
        return 0, 0, None, None

    def add_input(self, accumulator, element):
        total, count, oldest, newest = accumulator
        score, produced = element
        return (total + score, count + 1, produced if oldest is None else min(oldest, produced),
                produced if newest is None else max(newest, produced))

    def merge_accumulators(self, accumulators):
        total, count, oldest, newest = 0, 0, None, None
        for part_total, part_count, part_oldest, part_newest in accumulators:
            total, count = total + part_total, count + part_count
            if part_oldest is not None:
                oldest = part_oldest if oldest is None else min(oldest, part_oldest)
                newest = part_newest if newest is None else max(newest, part_newest)
        return total, count, oldest, newest

    def extract_output(self, accumulator):
        return accumulator


class _DescribePane(beam.DoFn):
    """(team, stats) -> (team, pane as a dict), stamped with the time the pane is emitted."""

    def process(self, element, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        team, (total, count, oldest, newest) = element
        yield team, {"team": team, "sum": total, "count": count, "oldest": oldest,
                     "newest": newest, "window_start": float(window.start),
                     "index": pane.index, "emitted": time.time()}


def _team_and_produce_time(event) -> Tuple[str, Tuple[int, float]]:
    return event.team, (event.score, event.timestamp)


def _key(pair):
    return pair[0]


def _value(pair):
    return pair[1]


def build(pipeline: beam.Pipeline, arguments: argparse.Namespace, servers: str,
          input_topic: str, output_topic: str) -> None:
    """Kafka -> GameEvents -> per team and window (sum, count, produce times) every batch -> Kafka."""
    from apache_beam.transforms import trigger, window

    from pipelines.events import GameEvent
    from pipelines.kafka_events import event_time_of
    from transforms.kafka import ReadFromKafka, WriteToKafka, json_bytes, utf8
    from transforms.parsing import ParseJson
    from triggers.presets import every_n_elements

    read = pipeline | "ReadFromKafka" >> ReadFromKafka(
        servers, input_topic, value_decoder=utf8, timestamp_fn=event_time_of,
        records_per_bundle=arguments.records_per_bundle,
        seconds_per_bundle=arguments.seconds_per_bundle,
        poll_timeout_seconds=arguments.poll_timeout, idle_timeout_seconds=5.0,
        batch_max_records=arguments.batch_max_records)
    parsed = read.records | "Values" >> beam.Map(_value) | "Parse" >> ParseJson(GameEvent)
    _ = (parsed.parsed
         | "TeamAndProduceTime" >> beam.Map(_team_and_produce_time)
         | beam.WindowInto(window.FixedWindows(arguments.window_seconds),
                           trigger=every_n_elements(1).trigger,
                           allowed_lateness=arguments.window_seconds,
                           accumulation_mode=trigger.AccumulationMode.DISCARDING)
         | "PaneStats" >> beam.CombinePerKey(PaneStatsFn())
         | "Describe" >> beam.ParDo(_DescribePane())
         | "PanesToKafka" >> WriteToKafka(servers, output_topic, key_fn=_key, value_fn=_value,
                                          value_serializer=json_bytes))


def _millis(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else int(round(seconds * 1000))


def _stats(name: str, pairs: List[Tuple[float, int]]) -> Dict[str, Optional[int]]:
    """p50, p95 and max of weighted seconds, in milliseconds."""
    return {f"{name}_ms_p50": _millis(weighted_percentile(pairs, 0.5)),
            f"{name}_ms_p95": _millis(weighted_percentile(pairs, 0.95)),
            f"{name}_ms_max": _millis(max((value for value, _ in pairs), default=None))}


def _spread(panes: List[Tuple[float, Dict[str, Any]]]) -> List[Tuple[float, int]]:
    """Estimated per-record latencies: a pane's records spread evenly over its produce times
    (the producer's rate is constant and teams are drawn at random)."""
    latencies = []
    for seen, pane in panes:
        count, oldest = pane["count"], pane["oldest"]
        step = (pane["newest"] - oldest) / (count - 1) if count > 1 else 0.0
        latencies.extend((seen - oldest - number * step, 1) for number in range(count))
    return latencies


def sdk_millis_per_step(result: Any) -> Dict[str, float]:
    """Beam's ``process_bundle_msecs`` summed per transform (empty if not reported)."""
    try:
        metrics = result.monitoring_metrics().query()
    except Exception:  # a runner without system metrics
        return {}
    steps: Dict[str, float] = {}
    for metric in metrics.get("counters", []):
        if "process_bundle_msecs" in str(metric.key.metric.name):
            step = str(metric.key.step)
            steps[step] = steps.get(step, 0.0) + metric.committed
    return steps


def summarize(arguments: argparse.Namespace, rate: float, producer: Producer,
              panes: List[Tuple[float, Dict[str, Any]]], batches: List[Dict[str, Any]],
              job: Dict[str, Any]) -> Dict[str, Any]:
    start, end = producer.started, producer.ended or time.time()
    read_by_end, last_batch_end, read_total, drained_at = 0, None, 0, None
    for batch in batches:
        if batch["time"] <= start:
            continue
        read_total += batch["source_elements"]
        if batch["time"] <= end:
            read_by_end, last_batch_end = read_total, batch["time"]
        if drained_at is None and read_total >= producer.sent:
            drained_at = batch["time"]
    during = [batch for batch in batches if start < batch["time"] <= end]
    # Batches without records before production (the first starts the workers): fixed cost.
    idle = [(batch["millis"], 1) for batch in batches[1:]
            if batch["time"] <= start and not batch["source_elements"]]
    panes = [(seen, pane) for seen, pane in panes if pane["team"] != WARM_UP_TEAM]
    busy = sum(batch["millis"] for batch in during) / 1000
    millis = [(batch["millis"], 1) for batch in during]
    per_batch = [(batch["source_elements"], 1) for batch in during]
    filled = [(seen, pane) for seen, pane in panes if pane["count"]]
    newest = [(seen - pane["newest"], pane["count"]) for seen, pane in filled]
    oldest = [(seen - pane["oldest"], pane["count"]) for seen, pane in filled]
    produced_rate = producer.sent / max(end - start, 1e-3)
    sustained = (read_by_end / (last_batch_end - start)) if last_batch_end else 0.0
    target = arguments.batch_interval + 0.5
    newest_p50, oldest_p50 = weighted_percentile(newest, 0.5), weighted_percentile(oldest, 0.5)
    if oldest_p50 is not None and oldest_p50 <= target:
        meets = "yes"
    elif newest_p50 is not None and newest_p50 > target:
        meets = "no"
    else:
        meets = "between the bounds"
    in_panes = sum(pane["count"] for _, pane in panes)
    return {
        "workload": "kafka_team_scores_every_batch", "broker": arguments.broker,
        "master": arguments.master, "parallelism": arguments.parallelism,
        "partitions": arguments.partitions, "batch_interval_seconds": arguments.batch_interval,
        "records_per_bundle": arguments.records_per_bundle,
        "seconds_per_bundle": arguments.seconds_per_bundle,
        "poll_timeout_seconds": arguments.poll_timeout,
        "target_rate": rate, "seconds": arguments.seconds, "produced": producer.sent,
        "produce_failures": producer.failed, "produced_rate": round(produced_rate, 1),
        "read_during_production": read_by_end,
        "sustained_records_per_second": round(sustained, 1),
        "capacity_records_per_second": round(read_total / busy, 1) if busy else None,
        "backlog_at_production_end": producer.sent - read_by_end,
        "drain_seconds_after_production": (None if drained_at is None
                                           else round(max(0.0, drained_at - end), 2)),
        # Keeping up: the rate is read while produced, and the backlog left at the end is
        # gone within a few batches (a job that falls behind has a backlog growing with time).
        "keeps_up": bool(sustained >= 0.9 * produced_rate and drained_at is not None
                         and drained_at - end <= 3 * max(arguments.batch_interval,
                                                         (weighted_percentile(millis, 0.95) or 0) / 1000)),
        "batches_during_production": len(during),
        "batch_millis_p50": weighted_percentile(millis, 0.5), "batch_millis_p95": weighted_percentile(millis, 0.95),
        "batch_millis_max": max((m for m, _ in millis), default=None),
        "idle_batch_millis_p50": weighted_percentile(idle, 0.5),
        "records_per_batch_p50": weighted_percentile(per_batch, 0.5),
        "records_per_batch_max": max((n for n, _ in per_batch), default=None),
        "panes": len(panes), "records_in_panes": in_panes,
        **_stats("latency_newest", newest), **_stats("latency_oldest", oldest),
        **_stats("latency_estimate", _spread(filled)),
        **_stats("pane_latency", [(value, 1) for value, _ in newest]),
        **_stats("emit_to_consume", [(seen - pane["emitted"], 1) for seen, pane in filled]),
        "target_p50_ms": _millis(target), "meets_target": meets,
        "agrees": in_panes == producer.sent and not producer.failed,
        **job, "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
        "batch_trace": [[round(batch["time"] - start, 2), batch["source_elements"],
                         batch["millis"]] for batch in batches],
    }


def _report(path: str) -> List[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]
    except FileNotFoundError:
        return []


def warm_up(servers: str, topic: str, consumer: PaneConsumer, result: Any) -> None:
    """Send WARM_UP_RECORDS records and wait until their panes are on the output topic."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=servers)
    try:
        partitions = len(producer.partitions_for(topic))
        for number in range(WARM_UP_RECORDS):
            event = {"user": "warm-up", "team": WARM_UP_TEAM, "score": 1,
                     "timestamp": time.time()}
            producer.send(topic, value=json.dumps(event).encode(), partition=number % partitions)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    deadline = time.time() + STARTUP_SECONDS
    while consumer.records(warm_up=True) < WARM_UP_RECORDS:
        if result.state in ("DONE", "FAILED", "CANCELLED") or time.time() > deadline:
            result.wait_until_finish()  # raises the job's error
            raise RuntimeError(f"the warm-up records reached no pane in {STARTUP_SECONDS:g} s "
                               f"(job {result.state})")
        time.sleep(0.2)


def _start_job(arguments: argparse.Namespace, session: Any, servers: str, input_topic: str,
               output_topic: str, report: str, bound: float) -> Any:
    """The benchmark's job on the SparkRunner, started; its per-batch lines go to ``report``."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from runners.spark import SparkRunner

    options = PipelineOptions([
        "--streaming", f"--spark_master_url={arguments.master}",
        f"--spark_parallelism={arguments.parallelism}",
        f"--batch_interval_seconds={arguments.batch_interval}",
        f"--streaming_report={report}", f"--streaming_timeout_seconds={bound}"])
    pipeline = beam.Pipeline(runner=SparkRunner(session), options=options)
    build(pipeline, arguments, servers, input_topic, output_topic)
    return pipeline.run()


def _job_figures(result: Any, batches: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Spark jobs per batch, and the SDK harness's busiest steps per batch."""
    jobs = sum(batch.get("spark_jobs", 0) for batch in batches)  # the batch report's count
    steps = sdk_millis_per_step(result)
    return {"spark_jobs_per_batch": round(jobs / max(len(batches), 1), 2),
            "sdk_harness_millis_per_batch": {
                step: round(millis / max(len(batches), 1), 1)
                for step, millis in sorted(steps.items(), key=lambda item: -item[1])[:6]}}


def _topics(servers: str, partitions: int) -> Tuple[str, str]:
    from pipelines.live.kafka_topics import create_topics

    run = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"bench-events-{run}", f"bench-panes-{run}"
    create_topics(servers, [input_topic, output_topic], partitions)
    return input_topic, output_topic


def measure(arguments: argparse.Namespace, session: Any, servers: str, rate: float
            ) -> Dict[str, Any]:
    """One rate on fresh topics: start the job, produce, drain, stop the job; summarize."""
    input_topic, output_topic = _topics(servers, arguments.partitions)
    consumer = PaneConsumer(servers, output_topic)
    consumer.start()
    producer = Producer(servers, input_topic, arguments.partitions, rate, arguments.seconds,
                        arguments.seed)
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as scratch:
        report = os.path.join(scratch, "report.jsonl")
        bound = 2 * STARTUP_SECONDS + arguments.seconds + arguments.drain_seconds + 30
        result = _start_job(arguments, session, servers, input_topic, output_topic, report,
                            bound)
        try:
            warm_up(servers, input_topic, consumer, result)
            # A few batches without records: what a batch costs by itself.
            warm, deadline = len(_report(report)), time.time() + 30
            while len(_report(report)) < warm + IDLE_BATCHES and time.time() < deadline:
                time.sleep(0.1)
            print(f"  rate {rate:g}/s: job running, producing for {arguments.seconds:g} s",
                  flush=True)
            producer.start()
            producer.join(arguments.seconds + 90)
            if producer.error is not None:
                raise RuntimeError(f"the producer failed: {producer.error}")
            deadline = time.time() + arguments.drain_seconds
            while consumer.records() < producer.sent and time.time() < deadline:
                time.sleep(0.2)
            time.sleep(arguments.batch_interval)  # a last batch's panes, should any be left
        finally:
            result.cancel()
            consumer.halt.set()
            consumer.join(10)
        batches = _report(report)
    return summarize(arguments, rate, producer, list(consumer.panes), batches,
                     _job_figures(result, batches))


def measure_backlog(arguments: argparse.Namespace, session: Any, servers: str
                    ) -> Dict[str, Any]:
    """The job's capacity with no producer beside it on the machine: ``--backlog`` records
    are in the topic before the job starts, and it reads them ``--batch-max-records`` a
    batch (admission control). The drain rate leaves out the first batch that reads, which
    also starts every Python worker and DoFn: records of the later batches over the time
    from the start of the second to the end of the last."""
    input_topic, output_topic = _topics(servers, arguments.partitions)
    producer = Producer(servers, input_topic, arguments.partitions, None, None,
                        arguments.seed, limit=arguments.backlog)
    print(f"  backlog: producing {arguments.backlog} records before the job starts",
          flush=True)
    producer.start()
    producer.join(max(120.0, arguments.backlog / 1000))
    if producer.error is not None:
        raise RuntimeError(f"the producer failed: {producer.error}")
    consumer = PaneConsumer(servers, output_topic)
    consumer.start()
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as scratch:
        report = os.path.join(scratch, "report.jsonl")
        wait = STARTUP_SECONDS + arguments.backlog / 1000 + arguments.drain_seconds
        result = _start_job(arguments, session, servers, input_topic, output_topic, report,
                            wait + 30)
        try:
            deadline = time.time() + wait
            while consumer.records() < producer.sent and time.time() < deadline:
                if result.state in ("DONE", "FAILED", "CANCELLED"):
                    result.wait_until_finish()  # raises the job's error
                time.sleep(0.2)
            time.sleep(arguments.batch_interval)
        finally:
            result.cancel()
            consumer.halt.set()
            consumer.join(10)
        batches = _report(report)
    reading = [batch for batch in batches if batch["source_elements"]]
    steady = reading[1:]
    span = (steady[-1]["time"] - (steady[0]["time"] - steady[0]["millis"] / 1000)
            if steady else 0.0)
    read = sum(batch["source_elements"] for batch in steady)
    millis = [(batch["millis"], 1) for batch in steady]
    in_panes = consumer.records()
    return {
        "workload": "kafka_team_scores_backlog", "broker": arguments.broker,
        "master": arguments.master, "parallelism": arguments.parallelism,
        "partitions": arguments.partitions, "batch_interval_seconds": arguments.batch_interval,
        "backlog": producer.sent, "batch_max_records": arguments.batch_max_records,
        "drain_records_per_second": round(read / span, 1) if span else None,
        "batches_reading": len(reading),
        "first_batch_millis": reading[0]["millis"] if reading else None,
        "first_batch_records": reading[0]["source_elements"] if reading else None,
        "batch_millis_p50": weighted_percentile(millis, 0.5),
        "batch_millis_p95": weighted_percentile(millis, 0.95),
        "records_per_batch_p50": weighted_percentile(
            [(batch["source_elements"], 1) for batch in steady], 0.5),
        "records_in_panes": in_panes, "agrees": in_panes == producer.sent and not producer.failed,
        **_job_figures(result, batches),
        "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
    }


def print_record(record: Dict[str, Any]) -> None:
    for name, value in record.items():
        if name != "batch_trace":
            print(f"  {name:34s} {value}")
    if record["workload"] == "kafka_team_scores_backlog":
        print(f"  capacity: {record['backlog']} records waiting, read "
              f"{record['batch_max_records'] or 'all'} a batch: "
              f"{record['drain_records_per_second']} records/s after the first batch "
              f"({record['first_batch_millis']} ms, it starts the workers); a batch ran "
              f"{record['batch_millis_p50']} ms p50", flush=True)
        return
    interval_ms = record["batch_interval_seconds"] * 1000
    print(f"  where time goes: batches every {interval_ms:.0f} ms at best; a batch ran "
          f"{record['batch_millis_p50']} ms p50 / {record['batch_millis_p95']} ms p95 "
          f"({record['idle_batch_millis_p50']} ms without records), "
          f"{record['spark_jobs_per_batch']} Spark jobs per batch. A record waits for the next "
          f"batch to read it (up to one batch), then for that batch to end; pane emitted -> "
          f"seen by the consumer: {record['emit_to_consume_ms_p50']} ms p50", flush=True)
    print(f"  latency p50 / p95 / max (ms): newest record of each pane "
          f"{record['latency_newest_ms_p50']} / {record['latency_newest_ms_p95']} / "
          f"{record['latency_newest_ms_max']}; oldest {record['latency_oldest_ms_p50']} / "
          f"{record['latency_oldest_ms_p95']} / {record['latency_oldest_ms_max']}; estimate "
          f"{record['latency_estimate_ms_p50']} / {record['latency_estimate_ms_p95']} / "
          f"{record['latency_estimate_ms_max']}; target p50 <= {record['target_p50_ms']}: "
          f"{record['meets_target']}", flush=True)


def _rates(text: str) -> List[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        rates = []
    if not rates or any(rate <= 0 for rate in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive records/s, comma-separated")
    return rates


def parse_arguments(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=_rates, default=[1000.0, 2000.0, 4000.0],
                        help="target records/s, comma-separated, one run each (1000,2000,4000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="producing time per rate")
    parser.add_argument("--partitions", type=int, default=4, help="input topic partitions (4)")
    parser.add_argument("--batch-interval", type=float, default=1.0,
                        help="--batch_interval_seconds of the job (1)")
    parser.add_argument("--window-seconds", type=int, default=60, help="fixed windows (60)")
    parser.add_argument("--records-per-bundle", type=int, default=10_000,
                        help="ReadFromKafka: records per partition per batch at most (10000)")
    parser.add_argument("--seconds-per-bundle", type=float, default=0.25,
                        help="ReadFromKafka: seconds a partition is read per batch at most (0.25)")
    parser.add_argument("--poll-timeout", type=float, default=0.05,
                        help="ReadFromKafka: seconds an empty poll waits (0.05)")
    parser.add_argument("--backlog", type=int, default=0,
                        help="also measure the job's capacity on a backlog of this many "
                             "records, produced before the job starts (0: not measured)")
    parser.add_argument("--batch-max-records", type=int, default=None,
                        help="ReadFromKafka: records a batch reads at most, in all "
                             "(admission control; default: whatever the log holds)")
    parser.add_argument("--drain-seconds", type=float, default=30.0,
                        help="after producing, wait at most this long for the last panes (30)")
    parser.add_argument("--broker", choices=("noida", "tansu"),
                        default=os.environ.get("KAFKA_BROKER", "noida"),
                        help="embedded broker (noida; the KAFKA_BROKER variable changes it)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="Spark partitions (2)")
    parser.add_argument("--seed", type=int, default=2024, help="producer's seed (2024)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                        help="where each run appends its records (bench/results)")
    arguments = parser.parse_args(argv)
    if arguments.seconds <= 0 or arguments.partitions < 1 or arguments.batch_interval <= 0:
        parser.error("--seconds and --batch-interval must be > 0, --partitions >= 1")
    if arguments.backlog < 0 or (arguments.batch_max_records is not None
                                 and arguments.batch_max_records < 1):
        parser.error("--backlog must be >= 0 and --batch-max-records >= 1")
    return arguments


def _stop_spark(session: Any) -> None:
    """Stop the session, then the JVM this process started, by its PID."""
    from pyspark import SparkContext

    from services.processes import terminate

    gateway = SparkContext._gateway
    session.stop()
    process = getattr(gateway, "proc", None)
    if process is not None and process.poll() is None:
        terminate([process.pid], 10.0, {process.pid: process})


def main(argv: Optional[List[str]] = None) -> int:
    arguments = parse_arguments(argv)
    from bench.session import bench_session
    from services.broker import EmbeddedBroker

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    records: List[Dict[str, Any]] = []
    broker = EmbeddedBroker(kind=arguments.broker)
    session = None
    try:
        broker.start()
        print(f"{arguments.broker} broker PID {broker.pid} at {broker.bootstrap_servers}",
              flush=True)
        session = bench_session(arguments.master, arguments.parallelism)
        runs = [functools.partial(measure, arguments, session, broker.bootstrap_servers, rate)
                for rate in arguments.rates]
        if arguments.backlog:
            runs.append(functools.partial(measure_backlog, arguments, session,
                                          broker.bootstrap_servers))
        for run in runs:
            record = {"run_id": stamp, **run()}
            records.append(record)
            print_record(record)
            write_jsonl(arguments.results_dir / f"kafka-{stamp}.jsonl", [record])
    finally:
        if session is not None:
            _stop_spark(session)
        broker.stop()
    print(f"\nresults in {arguments.results_dir / f'kafka-{stamp}.jsonl'}")
    if not all(record["agrees"] for record in records):
        print("FAILED: some produced records reached no pane (or could not be produced)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
