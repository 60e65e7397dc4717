"""The pipeline's components (coders, windowing strategies) as Spark tasks see them.

Beam protos and contexts do not pickle, so the driver broadcasts the serialized ``Components``
once per pipeline (the backend's broadcast); a task rebuilds a ``PipelineContext`` from those
bytes the first time it needs one and caches it by digest, so later tasks in the same Python
worker reuse it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, Iterator, Tuple

from runners.spark.beam_internals import (
    PipelineContext,
    beam_runner_api_pb2,
    create_InputStream,
    create_OutputStream,
)

# Registers the runner's own coder URN: a stage's proto may name it in any task.
from runners.spark.planning import coders as _coders  # noqa: F401

#: digest -> PipelineContext, per Python worker process.
_CONTEXTS: Dict[str, Any] = {}
_CONTEXT_CACHE_LIMIT = 16


class SharedComponents:
    """A picklable handle on broadcast ``Components`` bytes.

    Args:
      broadcast: a backend broadcast holding ``Components.SerializeToString()``.
      digest: a digest of those bytes (the cache key on workers).
    """

    def __init__(self, broadcast: Any, digest: str) -> None:
        self.broadcast = broadcast
        self.digest = digest

    @classmethod
    def create(cls, backend: Any, components: "beam_runner_api_pb2.Components"):
        """The components broadcast by ``backend`` (a :class:`~runners.spark.backends.base.
        Backend`)."""
        payload = components.SerializeToString()
        return cls(backend.broadcast(payload), hashlib.sha256(payload).hexdigest())

    def context(self) -> Any:
        """This worker's ``PipelineContext`` over the components (built once per worker)."""
        context = _CONTEXTS.get(self.digest)
        if context is None:
            if len(_CONTEXTS) >= _CONTEXT_CACHE_LIMIT:
                _CONTEXTS.clear()
            components = beam_runner_api_pb2.Components.FromString(self.broadcast.value)
            context = _CONTEXTS[self.digest] = PipelineContext(components)
        return context

    def coder_impl(self, coder_id: str) -> Any:
        return self.context().coders[coder_id].get_impl()

    def coder(self, coder_id: str) -> Any:
        return self.context().coders[coder_id]

    def windowing(self, windowing_strategy_id: str) -> Any:
        return self.context().windowing_strategies[windowing_strategy_id]

    def release(self) -> None:
        """Free the broadcast on executors and driver (the pipeline has finished)."""
        self.broadcast.unpersist()


def iter_encoded(coder_impl: Any, chunk: bytes) -> Iterator[Tuple[Any, bytes]]:
    """Each element of a chunk of nested encodings: (decoded value, its own bytes)."""
    stream = create_InputStream(chunk)
    total = len(chunk)
    start = 0
    while stream.size() > 0:
        value = coder_impl.decode_from_stream(stream, True)
        end = total - stream.size()
        yield value, chunk[start:end]
        start = end


def encode_chunks(
    coder_impl: Any, values: Iterator[Any], chunk_bytes: int = 1 << 20
) -> Iterator[bytes]:
    """Nested encodings of ``values``, cut into chunks of about ``chunk_bytes``."""
    out = create_OutputStream()
    for value in values:
        coder_impl.encode_to_stream(value, out, True)
        if out.size() >= chunk_bytes:
            yield out.get()
            out = create_OutputStream()
    if out.size():
        yield out.get()


def join_chunks(pieces: Iterator[bytes], chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """Concatenate encoded elements into chunks of about ``chunk_bytes``."""
    buffered, size = [], 0
    for piece in pieces:
        buffered.append(piece)
        size += len(piece)
        if size >= chunk_bytes:
            yield b"".join(buffered)
            buffered, size = [], 0
    if buffered:
        yield b"".join(buffered)
