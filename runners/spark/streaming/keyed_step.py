"""A keyed step across micro-batches: a GroupByKey's or a stateful stage's state and watermarks.

The step's state lives in a Spark RDD of ``(partition, ("state", blob))`` records, one per
key partition, replaced by each batch's result (:mod:`~runners.spark.streaming.stages`).
Its watermarks follow Beam's DirectRunner: the output watermark is the input watermark, or
for a GroupByKey ``min(input watermark, the keys' watermark holds)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp


class KeyedStep:
    """A GroupByKey or stateful stage across batches: its state RDD and watermarks."""

    def __init__(self, name: str, empty_state: Any) -> None:
        self.name = name
        self.state = empty_state
        self.input_watermark = MIN_TIMESTAMP
        self.output_watermark = MIN_TIMESTAMP
        self.hold = MAX_TIMESTAMP
        self.keys = 0  # keys (or state cells and timers) held
        self.state_bytes = 0  # encoded state held
        self.inputs = 0  # elements received in the last batch
        self.outputs = 0  # elements emitted in the last batch
        self.clock: Optional[float] = None
        self.next_processing_timer: Optional[float] = None
        self._result: Any = None

    def is_idle(self, input_empty: bool, input_watermark: Timestamp, clock: float) -> bool:
        """Nothing to do this batch: no input, and no state or nothing that can fire."""
        return input_empty and (self.keys == 0 or (
            input_watermark == self.input_watermark and clock == self.clock))

    def skip(self, input_watermark: Timestamp, clock: float) -> None:
        self.input_watermark = input_watermark
        self.output_watermark = min(input_watermark, self.hold)
        self.inputs = self.outputs = 0
        self.clock = clock

    def advance(self, result: Any, metas: List[Dict[str, Any]], input_watermark: Timestamp,
                holds: bool, clock: float) -> None:
        if self._result is not None:
            self._result.unpersist(blocking=False)
        self._result = result
        self.state = result.filter(_is_kind_state).map(_payload)
        self.input_watermark = input_watermark
        self.hold = min((Timestamp(micros=meta["hold"]) for meta in metas
                         if holds and meta["hold"] is not None), default=MAX_TIMESTAMP)
        self.output_watermark = min(input_watermark, self.hold)
        self.keys = sum(meta["keys"] for meta in metas)
        self.inputs = sum(meta["inputs"] for meta in metas)
        self.outputs = sum(meta["outputs"] for meta in metas)
        self.clock = clock
        pending = [meta["next_processing_timer"] for meta in metas
                   if meta["next_processing_timer"] is not None]
        self.next_processing_timer = min(pending) if pending else None

    def release(self) -> None:
        if self._result is not None:
            self._result.unpersist(blocking=False)

    def snapshot(self) -> Dict[str, Any]:
        """The step's watermarks, hold and clock as plain data (its state RDD is collected
        by :meth:`BatchStages.snapshot`), for a checkpoint."""
        return {"name": self.name, "input_watermark": self.input_watermark.micros,
                "output_watermark": self.output_watermark.micros, "hold": self.hold.micros,
                "keys": self.keys, "state_bytes": self.state_bytes,
                "clock": self.clock, "next_processing_timer": self.next_processing_timer}

    def restore(self, snapshot: Dict[str, Any], state: Any) -> None:
        """Resume from :meth:`snapshot`, with ``state`` the RDD of its state records."""
        self.state = state
        self.input_watermark = Timestamp(micros=snapshot["input_watermark"])
        self.output_watermark = Timestamp(micros=snapshot["output_watermark"])
        self.hold = Timestamp(micros=snapshot["hold"])
        self.keys = snapshot["keys"]
        self.state_bytes = snapshot["state_bytes"]
        self.clock = snapshot["clock"]
        self.next_processing_timer = snapshot["next_processing_timer"]


def _is_kind_state(record) -> bool:
    return record[0] == "state"


def _payload(record) -> Any:
    return record[1]
