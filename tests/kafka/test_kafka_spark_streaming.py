"""Kafka -> windowed sum -> Kafka on the SparkRunner's streaming loop, on a real broker.

The source is a splittable DoFn: each micro-batch reads the next offsets of every partition
(the residuals of the previous batch), its per-partition watermark estimators hold the
stage's watermark, and the group's offsets are committed once the batch's output is written.
These tests observe the runner (its per-batch report), so they run on the SparkRunner; the
Kafka model tests (test_kafka_*.py) run on every runner.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.transforms import trigger, window

from kafka_fixtures import bootstrap_servers, kafka, kafka_broker  # noqa: F401 (fixtures)
from services.broker import free_loopback_port
from spark_fixtures import spark_session  # noqa: F401 (fixture)
from transforms.kafka import ReadFromKafka, WriteToKafka, json_bytes, utf8

pytestmark = pytest.mark.parametrize("runner_name", ["SparkRunner"], indirect=True)


class _Pane(beam.DoFn):
    """(key, sum) in a window -> a JSON-able record naming the window and the pane timing."""

    def process(self, element, pane=beam.DoFn.PaneInfoParam, span=beam.DoFn.WindowParam):
        key, total = element
        yield {"key": key, "start": float(span.start), "sum": total,
               "timing": {0: "EARLY", 1: "ON_TIME", 2: "LATE"}.get(pane.timing, "UNKNOWN")}


def test_kafka_windowed_sum_across_batches(make_pipeline, kafka, tmp_path):
    topic, output = kafka.create_topic(partitions=2), kafka.create_topic(partitions=1)
    group = kafka.group()
    # Partition 0: 10 records at 0, 3, 6, ... 27 s; partition 1: 6 records at 1, 6, ... 26 s;
    # each partition in event-time order, the two interleaving in event time.
    produced = [(b"clicks", str(seconds).encode(), (kafka.base + seconds) * 1000, 0)
                for seconds in range(0, 30, 3)]
    produced += [(b"clicks", str(seconds).encode(), (kafka.base + seconds) * 1000, 1)
                 for seconds in range(1, 30, 5)]
    kafka.produce(topic, produced)
    report = tmp_path / "report.jsonl"
    pipeline = make_pipeline(streaming=True, batch_interval_seconds=0.05,
                             streaming_report=str(report))
    read = pipeline | ReadFromKafka(
        kafka.bootstrap_servers, topic, group_id=group, bounded=True,
        key_decoder=utf8, value_decoder=lambda value: int(value.decode()),
        batch_max_records_per_partition=3, idle_timeout_seconds=None)
    _ = (read.records
         | beam.WindowInto(window.FixedWindows(10), trigger=trigger.AfterWatermark(),
                           accumulation_mode=trigger.AccumulationMode.DISCARDING)
         | "Sum" >> beam.CombinePerKey(sum)
         | beam.ParDo(_Pane())
         | WriteToKafka(kafka.bootstrap_servers, output, key_fn=lambda pane: pane["key"],
                        value_fn=lambda pane: pane, value_serializer=json_bytes))
    result = pipeline.run()
    result.wait_until_finish()

    # On-time panes, one per window, each the sum of what was produced in it: the
    # watermark advanced per partition, never past a record not read yet.
    panes = [json.loads(record.value) for record in kafka.consume_all(output, expected=3)]
    expected = {}
    for _, value, timestamp_ms, _ in produced:
        start = float((timestamp_ms // 1000 - kafka.base) // 10 * 10 + kafka.base)
        expected[start] = expected.get(start, 0) + int(value)
    assert sorted((pane["start"], pane["sum"], pane["timing"]) for pane in panes) == sorted(
        (start, total, "ON_TIME") for start, total in expected.items())

    # Read over several batches (3 records per partition a batch, as planned by the driver),
    # the source's watermark advancing batch by batch before it reaches the end.
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) >= 4
    assert sum(line["source_elements"] for line in lines) == len(produced)
    assert max(line["source_elements"] for line in lines) <= 2 * 3  # 2 partitions, 3 a call
    reader, = [name for name in lines[0]["output_watermarks"]
               if name.startswith("ReadFromKafka/ReadPartitions")]
    source = [line["output_watermarks"][reader] for line in lines]
    advancing = [wm for wm in source if isinstance(wm, float)]
    assert len(set(advancing)) >= 2 and advancing == sorted(advancing)
    assert source[-1] == "end"

    # The group's offsets: committed after the output was written, up to the end read.
    assert kafka.committed(group, topic, partitions=2) == {0: 10, 1: 6}


def test_a_broker_down_at_start_keeps_the_workers_message(make_pipeline):
    servers = f"127.0.0.1:{free_loopback_port()}"  # nothing listens there
    pipeline = make_pipeline(streaming=True, batch_interval_seconds=0.05)
    _ = pipeline | ReadFromKafka(servers, "events", consumer_config={"bootstrap_timeout_ms": 3000})
    with pytest.raises(Exception) as failure:
        pipeline.run().wait_until_finish()
    texts, error = [], failure.value
    while error is not None:
        texts.append(str(error))
        error = error.__cause__ or error.__context__
    message = "\n".join(texts)
    assert servers in message and "make kafka" in message, message
