"""Where a job's results go: JSON-lines files, or the console, one line per pane.

Every job writes three kinds of records, and never drops any of them silently:

* **panes** (:class:`WritePanes`): ``(key, aggregate)`` elements described by
  :class:`triggers.panes.DescribePanes`: key, value, window, timestamp and pane (timing
  EARLY / ON_TIME / LATE, index, first / last). With an output prefix they go to
  ``<prefix>.jsonl`` as ``json.dumps(..., sort_keys=True)``; without one they are printed
  as they fire, e.g. ``[12:00:00, 12:01:00)  red  sum=42  EARLY #0``.
* **dead letters** (:class:`WriteDeadLetters`): records parsing rejected, to
  ``<prefix>-dead-letter.jsonl``, or logged as warnings.
* **other streams** (:class:`WriteRecords`), such as page-view alerts, to
  ``<prefix>-<name>.jsonl``, or printed.

Files are written with Beam's ``WriteToText``, one file per output (no shard suffix), and
only when there is something to write. A replayed stream (TestStream) is finite: its records
are gathered into one window spanning the whole run and written when the stream ends, so
that late panes are written too (a file sink windowed by the panes' own windows would
drop them).

Example:

>>> format_pane({"key": "red", "value": 42, "window": {"start": 0.0, "end": 60.0},
...              "timestamp": 59.999999,
...              "pane": {"timing": "EARLY", "index": 0, "is_first": True, "is_last": False}})
'[00:00:00, 00:01:00)  red         sum=42        EARLY   #0'
"""

from __future__ import annotations

import contextlib
import datetime
import math
import json
import logging
import signal
import sys
import threading
from typing import Any, Callable, Optional

import apache_beam as beam
from apache_beam.io.textio import WriteToText
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.runners.runner import PipelineResult
from apache_beam.transforms import window as beam_window

from triggers.panes import DescribePanes

_LOGGER = logging.getLogger(__name__)

#: Namespace of the counters this module keeps ("panes", "dead_letters", "records").
METRICS_NAMESPACE = "pipelines.output"

#: File name suffix of every output file.
SUFFIX = ".jsonl"

# One window for a whole replayed run: [0, 1e10 s) reaches the year 2286, and its end never
# passes before the stream ends, so the file sink's grouping drops nothing.
_WHOLE_RUN = beam_window.FixedWindows(10_000_000_000)


def _into_whole_run(line: str, timestamp=beam.DoFn.TimestampParam):
    # Records stamped at the end of the global window (a count window flushed at end of input)
    # would fall in a FixedWindow reaching past the end of time: keep them in the run's window.
    if timestamp >= 10_000_000_000:
        return beam_window.TimestampedValue(line, 10_000_000_000 - 1)
    return line


def json_ready(value: Any) -> Any:
    """Turn NamedTuples (events, dead letters) into dicts, recursively, for ``json.dumps``."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {name: json_ready(item) for name, item in value._asdict().items()}
    if isinstance(value, dict):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    return value


def to_json_line(record: Any) -> str:
    """One JSON line (keys sorted, so output is reproducible) for a record."""
    return json.dumps(json_ready(record), sort_keys=True)


def output_path(prefix: str, name: Optional[str] = None) -> str:
    """``<prefix>.jsonl``, or ``<prefix>-<name>.jsonl`` for a named side output.

    A prefix already ending in ``.jsonl`` is used without it, so ``--output out.jsonl`` works.

    >>> output_path("out/scores"), output_path("out/scores.jsonl", "dead-letter")
    ('out/scores.jsonl', 'out/scores-dead-letter.jsonl')
    """
    if prefix.endswith(SUFFIX):
        prefix = prefix[: -len(SUFFIX)]
    return f"{prefix}-{name}{SUFFIX}" if name else f"{prefix}{SUFFIX}"


def clock_text(seconds: Optional[float], missing: str = "end of time",
               millis: bool = True) -> str:
    """``HH:MM:SS`` (UTC) of ``seconds`` since the epoch, ``.mmm`` added when not whole (and
    ``millis``); ``missing`` for None; the ends of time for infinities (the global window).

    >>> clock_text(3661.25), clock_text(3661.25, millis=False), clock_text(None, missing="-")
    ('01:01:01.250', '01:01:01', '-')
    >>> clock_text(float("-inf")), clock_text(float("inf"))
    ('start of time', 'end of time')
    """
    if seconds is None:
        return missing
    if math.isinf(seconds):
        return "end of time" if seconds > 0 else "start of time"
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    text = moment.strftime("%H:%M:%S")
    return text if not millis or moment.microsecond == 0 else f"{text}.{moment.microsecond // 1000:03d}"


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return json.dumps(json_ready(value), sort_keys=True) if not isinstance(value, str) else value


def format_pane(record: dict, value_name: str = "sum") -> str:
    """A readable one-line rendering of a described pane (see the module example).

    Also renders count-window records (``window`` holds ``count``, ``first_timestamp`` and
    ``last_timestamp``; ``pane`` holds ``reason`` and ``complete``).
    """
    window = record["window"]
    if isinstance(window, dict) and "start" in window:
        where = f"[{clock_text(window['start'])}, {clock_text(window['end'])})"
    elif isinstance(window, dict) and "count" in window:
        where = (f"[{clock_text(window['first_timestamp'])} .. {clock_text(window['last_timestamp'])}]"
                 f" {window['count']} items")
    else:
        where = str(window)
    pane = record["pane"]
    key = "-" if record["key"] is None else str(record["key"])
    value = f"{value_name}={_format_value(record['value'])}"
    if "timing" in pane:
        when = f"{pane['timing']:<7} #{pane['index']}" + ("  (last)" if pane["is_last"] else "")
    else:
        when = pane["reason"] + ("" if pane["complete"] else " (incomplete)")
    return f"{where}  {key:<10}  {value:<12}  {when}"


class _PrintFn(beam.DoFn):
    """Print one line per element, as it arrives: the console is the live view of a job."""

    def __init__(self, render: Callable[[Any], str], counter: str) -> None:
        self._render = render
        self._counter = Metrics.counter(METRICS_NAMESPACE, counter)

    def process(self, element):
        self._counter.inc()
        print(self._render(element), flush=True)


class _WarnFn(beam.DoFn):
    def __init__(self, what: str, counter: str) -> None:
        self._what = what
        self._counter = Metrics.counter(METRICS_NAMESPACE, counter)

    def process(self, element):
        self._counter.inc()
        _LOGGER.warning("%s: %s", self._what, to_json_line(element))


class _CountFn(beam.DoFn):
    def __init__(self, counter: str) -> None:
        self._counter = Metrics.counter(METRICS_NAMESPACE, counter)

    def process(self, element):
        self._counter.inc()
        yield element


class WriteJsonLines(beam.PTransform):
    """Write records as JSON lines to exactly ``path`` with ``WriteToText``.

    Bounded input is written as Beam writes any batch. Unbounded input (a replayed stream) is
    first gathered into one window spanning the run, then written when the stream ends.
    ``counter`` names the counter (namespace :data:`METRICS_NAMESPACE`) of records written.
    """

    def __init__(self, path: str, counter: str = "records", label: Optional[str] = None) -> None:
        super().__init__(label)
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty file path, got {path!r}")
        self._path = path
        self._counter = counter

    def expand(self, pcoll):
        lines = (pcoll
                 | "Count" >> beam.ParDo(_CountFn(self._counter))
                 | "ToJson" >> beam.Map(to_json_line))
        if not pcoll.is_bounded:
            lines = (lines
                     | "IntoWholeRun" >> beam.Map(_into_whole_run)
                     | "WholeRun" >> beam.WindowInto(_WHOLE_RUN))
        return lines | "Write" >> WriteToText(
            self._path, shard_name_template="", skip_if_empty=True)


class WritePanes(beam.PTransform):
    """Describe ``(key, aggregate)`` panes and write them to ``<output>.jsonl``, or print them.

    ``value_name`` labels the value on the console (``sum=42``, ``views=7``, ``mean=21.50``).
    ``describe=False`` takes records that are already described (dicts of the same shape,
    such as count windows). ``copy_to`` also writes the described panes to that JSON-lines
    file (for ``--plot``, which reads them after the run). Returns the described panes, so
    that a job can write them elsewhere too.
    """

    def __init__(self, output: Optional[str], value_name: str = "value", describe: bool = True,
                 label: Optional[str] = None, copy_to: Optional[str] = None) -> None:
        super().__init__(label)
        self._output = output
        self._value_name = value_name
        self._describe = describe
        self._copy_to = copy_to

    def expand(self, pcoll):
        described = pcoll | "DescribePanes" >> DescribePanes() if self._describe else pcoll
        if self._copy_to:
            _ = described | "CopyForPlot" >> WriteJsonLines(self._copy_to, "plotted_panes")
        if self._output:
            _ = described | "WriteFile" >> WriteJsonLines(output_path(self._output), "panes")
        else:
            value_name = self._value_name
            _ = described | "Print" >> beam.ParDo(
                _PrintFn(lambda record: format_pane(record, value_name), "panes"))
        # The described panes, for more sinks (e.g. a Kafka topic).
        return described


class WriteDeadLetters(beam.PTransform):
    """Write dead letters to ``<output>-dead-letter.jsonl``, or log each as a warning."""

    def __init__(self, output: Optional[str], label: Optional[str] = None) -> None:
        super().__init__(label)
        self._output = output

    def expand(self, pcoll):
        if self._output:
            return pcoll | "WriteFile" >> WriteJsonLines(
                output_path(self._output, "dead-letter"), "dead_letters")
        return pcoll | "Warn" >> beam.ParDo(_WarnFn("dead letter", "dead_letters"))


class WriteRecords(beam.PTransform):
    """Write a named side stream to ``<output>-<name>.jsonl``, or print ``<name>: <json>``."""

    def __init__(self, output: Optional[str], name: str, label: Optional[str] = None) -> None:
        super().__init__(label)
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty output name, got {name!r}")
        self._output = output
        self._name = name

    def expand(self, pcoll):
        if self._output:
            return pcoll | "WriteFile" >> WriteJsonLines(
                output_path(self._output, self._name), self._name)
        name = self._name
        return pcoll | "Print" >> beam.ParDo(
            _PrintFn(lambda record: f"{name}: {to_json_line(record)}", name))


def run_to_completion(pipeline: beam.Pipeline, job: str, note: Optional[str] = None
                      ) -> PipelineResult:
    """Run ``pipeline``, wait for it to finish, and report its counters on stderr (batch only).

    ``note`` (e.g. what a replay will do) is printed to stderr first. Ctrl-C (SIGINT) or
    SIGTERM while waiting cancels the run (an unbounded Kafka job ends that way) and returns
    its result; during a run that blocks in ``run()`` it exits with code 130.

    Streaming runs report no counter summary: Beam's DirectRunner in streaming mode (2.77)
    reports only each step's last bundle, and a wrong number is worse than none.
    """
    if note:
        print(f"{job}: {note}", file=sys.stderr, flush=True)
    with _stop_on_signals():
        try:
            result = pipeline.run()
        except KeyboardInterrupt:
            # A runner that runs the pipeline inside run() (Beam's DirectRunner).
            print(f"{job}: stopped (interrupted)", file=sys.stderr, flush=True)
            raise SystemExit(130) from None
        try:
            result.wait_until_finish()
        except KeyboardInterrupt:
            # An unbounded job ends here: cancel the run, so the runner stops what it started.
            state = result.cancel()
            print(f"{job}: stopped (interrupted); the pipeline is {state}", file=sys.stderr,
                  flush=True)
            return result
    if not pipeline.options.view_as(StandardOptions).streaming:
        summary = summarize(result)
        if summary:
            print(f"{job} finished: {summary}", file=sys.stderr)
    return result


@contextlib.contextmanager
def _stop_on_signals():
    """SIGTERM interrupts like Ctrl-C (SIGINT) while a job runs, in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signal, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def summarize(result: PipelineResult) -> str:
    """A one-line summary of every counter the run committed, e.g. ``parsed=297 rejected=3``.

    Runners that do not report metrics give an empty string.
    """
    try:
        counters = result.metrics().query()["counters"]
    except (NotImplementedError, AttributeError, KeyError):
        return ""
    totals = {}
    for counter in counters:
        name = counter.key.metric.name
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[name] = totals.get(name, 0) + (value or 0)
    return " ".join(f"{name}={totals[name]}" for name in sorted(totals))
