"""team_scores from Kafka to Kafka, with Python workers that kill themselves once.

Run by ``tests/kafka/test_kafka_faults.py`` as a job of its own (a Spark session per run, so that
its master can allow task retries: ``--spark_master_url local[2,4]``). ``--fault_dir DIR``
arms two faults; without it the job is the uninterrupted reference:

* ``read``: the worker that meets the first event of user ``u1`` at or after event time
  ``--fault_from_seconds`` SIGKILLs itself, in the stage that reads the planned offset ranges;
* ``write``: the worker that is about to write the first on-time pane of team ``red`` to the
  output topic SIGKILLs itself, in the stage that fires panes and writes them (with
  ``--exactly_once``, inside an open transaction).

Each fault fires once: the worker first creates ``DIR/<fault>`` (exclusively), so the task
Spark retries finds the file and runs through. Usage::

    python tests/kafka/kafka_fault_job.py --fault_dir /tmp/faults --bootstrap_servers ... \\
        --input_topic in --output_topic out --max_records 12 --runner SparkRunner --streaming
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Callable, Optional, Sequence

import apache_beam as beam

from pipelines.events import GameEvent
from pipelines.kafka_events import ReadKafkaEvents, WritePanesToKafka
from pipelines.options import job_parser, parse_job_options
from pipelines.team_scores import TeamScores
from triggers.panes import DescribePanes


class KillOnce(beam.DoFn):
    """Pass elements through; SIGKILL this worker at the first element ``matches`` accepts.

    ``fault_dir`` None: never kill. The marker ``fault_dir/name`` is created before the kill,
    so that the retried task (and every later one) passes the element on.
    """

    def __init__(self, fault_dir: Optional[str], name: str,
                 matches: Callable[[Any], bool]) -> None:
        self._marker = os.path.join(fault_dir, name) if fault_dir else None
        self._matches = matches

    def process(self, element):
        if self._marker and self._matches(element):
            try:
                os.close(os.open(self._marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        yield element


class EventOfUserFrom:
    """Accepts the events of ``user`` at or after event time ``seconds``."""

    def __init__(self, user: str, seconds: float) -> None:
        self._user, self._seconds = user, seconds

    def __call__(self, event: GameEvent) -> bool:
        return event.user == self._user and event.timestamp >= self._seconds


def _first_on_time_pane_of_red(pane: dict) -> bool:
    return pane["key"] == "red" and pane["pane"]["timing"] == "ON_TIME"


def run(argv: Optional[Sequence[str]] = None) -> None:
    """Run the job until ``--max_records`` per partition are read (see the module doc)."""
    fault_parser = argparse.ArgumentParser(add_help=False)
    fault_parser.add_argument("--fault_dir")
    fault_parser.add_argument("--fault_from_seconds", type=float, default=0.0)
    faults, rest = fault_parser.parse_known_args(argv)
    parser = job_parser("kafka_fault_job", "team_scores with workers that kill themselves once",
                        window_seconds=10, early_seconds=0, allowed_lateness=600)
    args, options = parse_job_options(parser, rest)
    with beam.Pipeline(runner=args.runner, options=options) as pipeline:
        events = pipeline | "ReadEvents" >> ReadKafkaEvents(
            GameEvent, args.bootstrap_servers, args.input_topic, max_records=args.max_records,
            idle_timeout_seconds=args.idle_timeout_seconds,
            batch_max_records_per_partition=args.batch_max_records_per_partition)
        _ = (events.parsed
             | "KillAtRead" >> beam.ParDo(KillOnce(
                 faults.fault_dir, "read", EventOfUserFrom("u1", faults.fault_from_seconds)))
             | "TeamScores" >> TeamScores(args.window_seconds, args.early_seconds,
                                          args.allowed_lateness)
             | "Describe" >> DescribePanes()
             | "KillAtWrite" >> beam.ParDo(KillOnce(faults.fault_dir, "write",
                                                    _first_on_time_pane_of_red))
             | "PanesToKafka" >> WritePanesToKafka(args.bootstrap_servers, args.output_topic,
                                                   exactly_once=args.exactly_once))


if __name__ == "__main__":
    run(sys.argv[1:])
