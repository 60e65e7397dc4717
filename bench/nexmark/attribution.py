"""Where a metered label's CPU goes: its cProfile table split by step and by kind of work.

Two dimensions for every function's own time (cProfile's ``tottime``):

- **the step** it runs under: each step's functions are the *roots* (:func:`step_roots`:
  a DoFn's methods, the function of a ``Map``, ``Filter`` or ``FlatMap``, a combine's
  function), and a function's own time is split among the roots above it in the call
  graph, gprof's way: along each call edge in proportion to the time spent through it
  (exact for the root's own callees, proportional further up). Time under no root is the
  machinery between steps: Beam's operations, the runner's, PySpark's. A function two
  steps share (one DoFn class in two steps) is counted under both names at once.
- **the kind** of work (:func:`kind_of`): the text read (``_TextSource.read_records``, the
  restriction tracker, the SDF wrapper and source; or the runner's bulk read), input decode,
  output encode, Beam's operations and invokers (compiled: their calls to one another are
  invisible to cProfile, so their time counts where Python last saw them), Beam's
  ``Map``/``Filter`` wrappers, window assignment, ``Timestamp``, ``WindowedValue``, metrics,
  the sink, the runner's chains and bundles, PySpark's worker and shuffle. A built-in
  function (``json``'s scanner, ``bytes.find``, ``pickle.dumps``) is counted as the kind of
  the code that called it.

cProfile measures wall time and slows down what calls many functions: every time is scaled
to the label's measured CPU (:func:`breakdown`), and an estimate without cProfile's cost
per call (calibrated in this process, :func:`calibrate`) is scaled to the CPU the label
used in a run without the profiler.

>>> kind_of(("~", 0, "<method 'decode_from_stream' of "
...          "'apache_beam.coders.coder_impl.FastPrimitivesCoderImpl' objects>"))
'input decode'
>>> kind_of(("/x/apache_beam/utils/timestamp.py", 60, "__init__"))
'Timestamp objects'
"""

from __future__ import annotations

import ast
import cProfile
import functools
import os
import time
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Tuple

Function = Tuple[str, int, str]  # cProfile's key: (file, first line, name)
#: The step of time spent under no step's functions: between steps.
NO_STEP = "(between steps)"
READ_RECORDS = "text read: _TextSource.read_records"
TRACKER = "text read: restriction tracker"
SDF = "text read: SDF wrapper and source"
BULK_READ = "text read: the runner's bulk read"
DECODE = "input decode"
ENCODE = "output encode"
OPERATIONS = "Beam operations, invokers, output handlers"
WRAPPERS = "Beam's Map/Filter/CombineFn wrappers"
WINDOWS = "window assignment"
TIMESTAMPS = "Timestamp objects"
WINDOWED_VALUES = "WindowedValue objects"
METRICS = "metrics"
SINK = "sink: WriteToText"
FILES = "file system"
CHAINS = "the runner's chains"
RUNNER = "the runner: bundles, records, shuffle functions"
PYSPARK_SHUFFLE = "PySpark: shuffle and RDD functions"
PYSPARK = "PySpark: worker and serializers"
JVM_WAIT = "PySpark: reading from the JVM (waits included)"
JSON = "json"
USER = "user code"
METERS = "the meters"
OTHER = "other (stdlib, built-ins)"

#: (path fragment, kind), first match wins; a path ending in "/" is a folder.
_FILE_KINDS: Tuple[Tuple[str, str], ...] = (
    ("apache_beam/testing/benchmarks/", USER),
    ("runners/spark/worker/decode_loop.py", DECODE),
    ("runners/spark/chains/window_assignment.py", WINDOWS),
    ("runners/spark/fast_paths.py", TIMESTAMPS),
    ("runners/spark/worker/metrics.py", METRICS),
    ("runners/spark/chains/", CHAINS),
    ("<chained steps>", CHAINS),
    ("runners/spark/text_io/lines.py", BULK_READ),
    ("runners/spark/text_io/read.py", BULK_READ),
    ("runners/spark/text_io/write.py", SINK),
    ("runners/spark/", RUNNER),
    ("bench/nexmark/meters.py", METERS),
    ("bench/", USER),
    ("apache_beam/io/range_trackers.py", TRACKER),
    ("apache_beam/io/restriction_trackers.py", TRACKER),
    ("apache_beam/io/filebasedsource.py", SDF),
    ("apache_beam/io/concat_source.py", SDF),
    ("apache_beam/io/filebasedsink.py", SINK),
    ("apache_beam/io/filesystem", FILES),
    ("apache_beam/io/localfilesystem.py", FILES),
    ("apache_beam/transforms/window.py", WINDOWS),
    ("apache_beam/utils/timestamp.py", TIMESTAMPS),
    ("apache_beam/utils/windowed_value.py", WINDOWED_VALUES),
    ("apache_beam/metrics/", METRICS),
    ("apache_beam/runners/worker/data_plane.py", ENCODE),
    ("apache_beam/coders/", "coders"),
    ("apache_beam/runners/", OPERATIONS),
    ("apache_beam/transforms/", OPERATIONS),
    ("apache_beam/", OPERATIONS),
    ("pyspark/shuffle.py", PYSPARK_SHUFFLE),
    ("pyspark/rdd.py", PYSPARK_SHUFFLE),
    ("pyspark/resultiterable.py", PYSPARK_SHUFFLE),
    ("pyspark/", PYSPARK),
    ("/json/", JSON),
)
#: Compiled functions (file "~"): (fragment of the name, kind).
_COMPILED_KINDS: Tuple[Tuple[str, str], ...] = (
    ("apache_beam.utils.windowed_value", WINDOWED_VALUES),
    ("apache_beam.metrics", METRICS),
    ("apache_beam.runners", OPERATIONS),
    ("apache_beam.transforms", WRAPPERS),
    ("apache_beam.utils", OPERATIONS),
)
#: Built-ins that block on the JVM's socket.
_JVM_READS = ("'_io.BufferedReader'", "'_socket.socket'", "select", "'_io.FileIO'")


@functools.lru_cache(maxsize=None)
def _qualnames(path: str) -> Dict[int, str]:
    """First line of each function of a file (its ``def`` or first decorator) -> its
    qualified name ({} for a file that cannot be read)."""
    try:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    found: Dict[int, str] = {}

    def visit(node: Any, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    lines = [child.lineno] + [decorator.lineno
                                              for decorator in child.decorator_list]
                    for line in lines:
                        found[line] = name
                visit(child, f"{name}.<locals>." if not isinstance(child, ast.ClassDef)
                      else f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def qualname(function: Function) -> str:
    """The qualified name of a profiled Python function (its bare name if unknown)."""
    path, line, name = function
    return _qualnames(path).get(line, name) if path != "~" else name


def _coder_kind(name: str) -> str:
    if "decode" in name:
        return DECODE
    if "encode" in name or "get_estimated_size" in name:
        return ENCODE
    return "coders"


def kind_of(function: Function) -> Optional[str]:
    """The kind of work of a function by itself; None for a built-in that counts as its
    caller's kind."""
    path, _, name = function
    if path == "~":
        if "apache_beam.coders" in name:
            return _coder_kind(name)
        if any(fragment in name for fragment in _JVM_READS):
            return None  # its caller says whether it waits on the JVM (PySpark) or reads a file
        for fragment, kind in _COMPILED_KINDS:
            if fragment in name:
                return kind
        return None
    normalized = path.replace(os.sep, "/")
    if "apache_beam/io/textio.py" in normalized or "apache_beam/io/iobase.py" in normalized:
        return _io_kind(qualname(function))
    if "apache_beam/transforms/core.py" in normalized:
        return _core_kind(qualname(function))
    for fragment, kind in _FILE_KINDS:
        if fragment in normalized:
            return _coder_kind(name) if kind == "coders" else kind
    return OTHER


def _core_kind(name: str) -> str:
    """``transforms/core.py``: the wrappers ``Map``, ``Filter``, ``FlatMap`` and combines put
    around a user's function, else the DoFn machinery (parameters, signatures)."""
    wrappers = ("Map.", "Filter.", "FlatMap.", "MapTuple.", "FlatMapTuple.",
                "CallableWrapperDoFn.", "CallableWrapperCombineFn.", "CombineFn.")
    return WRAPPERS if name.startswith(wrappers) else OPERATIONS


def _io_kind(name: str) -> str:
    if name.startswith("_TextSource."):
        return READ_RECORDS
    if "Sink" in name or "Write" in name or "finalize" in name.lower():
        return SINK
    if "RestrictionTracker" in name or name.startswith("_SDFBoundedSourceRestriction."):
        return TRACKER
    return SDF


def _caller_kinds(stats: Dict[Function, Any]) -> Dict[Function, Dict[str, float]]:
    """Each function's own time as fractions per kind (built-ins: their callers' kinds,
    by the own time spent through each call edge)."""
    memo: Dict[Function, Dict[str, float]] = {}

    def kinds(function: Function, visiting: frozenset) -> Dict[str, float]:
        if function in memo:
            return memo[function]
        kind = kind_of(function)
        if kind is not None:
            result = {kind: 1.0}
        elif function in visiting:
            return {OTHER: 1.0}
        else:
            callers = stats[function][4]
            total = sum(edge[2] for edge in callers.values())
            result = defaultdict(float)
            for caller, edge in callers.items():
                share = edge[2] / total if total else 1.0 / len(callers)
                caller_kinds = (kinds(caller, visiting | {function}) if caller in stats
                                else {OTHER: 1.0})
                for caller_kind, fraction in caller_kinds.items():
                    if caller_kind == PYSPARK and any(
                            fragment in function[2] for fragment in _JVM_READS):
                        caller_kind = JVM_WAIT
                    result[caller_kind] += share * fraction
            result = dict(result) or {OTHER: 1.0}
        memo[function] = result
        return result

    return {function: kinds(function, frozenset()) for function in stats}


def _short(function: Function) -> str:
    return f"{os.path.basename(function[0])}:{function[1]}:{function[2]}"


def step_roots(pipeline: Any) -> Dict[str, str]:
    """The functions each step of ``pipeline`` calls per element (its DoFn's methods, the
    function of a ``Map``, ``Filter`` or ``FlatMap``, a combine's function; Beam's own
    steps, the read and the sink, as the user's; not Beam's wrapper around the function
    of a ``Map`` or ``Filter``, the same code for every such step):
    ``basename:line:name`` of each (a built-in by its cProfile name) -> the step's full
    label (the labels of every step that uses it, joined by ``+``)."""
    from runners.spark.beam_internals import unwrapped_function

    steps: Dict[str, List[str]] = defaultdict(list)

    def add(callable_: Any, step: str) -> None:
        code = getattr(callable_, "__code__", None)
        if code is not None:
            key = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}:{code.co_name}"
        elif callable(callable_) and getattr(callable_, "__module__", None) == "builtins":
            key = f"~:0:<built-in function {callable_.__name__}>"
        else:
            return
        names = steps[key]
        if any(step == name or step.startswith(name + "/") for name in names):
            return  # a composite and its part (CombinePerKey, its Combine): the composite
        names[:] = [name for name in names if not name.startswith(step + "/")] + [step]

    class Visitor:
        def enter_composite_transform(self, node):
            self.visit_transform(node)

        def leave_composite_transform(self, node):
            pass

        def visit_value(self, value, node):
            pass

        def visit_transform(self, node):
            transform = node.transform
            dofn = getattr(transform, "fn", None)
            if dofn is None:
                return
            unwrapped = unwrapped_function(dofn)
            if unwrapped is not None:  # Beam's wrapper (one for every Map) is between steps
                add(unwrapped[1], node.full_label)
            elif hasattr(dofn, "_fn"):  # a FlatMap's function, a CombineFn's
                add(dofn._fn, node.full_label)
            for method in ("process", "start_bundle", "finish_bundle", "setup", "teardown",
                           "add_input", "merge_accumulators", "extract_output",
                           "create_accumulator"):
                method_value = getattr(type(dofn), method, None)
                if getattr(method_value, "__module__", None) != "apache_beam.transforms.core":
                    add(method_value, node.full_label)  # not the base class's no-op
            for substitute in _runner_substitutes(dofn):  # what runs Beam's step instead
                add(substitute, node.full_label)

    pipeline.visit(Visitor())
    # A function several steps share (one DoFn class in two steps) is known by all their
    # names: a profile cannot tell its calls apart.
    return {key: " + ".join(names) for key, names in steps.items()}


def _runner_substitutes(dofn: Any) -> List[Any]:
    """The runner's functions that do a Beam step's per-element work in its place (the
    bulk text read and the block writes of :mod:`runners.spark.text_io`). A read's are its
    generators of records, not its operation's ``process``: that hands each record on down
    the stage, and a root's callees count under its step."""
    from runners.spark.beam_internals import (
        reads_bounded_sources,
        text_range_reader,
        text_sink_writer,
    )
    from runners.spark.text_io import lines, write

    if reads_bounded_sources(dofn) or text_range_reader(dofn) is not None:
        return [lines.records, lines.decoded]
    writer = text_sink_writer(dofn)
    if writer == "bundle":
        return [write.BulkTextWrite.process, write.BlockWriteBundleDoFn.process]
    if writer == "keyed":
        return [write.BlockWriteKeyedBundleDoFn.process]
    return []


def _step_shares(stats: Dict[Function, Any], roots: Dict[str, str]
                 ) -> Dict[Function, Dict[str, float]]:
    """Each function's own time as fractions per step (gprof's proportional rule). A root
    called under another step's root counts under that step (``Coder.decode`` is the
    function of a ``Map(decode)`` of ``WriteToText``, and what a DoFn calls to decode)."""
    memo: Dict[Function, Dict[str, float]] = {}

    def inherited(function: Function, edge_index: int, visiting: frozenset
                  ) -> Dict[str, float]:
        callers = stats[function][4] if function in stats else {}
        total = sum(edge[edge_index] for edge in callers.values())
        result: Dict[str, float] = defaultdict(float)
        for caller, edge in callers.items():
            share = edge[edge_index] / total if total else 0.0
            for step, fraction in above(caller, visiting | {function}).items():
                result[step] += share * fraction
        root = roots.get(_short(function))
        rest = 1.0 - sum(result.values())
        if root is not None and rest > 1e-9:
            result[root] += rest
        return dict(result)

    def above(function: Function, visiting: frozenset) -> Dict[str, float]:
        """The fractions of a call of ``function`` made under each step."""
        if function in memo:
            return memo[function]
        if function in visiting:
            return {}
        result = inherited(function, 3, visiting)
        memo[function] = result
        return result

    return {function: inherited(function, 2, frozenset()) for function in stats}


def calibrate(calls: int = 300_000) -> Tuple[float, float]:
    """cProfile's CPU cost per profiled call, measured here: (charged to the called
    function, charged to its caller), in seconds. The cost is the CPU a profiled loop of
    empty calls takes beyond the same loop unprofiled; it is split as the profile itself
    charges it (the empty function's own time against its caller's time beyond the loop)."""
    def callee():
        return None

    def caller():
        for _ in range(calls):
            callee()

    began, wall = time.process_time(), time.perf_counter()
    caller()
    plain, plain_wall = time.process_time() - began, time.perf_counter() - wall
    profile = cProfile.Profile()
    began = time.process_time()
    profile.runcall(caller)
    profiled = time.process_time() - began
    profile.create_stats()
    own = {name: entry[2] for (_, _, name), entry in profile.stats.items()}  # type: ignore
    to_callee = own.get("callee", 0.0)
    to_caller = max(own.get("caller", 0.0) - plain_wall, 0.0)
    per_call = max(profiled - plain, 0.0) / calls
    callee_share = to_callee / (to_callee + to_caller) if to_callee + to_caller else 0.5
    return per_call * callee_share, per_call * (1.0 - callee_share)


def breakdown(stats: Dict[Function, Any], roots: Dict[str, str], profiled_cpu: float,
              unprofiled_cpu: Optional[float], overhead: Tuple[float, float]
              ) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """``{(step, kind): (profiled CPU seconds, estimated unprofiled CPU seconds)}`` of one
    label: cProfile's own times scaled to ``profiled_cpu``; the estimate removes
    ``overhead`` per call (:func:`calibrate`) and is scaled to ``unprofiled_cpu`` (None:
    not scaled). Waits on the JVM (:data:`JVM_WAIT`) use no CPU: their row holds the wall
    seconds cProfile saw, and no estimate."""
    kinds = _caller_kinds(stats)
    steps = _step_shares(stats, roots)
    calls_made: Dict[Function, int] = defaultdict(int)
    for function, (_, _, _, _, callers) in stats.items():
        for caller, edge in callers.items():
            calls_made[caller] += edge[0]
    working_own = sum(entry[2] * (1.0 - kinds[function].get(JVM_WAIT, 0.0))
                      for function, entry in stats.items()) or 1.0
    scale = profiled_cpu / working_own
    profiled: Dict[Tuple[str, str], float] = defaultdict(float)
    estimated: Dict[Tuple[str, str], float] = defaultdict(float)
    for function, (_, calls, own, _, _) in stats.items():
        cpu = own * scale
        lean = max(cpu - overhead[0] * calls - overhead[1] * calls_made[function], 0.0)
        step_fractions = steps.get(function) or {NO_STEP: 1.0}
        unassigned = 1.0 - sum(step_fractions.values())
        if unassigned > 1e-9:
            step_fractions = {**step_fractions, NO_STEP: unassigned}
        for step, step_fraction in step_fractions.items():
            for kind, kind_fraction in kinds[function].items():
                share = step_fraction * kind_fraction
                if kind == JVM_WAIT:
                    profiled[(step, kind)] += own * share
                    estimated[(step, kind)] += 0.0
                else:
                    profiled[(step, kind)] += cpu * share
                    estimated[(step, kind)] += lean * share
    lean_total = sum(estimated.values()) or 1.0
    factor = (unprofiled_cpu / lean_total) if unprofiled_cpu is not None else 1.0
    return {key: (profiled[key], estimated[key] * factor) for key in profiled}


def top_functions(stats: Dict[Function, Any], profiled_cpu: float, count: int
                  ) -> List[Tuple[str, float, int]]:
    """The ``count`` functions of most own time: (name, profiled CPU seconds, calls); waits
    on the JVM left out."""
    kinds = _caller_kinds(stats)
    stats = {function: entry for function, entry in stats.items()
             if kinds[function].get(JVM_WAIT, 0.0) < 0.5}
    total_own = sum(entry[2] for entry in stats.values()) or 1.0
    ranked = sorted(stats.items(), key=lambda item: -item[1][2])[:count]
    return [(f"{_short(function)} ({qualname(function)})"
             if function[0] != "~" else function[2],
             entry[2] * profiled_cpu / total_own, entry[1]) for function, entry in ranked]


def merge_stats(tables: Iterable[Optional[Dict[Function, Any]]]) -> Dict[Function, Any]:
    """Several workers' tables of one label as one (as ``pstats.Stats.add``)."""
    import pstats

    merged: Optional[pstats.Stats] = None
    for table in tables:
        if not table:
            continue
        stats = pstats.Stats()
        stats.stats = table  # type: ignore[attr-defined]
        stats.total_calls = sum(entry[1] for entry in table.values())  # type: ignore
        stats.prim_calls = sum(entry[0] for entry in table.values())  # type: ignore
        stats.total_tt = sum(entry[2] for entry in table.values())  # type: ignore
        if merged is None:
            merged = stats
        else:
            merged.add(stats)
    return dict(merged.stats) if merged is not None else {}  # type: ignore[attr-defined]
