"""The TestStream pipelines of ``python -m bench.teststream``: the shapes the model tests
prove (fixed, sliding and session windows; early, on-time and late firings; a stateful DoFn
with event-time timers; a side input the main input waits for).

Each builder takes a pipeline and a directory, and writes what the pipeline emits there (one
JSON file per element: its value, window, timestamp and pane), so the runs of each engine
can be compared.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Callable, Dict, List

import apache_beam as beam
from apache_beam.testing import test_stream
from apache_beam.transforms import trigger, userstate, window
from apache_beam.transforms.timeutil import TimeDomain

TimestampedValue = window.TimestampedValue


class WriteElements(beam.DoFn):
    """Each element with its window, timestamp and pane, as a JSON file in ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                window_=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        bounds = ([float(window_.start), float(window_.end)]
                  if hasattr(window_, "start") else "global")
        record = [_plain(element), bounds, float(timestamp),
                  [pane.timing, pane.index, pane.is_first, pane.is_last]]
        with open(os.path.join(self.directory, uuid.uuid4().hex + ".json"), "w") as file:
            json.dump(record, file)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def read_elements(directory: str) -> List[str]:
    """What a run wrote, as sorted canonical JSON."""
    found = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as file:
            found.append(json.dumps(json.load(file), sort_keys=True))
    return sorted(found)


def _scores(stream: Any, batches: int = 6) -> Any:
    """Keyed scores over several batches, the watermark moving, then late data."""
    for batch in range(batches):
        stream = stream.add_elements([TimestampedValue((f"team-{n % 3}", batch + n), batch * 4 + n)
                                      for n in range(4)])
        if batch % 2:
            stream = stream.advance_watermark_to(batch * 4 + 2)
    return (stream.advance_watermark_to(40)
            .add_elements([TimestampedValue(("team-0", 100), 3), TimestampedValue(("team-1", 7), 6)])
            .advance_watermark_to_infinity())


def fixed_early_on_time_late(pipeline: beam.Pipeline, out: str) -> None:
    _ = (pipeline | _scores(test_stream.TestStream())
         | beam.WindowInto(window.FixedWindows(10), trigger=trigger.AfterWatermark(
             early=trigger.AfterCount(2), late=trigger.AfterCount(1)),
             accumulation_mode=trigger.AccumulationMode.ACCUMULATING, allowed_lateness=60)
         | beam.CombinePerKey(sum) | beam.ParDo(WriteElements(out)))


def sliding_windows(pipeline: beam.Pipeline, out: str) -> None:
    _ = (pipeline | _scores(test_stream.TestStream())
         | beam.WindowInto(window.SlidingWindows(10, 5), allowed_lateness=30,
                           trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                           accumulation_mode=trigger.AccumulationMode.DISCARDING)
         | beam.GroupByKey() | beam.MapTuple(lambda key, values: (key, sorted(values)))
         | beam.ParDo(WriteElements(out)))


def merging_sessions(pipeline: beam.Pipeline, out: str) -> None:
    _ = (pipeline | _scores(test_stream.TestStream())
         | beam.WindowInto(window.Sessions(3), allowed_lateness=60,
                           trigger=trigger.AfterWatermark(early=trigger.AfterCount(3),
                                                          late=trigger.AfterCount(1)),
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
         | beam.CombinePerKey(sum) | beam.ParDo(WriteElements(out)))


class BufferUntilWindowEnd(beam.DoFn):
    """A stateful DoFn: a key's values buffered, emitted by an event-time timer."""

    BUFFER = userstate.BagStateSpec("buffer", beam.coders.VarIntCoder())
    FLUSH = userstate.TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, element, window_=beam.DoFn.WindowParam,
                buffer=beam.DoFn.StateParam(BUFFER), flush=beam.DoFn.TimerParam(FLUSH)):
        buffer.add(element[1])
        flush.set(window_.max_timestamp())

    @userstate.on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, buffer=beam.DoFn.StateParam(BUFFER)):
        yield key, sorted(buffer.read())
        buffer.clear()


def stateful_timers(pipeline: beam.Pipeline, out: str) -> None:
    _ = (pipeline | _scores(test_stream.TestStream())
         | beam.WindowInto(window.FixedWindows(10))
         | beam.ParDo(BufferUntilWindowEnd()) | beam.ParDo(WriteElements(out)))


def side_input_wait(pipeline: beam.Pipeline, out: str) -> None:
    stream = (test_stream.TestStream()
              .advance_watermark_to(3, tag="main").add_elements(["a1"], tag="main")
              .advance_watermark_to(8, tag="main").add_elements(["a2"], tag="main")
              .add_elements([TimestampedValue(("k", 100), 2)], tag="side")
              .add_elements([TimestampedValue(("k", 400), 7)], tag="side")
              .advance_watermark_to_infinity(tag="main")
              .advance_watermark_to_infinity(tag="side"))
    inputs = pipeline | stream
    side = (inputs["side"]
            | "SideWindows" >> beam.WindowInto(window.FixedWindows(5), trigger=trigger.AfterWatermark(
                early=trigger.AfterCount(1)), accumulation_mode=trigger.AccumulationMode.DISCARDING)
            | beam.CombinePerKey(sum) | beam.Values())
    _ = (inputs["main"] | "MainWindows" >> beam.WindowInto(window.FixedWindows(5))
         | beam.Map(lambda element, totals: (element, list(totals)), beam.pvalue.AsList(side))
         | beam.ParDo(WriteElements(out)))


#: name -> builder(pipeline, output directory)
PIPELINES: Dict[str, Callable[[beam.Pipeline, str], None]] = {
    "fixed: early, on-time, late": fixed_early_on_time_late,
    "sliding: on-time, late": sliding_windows,
    "sessions: merging, early, late": merging_sessions,
    "stateful DoFn with timers": stateful_timers,
    "side input the main input waits for": side_input_wait,
}
