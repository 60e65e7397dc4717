"""The driver's side of :mod:`bench.streaming.phases`: every call a micro-batch makes that
costs time on the driver, recorded as a :class:`Span` on a :class:`Timeline` by wrapping
what the runner calls (nothing in the runner is changed): the Spark Connect client's gRPC
calls, the plan's protobuf and the pickling of its functions, the backend's ``collect``;
on classic Spark the backend's ``collect`` and broadcasts."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional

#: gRPC methods of the Spark Connect service a client calls.
RPC_METHODS = ("ExecutePlan", "ReattachExecute", "AnalyzePlan", "Config", "AddArtifacts",
               "ArtifactStatus", "ReleaseExecute", "Interrupt", "FetchErrorDetails")


@dataclasses.dataclass
class Span:
    """One wrapped call on the driver: what, when (wall clock, seconds), in which thread."""

    kind: str
    start: float
    end: float
    thread: int
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Timeline:
    """The driver's spans, recorded by wrappers (thread-safe)."""

    def __init__(self) -> None:
        self.spans: List[Span] = []
        self._lock = threading.Lock()

    def add(self, span: Span) -> None:
        with self._lock:
            self.spans.append(span)

    def timed(self, kind: str, function: Callable[..., Any],
              extra: Optional[Callable[..., Dict[str, Any]]] = None) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(Span(kind, start, time.time(), threading.get_ident(),
                              extra(*args, **kwargs) if extra else {}))
        return wrapper

    def streamed(self, kind: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """A unary-stream RPC: the span runs from the call to its last response."""
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            start = time.time()
            thread = threading.get_ident()
            responses = iter(function(request, *args, **kwargs))
            info: Dict[str, Any] = {"operation": getattr(request, "operation_id", ""),
                                    "request_bytes": request.ByteSize(), "result_bytes": 0,
                                    "responses": 0, "first": None}

            recorded = []

            def record() -> None:
                if not recorded:
                    recorded.append(True)
                    self.add(Span(kind, start, time.time(), thread, info))

            def generate() -> Iterator[Any]:
                # The client stops reading at the response that says the result is complete.
                try:
                    for response in responses:
                        info["responses"] += 1
                        if info["first"] is None:
                            info["first"] = time.time()
                        if response.HasField("arrow_batch"):
                            info["result_bytes"] += len(response.arrow_batch.data)
                        if response.HasField("result_complete"):
                            record()
                        yield response
                finally:
                    record()
            return generate()
        return wrapper


@contextlib.contextmanager
def _patched(owner: Any, name: str, replacement: Callable[[Any], Any]) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _rpc_extra(method: str) -> Callable[..., Dict[str, Any]]:
    def extra(request: Any, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        found: Dict[str, Any] = {"method": method, "caller": _caller()}
        try:
            found["request_bytes"] = request.ByteSize()
            if method == "AnalyzePlan":
                found["what"] = request.WhichOneof("analyze")
            elif method == "Config":
                found["what"] = request.operation.WhichOneof("op_type")
        except Exception:  # a streaming request (AddArtifacts): an iterator
            pass
        return found
    return extra


def _caller() -> str:
    """The runner's innermost line on the stack (what asked for the round trip)."""
    for frame in reversed(traceback.extract_stack()):
        if f"{os.sep}runners{os.sep}" in frame.filename:
            return f"{frame.filename.split(os.sep + 'runners' + os.sep)[-1]}:{frame.lineno}"
    return ""


@contextlib.contextmanager
def probe_connect(session: Any, timeline: Timeline) -> Iterator[None]:
    """Wrap the Connect client's RPCs, plan building, pickling and the backend's collect."""
    from pyspark.sql.connect import expressions, plan

    from runners.spark.backends.connect import ConnectBackend

    stub = session.client._internal_stub
    with contextlib.ExitStack() as stack:
        for method in RPC_METHODS:
            if not hasattr(stub, method):
                continue
            if method in ("ExecutePlan", "ReattachExecute"):
                stack.enter_context(_patched(stub, method, lambda original, method=method:
                                             timeline.streamed("rpc:" + method, original)))
            else:
                stack.enter_context(_patched(stub, method, lambda original, method=method:
                                             timeline.timed("rpc:" + method, original,
                                                            _rpc_extra(method))))
        stack.enter_context(_patched(plan.LogicalPlan, "to_proto", lambda original:
                                     timeline.timed("to_proto", original)))
        stack.enter_context(_patched(expressions.PythonUDF, "to_plan",
                                     lambda original: _pickling(timeline, original)))

        # The backend's own collect: its time less the nested calls' is the DataFrame's
        # building and the decoding of the result.
        stack.enter_context(_patched(ConnectBackend, "collect", lambda original:
                                     timeline.timed("collect", original)))
        yield


def _pickling(timeline: Timeline, original: Callable[..., Any]) -> Callable[..., Any]:
    """``PythonUDF.to_plan`` timed, with the pickled function's size and what it is."""
    def to_plan(udf: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        expression = original(udf, *args, **kwargs)
        timeline.add(Span("pickle", start, time.time(), threading.get_ident(),
                          {"bytes": len(expression.command), "function": _describe(udf._func)}))
        return expression
    return to_plan


def _describe(function: Any) -> str:
    """A short name of a pickled function: its class or name, and its task's steps."""
    target = getattr(function, "func", function)  # a functools.partial
    task = getattr(target, "task", target)
    steps = getattr(task, "steps", ())
    names = [getattr(step, "__qualname__", type(step).__name__) for _, step in steps]
    return type(task).__name__ + (f"[{', '.join(names)}]" if names else "")


@contextlib.contextmanager
def probe_classic(timeline: Timeline) -> Iterator[None]:
    from runners.spark.backends.classic import ClassicBackend

    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(ClassicBackend, "collect", lambda original:
                                     timeline.timed("collect", original)))
        stack.enter_context(_patched(ClassicBackend, "broadcast", lambda original:
                                     timeline.timed("other_rpc", original)))
        yield
