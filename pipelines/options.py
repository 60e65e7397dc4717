"""Command-line options shared by every job: input, output, runner, windows and triggers.

Each job builds its parser with :func:`job_parser` (common options, the job's own defaults),
adds what only it needs, and calls :func:`parse_job_options`, which validates everything
before any pipeline is built: a bad value (unknown option, negative size, malformed number,
input that matches no file, unknown runner) ends the program with a message naming it and
exit code 2 (``parser.error``). Options the job does not know but Beam does (``--streaming``,
``--direct_num_workers``, ...) go to Beam's ``PipelineOptions``.

Where the input comes from (``--source``):

* ``generator`` (the default without ``--input``): :mod:`pipelines.generator` makes
  ``--events`` events from ``--seed``; :mod:`pipelines.replay` releases them at their arrival
  times through a TestStream, in streaming mode. Early, on-time and late panes appear, and
  nothing needs to be installed or downloaded.
* ``file`` (the default with ``--input``): read the files matching ``--input`` as a bounded
  input (batch; add ``--streaming`` to run the same bounded input in streaming mode).
* ``replay``: read the files matching ``--input`` (JSON lines, as the generator writes
  them) and replay them by their ``arrival_time`` field, like ``generator``.
* ``kafka``: read JSON events from ``--input_topic`` at ``--bootstrap_servers`` (unbounded,
  streaming; ``--max_records N`` per partition or ``--bounded`` end the read), event time
  from each event's ``timestamp`` field; panes also go to ``--output_topic`` and dead
  letters to ``--dead_letter_topic`` when given (see :mod:`pipelines.kafka_events`).

Example:

>>> parser = job_parser("team_scores", "Team scores.", window_seconds=60, early_seconds=20,
...                     allowed_lateness=120)
>>> args, beam_options = parse_job_options(parser, ["--events", "50", "--seed", "3"])
>>> args.source, args.events, args.window_seconds, beam_options.view_as(StandardOptions).streaming
('generator', 50, 60.0, True)
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import List, Optional, Sequence, Tuple

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

# Imported for its side effect: Beam only parses options of PipelineOptions subclasses that
# are loaded, and the SparkRunner's (--spark_conf, --bundle_size, ...) must be accepted on
# every job's command line.
import runners.spark.options  # noqa: F401
from runners.resolution import resolve_runner
from pipelines.kafka_security_options import (add_kafka_security_options,
                                              given_security_options, kafka_security)

SOURCES = ("generator", "file", "replay", "kafka")
#: Where --source kafka starts reading each partition.
KAFKA_STARTS = ("earliest", "latest", "committed")
FORMATS = ("json", "csv")
#: File types --plot can write.
PLOT_FORMATS = (".png", ".svg", ".pdf")

_EPILOG = """\
Outputs: without --output, panes are printed one per line as they fire and dead letters are
logged as warnings. With --output PREFIX, panes go to PREFIX.jsonl (one JSON object per pane:
key, value, window, timestamp, pane {timing, index, is_first, is_last}) and dead letters to
PREFIX-dead-letter.jsonl, data dropped for lateness to PREFIX-dropped.jsonl (each written
only when there are some).

Any other option is passed to Beam's PipelineOptions (e.g. --streaming, --direct_num_workers).
"""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a duration in seconds greater than zero."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0 seconds")
    return value


def non_negative_seconds(text: str) -> float:
    """argparse type: a duration in seconds, zero or more."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number greater than zero."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: a whole number, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def job_parser(
    prog: str,
    description: str,
    *,
    window_seconds: float,
    early_seconds: float,
    allowed_lateness: float,
    events: int = 300,
) -> argparse.ArgumentParser:
    """A parser with the options every job shares, defaulted for this job.

    Add the job's own options to the returned parser, then call :func:`parse_job_options`.
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m pipelines.{prog}",
        description=description,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # Abbreviations would swallow Beam's options (--stream would mean --streaming's prefix).
        allow_abbrev=False,
    )
    source = parser.add_argument_group("input")
    source.add_argument("--input", metavar="GLOB",
                        help="files to read (a glob); absent: the bundled event generator")
    source.add_argument("--format", choices=FORMATS, default="json",
                        help="input record format for --source file (default: json lines)")
    source.add_argument("--csv_columns", metavar="A,B,...",
                        help="CSV column names in order (default: the event's fields, then "
                        "arrival_time, as `python -m pipelines.generator --format csv` writes)")
    source.add_argument("--source", choices=SOURCES,
                        help="generator: generated events replayed as a stream (default without "
                        "--input); file: read --input as a bounded input (default with --input); "
                        "replay: replay --input JSON lines by their arrival_time; kafka: read "
                        "--input_topic (default with --input_topic)")
    source.add_argument("--seed", type=int, default=42, help="generator seed (default: 42)")
    source.add_argument("--events", type=non_negative_int, default=events,
                        help=f"how many events to generate (default: {events})")
    source.add_argument("--tick_seconds", type=positive_seconds, default=1.0,
                        help="replay granularity: events arriving within one tick are released "
                        "together (default: 1)")
    source.add_argument("--watermark_lag_seconds", type=non_negative_seconds, default=10.0,
                        help="replay watermark: newest event time seen minus this (default: 10)")

    kafka = parser.add_argument_group("kafka (--source kafka)")
    kafka.add_argument("--bootstrap_servers", metavar="HOST:PORT[,HOST:PORT]",
                       help="the Kafka brokers (e.g. the one `make kafka` prints)")
    kafka.add_argument("--input_topic", metavar="TOPIC",
                       help="topic of JSON events (event time: their timestamp field)")
    kafka.add_argument("--output_topic", metavar="TOPIC",
                       help="also write every pane there, as JSON keyed by the pane's key")
    kafka.add_argument("--dead_letter_topic", metavar="TOPIC",
                       help="also write every dead letter there (original bytes; reason, "
                       "source and Kafka coordinates as headers)")
    kafka.add_argument("--start", choices=KAFKA_STARTS, default="earliest",
                       help="where each partition starts (default: earliest; committed needs "
                       "--group_id)")
    kafka.add_argument("--group_id", metavar="GROUP",
                       help="consumer group the read offsets are committed to")
    kafka.add_argument("--max_records", type=positive_int, metavar="N",
                       help="stop each partition after N records (default: unbounded)")
    kafka.add_argument("--bounded", action="store_true",
                       help="stop each partition at the end of its log as seen at start")
    kafka.add_argument("--idle_timeout_seconds", type=positive_seconds, default=10.0,
                       help="a partition with nothing new for this long stops holding the "
                       "watermark back (default: 10)")
    kafka.add_argument("--batch_max_records", type=positive_int, metavar="N",
                       help="SparkRunner streaming: read at most N records a micro-batch, in "
                       "all partitions (default: what the log holds)")
    kafka.add_argument("--batch_max_records_per_partition", type=positive_int, metavar="N",
                       help="SparkRunner streaming: at most N records of each partition a "
                       "micro-batch (default: what the log holds)")
    kafka.add_argument("--exactly_once", action="store_true",
                       help="write --output_topic in Kafka transactions, each micro-batch's "
                       "panes once even after a crash (read it read_committed; needs a broker "
                       "with transactions, and --checkpoint_dir to resume; default: "
                       "at-least-once)")
    add_kafka_security_options(parser.add_argument_group(
        "kafka security (TLS, SASL; secrets only from an environment variable or a file)"))

    model = parser.add_argument_group("windows and triggers")
    model.add_argument("--window_seconds", type=positive_seconds, default=float(window_seconds),
                       help=f"event-time window size (default: {window_seconds:g})")
    model.add_argument("--early_seconds", type=non_negative_seconds, default=float(early_seconds),
                       help="early (speculative) firing every this many seconds of processing "
                       f"time; 0: no early firings (default: {early_seconds:g}; whole seconds; "
                       "not in batch, where no processing time passes)")
    model.add_argument("--allowed_lateness", type=non_negative_seconds,
                       default=float(allowed_lateness),
                       help="how long after the watermark passes a window late data still "
                       f"updates it, in seconds (default: {allowed_lateness:g})")

    run = parser.add_argument_group("output and runner")
    run.add_argument("--output", metavar="PREFIX",
                     help="write PREFIX.jsonl (+ PREFIX-dead-letter.jsonl, ...); absent: print")
    run.add_argument("--runner", default="DirectRunner",
                     help="DirectRunner (default) or SparkRunner (the project's runner on "
                     "PySpark), or any Beam runner name")
    pictures = parser.add_argument_group("pictures")
    pictures.add_argument("--plot", metavar="FILE.png",
                          help="after a replayed run, draw the pane diagram (processing time x "
                          "event time: inputs, watermark, windows, early/on-time/late panes) to "
                          "FILE (.png, .svg or .pdf) and throughput and watermark lag to "
                          "FILE-throughput")
    pictures.add_argument("--graph", metavar="FILE",
                          help="write the pipeline graph as Graphviz DOT (fused stages on the "
                          "SparkRunner; Beam's transforms otherwise); FILE.svg / FILE.png also "
                          "renders it when Graphviz's `dot` is installed")
    return parser


def _is_beam_direct_runner(runner) -> bool:
    from apache_beam.runners.direct.direct_runner import DirectRunner

    return isinstance(runner, DirectRunner)


def _unknown_beam_options(arguments: List[str]) -> List[str]:
    """The arguments neither the job nor Beam's PipelineOptions know."""
    options = PipelineOptions(arguments)
    known = set(options.get_all_options())
    unknown = set(options.get_all_options(retain_unknown_options=True)) - known
    names = sorted(f"--{name}" for name in unknown)
    # Bare words that follow no option are not options at all (Beam would ignore them).
    previous = None
    for argument in arguments:
        if not argument.startswith("-") and (previous is None or "=" in previous
                                             or not previous.startswith("--")):
            names.append(argument)
        previous = argument
    return names


def _check_input(parser: argparse.ArgumentParser, pattern: str) -> None:
    try:
        matches = FileSystems.match([pattern])[0].metadata_list
    except Exception as error:  # BeamIOError and friends: report, do not crash
        parser.error(f"--input={pattern}: cannot list files ({error})")
    if not matches:
        parser.error(f"--input={pattern}: no file matches; check the path or glob")


_KAFKA_OPTIONS = ("bootstrap_servers", "input_topic", "output_topic", "dead_letter_topic",
                  "group_id", "max_records", "batch_max_records",
                  "batch_max_records_per_partition")


def _check_kafka(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    args.kafka_security = None
    if args.source != "kafka":
        given = [f"--{name}" for name in _KAFKA_OPTIONS if getattr(args, name) is not None]
        given += ["--bounded"] if args.bounded else []
        given += ["--exactly_once"] if args.exactly_once else []
        given += given_security_options(args)
        if given:
            parser.error(f"{', '.join(given)}: Kafka options need --source kafka")
        return
    if not args.bootstrap_servers or not args.input_topic:
        parser.error("--source kafka needs --bootstrap_servers HOST:PORT and --input_topic TOPIC")
    if args.input:
        parser.error("--input is read by --source file or replay, not by --source kafka")
    if args.start == "committed" and not args.group_id:
        parser.error("--start committed reads a consumer group's offsets: pass --group_id")
    if args.exactly_once and not args.output_topic:
        parser.error("--exactly_once is how --output_topic is written: pass --output_topic")
    try:
        from transforms.kafka.config import servers_list

        servers_list(args.bootstrap_servers)
    except ValueError as error:
        parser.error(f"--bootstrap_servers: {error}")
    try:
        # Validated now (files readable, secrets present) so a mistake names the option.
        args.kafka_security = kafka_security(args)
    except ValueError as error:
        parser.error(str(error))


def parse_job_options(
    parser: argparse.ArgumentParser, argv: Optional[Sequence[str]] = None
) -> Tuple[argparse.Namespace, PipelineOptions]:
    """Parse and validate ``argv``; return the job's options and Beam's PipelineOptions.

    The namespace gets ``source`` resolved and ``runner`` replaced by what
    ``beam.Pipeline(runner=...)`` accepts (via :func:`runners.resolve_runner`). Exits with
    code 2 and a message on any bad option.
    """
    args, rest = parser.parse_known_args(argv)
    unknown = _unknown_beam_options(rest)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} "
                     "(neither this job's nor Beam's pipeline options; see --help)")
    if args.source is None:
        args.source = "file" if args.input else "kafka" if args.input_topic else "generator"
    _check_kafka(parser, args)
    if args.source in ("file", "replay"):
        if not args.input:
            parser.error(f"--source={args.source} needs --input GLOB")
        _check_input(parser, args.input)
    elif args.input:
        parser.error("--input is read by --source file or replay, not by --source generator")
    if args.plot is not None:
        if args.source == "kafka":
            parser.error("--plot draws a replayed stream; for Kafka, `python -m pipelines.live "
                         "--plot FILE.png` draws the panes it saw (make run does)")
        if args.source == "file":
            parser.error("--plot draws a replayed stream (--source generator or replay); a "
                         "batch read of files has no processing time to draw")
        if not args.plot.lower().endswith(PLOT_FORMATS):
            parser.error(f"--plot={args.plot}: name a {', '.join(PLOT_FORMATS)} file")
    if args.graph is not None and not args.graph:
        parser.error("--graph needs a file name, e.g. --graph out/graph.dot")
    if args.source == "replay" and args.format != "json":
        parser.error("--source replay reads JSON lines; use --format json or --source file")
    if args.csv_columns is not None:
        if args.format != "csv":
            parser.error("--csv_columns applies to --format csv only")
        args.csv_columns = [name.strip() for name in args.csv_columns.split(",")]
        if not all(args.csv_columns):
            parser.error("--csv_columns must be comma-separated names, none empty")
    try:
        runner = resolve_runner(args.runner)
        if isinstance(runner, str):
            # Fail now, with Beam's list of valid names, rather than when the pipeline starts.
            from apache_beam.runners.runner import create_runner
            runner = create_runner(runner)
    except (ValueError, ImportError) as error:
        parser.error(f"--runner={args.runner}: {error}")
    args.runner = runner

    beam_options = PipelineOptions(rest)
    if args.source in ("generator", "replay", "kafka"):
        # A replay is a TestStream and a topic is a stream: both need the streaming mode.
        beam_options.view_as(StandardOptions).streaming = True
    if not beam_options.view_as(StandardOptions).streaming:
        # A batch reads a finished input at once: no processing time passes between elements,
        # and Beam's batch runner has no processing-time clock for such triggers at all.
        args.early_seconds = 0.0
    if (args.source == "kafka" and _is_beam_direct_runner(args.runner)
            and args.max_records is None and not args.bounded):
        parser.error("--source kafka on Beam's DirectRunner: it reads a topic to its end before "
                     "anything downstream runs, so an unbounded read shows nothing; pass "
                     "--max_records N or --bounded, or use --runner SparkRunner")
    if args.source == "kafka" and _is_beam_direct_runner(args.runner) and args.early_seconds:
        # Beam 2.77's DirectRunner hands a pipeline without TestStream to its FnApiRunner,
        # which reads the Kafka partitions to their end (--max_records / --bounded) and has
        # no processing-time clock for early firings (it would fail on them).
        print(f"{parser.prog}: early firings disabled: Beam's DirectRunner runs a Kafka read "
              "without a processing-time clock (use --runner SparkRunner for early panes)",
              file=sys.stderr)
        args.early_seconds = 0.0
    return args, beam_options
