"""Streaming side inputs: what each side-input buffer received, kept while its windows live.

A ParDo's side input, in streaming, reflects every element its PCollection received in
earlier micro-batches and in this one. The driver keeps those elements (encoded) per buffer,
each with its *expiry*: the latest of its windows' ``max_timestamp() + allowed lateness``
(of the side input's own windowing strategy). Once the main input watermark of every stage
that reads the side input passes an element's expiry, a main element asking for its windows
would be late data, and the element is dropped; a side input in the global window is kept
until the end.

>>> history = SideInputHistory()
>>> history.add(b"side", [(10, b"a"), (30, b"b")])
>>> history.expire(b"side", 20)
1
>>> history.chunks(b"side")
[b'b']
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from apache_beam.utils.timestamp import Duration

from runners.spark.worker.components import SharedComponents, iter_encoded


class SideInputHistory:
    """Side-input elements per buffer, with their expiry (micros), on the driver."""

    def __init__(self) -> None:
        self._elements: Dict[bytes, List[Tuple[int, bytes]]] = {}

    def add(self, buffer_id: bytes, elements: List[Tuple[int, bytes]]) -> None:
        self._elements.setdefault(buffer_id, []).extend(elements)

    def add_chunks(self, buffer_id: bytes, chunks: List[bytes], components: SharedComponents,
                   coder_id: str, allowed_lateness: Duration) -> None:
        """Keep the elements of these encoded chunks (``coder_id``: their windowed coder)."""
        coder = components.coder_impl(coder_id)
        kept = []
        for chunk in chunks:
            for element, encoded in iter_encoded(coder, chunk):
                expiry = max((window.max_timestamp() + allowed_lateness).micros
                             for window in element.windows)
                kept.append((expiry, encoded))
        self.add(buffer_id, kept)

    def expire(self, buffer_id: bytes, watermark_micros: int) -> int:
        """Drop the elements whose every window expired before ``watermark_micros``;
        returns how many were dropped."""
        elements = self._elements.get(buffer_id, [])
        kept = [(expiry, data) for expiry, data in elements if expiry >= watermark_micros]
        self._elements[buffer_id] = kept
        return len(elements) - len(kept)

    def chunks(self, buffer_id: bytes) -> List[bytes]:
        """The kept elements of a buffer, as one chunk (empty list when none)."""
        elements = self._elements.get(buffer_id, [])
        return [b"".join(data for _, data in elements)] if elements else []

    def sizes(self) -> Dict[bytes, int]:
        """Elements kept, per buffer."""
        return {buffer_id: len(elements) for buffer_id, elements in self._elements.items()}

    def snapshot(self) -> Dict[bytes, List[Tuple[int, bytes]]]:
        return {buffer_id: list(elements) for buffer_id, elements in self._elements.items()}

    def restore(self, snapshot: Dict[bytes, Any]) -> None:
        self._elements = {buffer_id: [(expiry, data) for expiry, data in elements]
                          for buffer_id, elements in snapshot.items()}
