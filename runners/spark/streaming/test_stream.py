"""TestStream as a micro-batch source: one event per batch, deterministically.

Each batch takes the next event of the TestStream, as the DirectRunner's
``_TestStreamEvaluator`` reads one event per step and lets the pipeline settle before the
next: an ``ElementEvent`` delivers its elements (in the global window, at their
timestamps) to the output of its tag, a ``WatermarkEvent`` advances that output's
watermark, a ``ProcessingTimeEvent`` advances the loop's clock. After the last event one
more batch advances every output's watermark to the end of time, so the job can finish.
Its position (next event, watermarks) is checkpointed (:meth:`TestStreamSource.snapshot`).
"""

from __future__ import annotations

from typing import Any, Dict, List

from apache_beam.testing.test_stream import ElementEvent, Event, ProcessingTimeEvent, WatermarkEvent
from apache_beam.transforms.window import GlobalWindows
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp

from runners.spark.beam_internals import beam_runner_api_pb2
from runners.spark.planning.execution_plan import StageSpec
from runners.spark.worker.components import SharedComponents, encode_chunks


def _tag_name(tag: Any) -> str:
    return "None" if tag is None else str(tag)


class TestStreamSource:
    """The events of one TestStream stage, delivered batch by batch.

    Args:
      stage: a ``TEST_STREAM_STAGE`` of the plan.
      components: the pipeline's components (for the element and output coders).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, stage: StageSpec, components: SharedComponents) -> None:
        payload = beam_runner_api_pb2.TestStreamPayload.FromString(stage.descriptor)
        coder = components.coder(payload.coder_id)
        self.events: List[Any] = [Event.from_runner_api(event, coder) for event in payload.events]
        self.name = stage.name
        self.buffers = {tag: buffer_id for tag, buffer_id in stage.outputs}
        self.output_impls = {tag: components.coder_impl(coder_id)
                             for (tag, _), coder_id in zip(stage.outputs, stage.output_coders)}
        self.watermarks: Dict[str, Timestamp] = {tag: MIN_TIMESTAMP for tag in self.buffers}
        self._position = 0
        self.finished = False

    def next_batch(self) -> "tuple[Dict[bytes, List[bytes]], float]":
        """The next batch: ({buffer id: encoded chunks}, processing time to advance by).

        Watermark changes are applied to :attr:`watermarks`.
        """
        if self._position >= len(self.events):
            for tag in self.watermarks:
                self.watermarks[tag] = MAX_TIMESTAMP
            self.finished = True
            return {}, 0.0
        event = self.events[self._position]
        self._position += 1
        if isinstance(event, ElementEvent):
            tag = _tag_name(event.tag)
            if tag not in self.buffers:  # an output nobody reads
                return {}, 0.0
            values = (GlobalWindows.windowed_value(element.value, timestamp=element.timestamp)
                      for element in event.timestamped_values)
            return {self.buffers[tag]: list(encode_chunks(self.output_impls[tag], values))}, 0.0
        if isinstance(event, WatermarkEvent):
            tag = _tag_name(event.tag)
            if tag in self.watermarks:
                self.watermarks[tag] = max(self.watermarks[tag], Timestamp.of(event.new_watermark))
            return {}, 0.0
        if isinstance(event, ProcessingTimeEvent):
            return {}, float(event.advance_by)
        raise ValueError(f"unknown TestStream event {event!r}")

    def drain(self) -> None:
        """End the stream here, as if its remaining events were one advance of every
        watermark to the end of time (the run is being drained)."""
        self._position = len(self.events)
        for tag in self.watermarks:
            self.watermarks[tag] = MAX_TIMESTAMP
        self.finished = True

    def snapshot(self) -> Dict[str, Any]:
        """The source's position as plain data, for a checkpoint."""
        return {"kind": "test_stream", "stage": self.name, "events": len(self.events),
                "position": self._position,
                "watermarks": {tag: watermark.micros
                               for tag, watermark in self.watermarks.items()},
                "finished": self.finished}

    def restore(self, snapshot: Dict[str, Any]) -> None:
        """Resume at a checkpointed position (ValueError if it is another TestStream's)."""
        if (snapshot.get("kind") != "test_stream" or snapshot.get("stage") != self.name
                or snapshot["events"] != len(self.events)
                or set(snapshot["watermarks"]) != set(self.watermarks)):
            raise ValueError(
                f"the checkpoint's source {snapshot.get('kind')} with "
                f"{snapshot.get('events')} events is not this TestStream "
                f"({len(self.events)} events)")
        self._position = snapshot["position"]
        self.watermarks = {tag: Timestamp(micros=micros)
                           for tag, micros in snapshot["watermarks"].items()}
        self.finished = snapshot["finished"]

    def watermark_of(self, buffer_id: bytes) -> Timestamp:
        for tag, written in self.buffers.items():
            if written == buffer_id:
                return self.watermarks[tag]
        return MAX_TIMESTAMP
