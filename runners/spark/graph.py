"""The pipeline graph as Graphviz DOT: which transforms the Spark runner fuses into which stage.

On the SparkRunner the graph is the runner's own execution plan
(:func:`runners.spark.planning.execution_plan.plan`, used read-only): one cluster per fused
stage holding the transforms that run together in one Spark task, the runner's GroupByKeys
(shuffles) as diamonds between stages, side inputs as dashed edges. For any other runner the
graph shows Beam's primitive transforms *without* fusion (that runner fuses as it likes),
clustered by top-level composite, and its title says so.

``dot`` (Graphviz) renders DOT to SVG or PNG. When it is missing, :func:`write_graph`
writes the ``.dot`` file only and logs how to install it (Debian: ``apt-get install
graphviz``).

Example:

>>> import apache_beam as beam
>>> p = beam.Pipeline()
>>> _ = p | beam.Create([("a", 1)]) | "Twice" >> beam.Map(lambda kv: kv) | beam.GroupByKey()
>>> graph = fused_stage_graph(p)
>>> any("Twice" in name for stage in graph.stages for name in stage.transforms)
True
>>> to_dot(graph).startswith("digraph pipeline {")
True
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Set, Tuple

from apache_beam.options.pipeline_options import PipelineOptions

from runners.spark.beam_internals import (
    DATA_INPUT_URN,
    DATA_OUTPUT_URN,
    IMPULSE_BUFFER,
    beam_fn_api_pb2,
    split_buffer_id,
)
from runners.spark.planning import execution_plan, support

_LOGGER = logging.getLogger(__name__)

#: Image formats ``dot`` renders for :func:`write_graph`, by file extension.
RENDERED_FORMATS = {".svg": "svg", ".png": "png"}


#: The node a runner-executed stage shows (fusion names it after its mangled transform ids).
_RUNNER_STAGE_LABELS = {execution_plan.TEST_STREAM_STAGE: "TestStream",
                        execution_plan.RESHUFFLE_STAGE: "Reshuffle"}


@dataclasses.dataclass(frozen=True)
class Stage:
    """A cluster of the graph: a fused stage (or, unfused, a top-level composite).

    ``name`` is the stage's name as fusion built it (its fused transforms' names joined); a
    stage that reads the pipeline's impulse lists a pseudo-transform ``"Impulse"`` first.
    """

    index: int
    name: str
    kind: str
    transforms: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Edge:
    """Data flowing from one node to another; ``style`` is ``"data"`` or ``"side input"``."""

    source: str
    target: str
    style: str = "data"


@dataclasses.dataclass
class PipelineGraph:
    """Clusters, the nodes between them (shuffles), and edges; nodes are ``"<stage>/<name>"``
    inside stages and ``"shuffle/<name>"`` for a GroupByKey."""

    title: str
    stages: List[Stage]
    shuffles: List[str]
    edges: List[Edge]


def _node(stage: int, name: str) -> str:
    return f"{stage}/{name}"


def fused_stage_graph(pipeline: Any, options: Optional[PipelineOptions] = None) -> PipelineGraph:
    """The Spark runner's fused stages for ``pipeline``, as a :class:`PipelineGraph`.

    Prepares the pipeline's proto as the runner does (:func:`execution_plan.pipeline_proto`, which
    sets deterministic key coders on GroupByKey inputs, as a run would).
    """
    options = options or pipeline.options or PipelineOptions()
    proto = execution_plan.pipeline_proto(pipeline, options)
    streaming = support.runs_in_streaming(proto, options)
    # Every Beam step as fusion made the stage, however its steps then run.
    plan = execution_plan.plan(proto, streaming=streaming, chain_steps=False)
    stages: List[Stage] = []
    producers: Dict[bytes, List[str]] = {}  # buffer -> nodes writing it
    consumers: Dict[bytes, List[Tuple[str, str]]] = {}  # buffer -> (node, style) reading it
    edges: List[Edge] = []
    for spec in plan.stages:
        if spec.kind != execution_plan.SDK_STAGE:
            # A runner stage (TestStream, Reshuffle) is one node that reads and writes buffers.
            label = _RUNNER_STAGE_LABELS.get(spec.kind, spec.kind)
            node = _node(spec.index, label)
            stages.append(Stage(spec.index, spec.name, spec.kind, (label,)))
            for _, buffer_id in spec.outputs:
                producers.setdefault(buffer_id, []).append(node)
            for stage_input in spec.inputs:
                consumers.setdefault(stage_input.buffer_id, []).append((node, "data"))
            continue
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(spec.descriptor)
        transforms = descriptor.transforms
        user = {name: t for name, t in transforms.items()
                if t.spec.urn not in (DATA_INPUT_URN, DATA_OUTPUT_URN)}
        names = sorted(user)
        if any(stage_input.buffer_id == IMPULSE_BUFFER for stage_input in spec.inputs):
            names.insert(0, "Impulse")
        stages.append(Stage(spec.index, spec.name, spec.kind, tuple(names)))
        readers: Dict[str, List[str]] = {}
        for name, transform in user.items():
            for pcollection_id in transform.inputs.values():
                readers.setdefault(pcollection_id, []).append(name)
        writers = {pcollection_id: name for name, transform in user.items()
                   for pcollection_id in transform.outputs.values()}
        for name, transform in sorted(user.items()):
            for pcollection_id in transform.outputs.values():
                for reader in sorted(readers.get(pcollection_id, [])):
                    if reader != name:
                        edges.append(Edge(_node(spec.index, name), _node(spec.index, reader)))
        for transform_id, buffer_id in spec.outputs:
            written = next(iter(transforms[transform_id].inputs.values()))
            if written in writers:
                producers.setdefault(buffer_id, []).append(_node(spec.index, writers[written]))
        for stage_input in spec.inputs:
            read = next(iter(transforms[stage_input.transform_id].outputs.values()))
            for reader in sorted(readers.get(read, [])):
                if stage_input.buffer_id == IMPULSE_BUFFER:
                    # Every stage reads its own impulse: an edge inside the stage.
                    edges.append(Edge(_node(spec.index, "Impulse"), _node(spec.index, reader)))
                    continue
                consumers.setdefault(stage_input.buffer_id, []).append(
                    (_node(spec.index, reader), "data"))
        for side_input in spec.side_inputs:
            consumers.setdefault(side_input.buffer_id, []).append(
                (_node(spec.index, side_input.transform_id), "side input"))
    shuffles: List[str] = []
    for buffer_id in sorted(set(producers) | set(consumers)):
        group = plan.groups.get(buffer_id)
        sources = producers.get(buffer_id, [])
        if group is not None and split_buffer_id(buffer_id)[0] == "group":
            shuffle = f"shuffle/{group.transform_name}"
            shuffles.append(shuffle)
            edges.extend(Edge(source, shuffle) for source in sources)
            sources = [shuffle]
        for source in sources:
            edges.extend(Edge(source, target, style)
                         for target, style in consumers.get(buffer_id, []))
    kind = "streaming" if streaming else "batch"
    return PipelineGraph(f"SparkRunner fused stages ({kind}): {len(stages)} stages",
                         stages, sorted(set(shuffles)), edges)


def beam_graph(pipeline: Any, note: str = "") -> PipelineGraph:
    """Beam's primitive transforms for ``pipeline``, unfused, clustered by top-level composite."""
    proto = pipeline.to_runner_api()
    transforms = proto.components.transforms
    stages: List[Stage] = []
    owner: Dict[str, int] = {}
    leaves: List[str] = []
    roots = list(proto.root_transform_ids)
    if len(roots) == 1 and transforms[roots[0]].subtransforms:
        roots = list(transforms[roots[0]].subtransforms)  # the pipeline's own wrapper
    for index, root_id in enumerate(roots):
        names: List[str] = []
        pending = [root_id]
        while pending:
            transform_id = pending.pop()
            transform = transforms[transform_id]
            if transform.subtransforms:
                pending.extend(reversed(transform.subtransforms))
            elif set(transform.outputs.values()) - set(transform.inputs.values()):
                # Pass-through leaves (outputs among inputs) move no data: left out.
                names.append(transform.unique_name)
                owner[transform_id] = index
                leaves.append(transform_id)
        stages.append(Stage(index, transforms[root_id].unique_name, "composite", tuple(names)))
    writers: Dict[str, str] = {}
    for transform_id in leaves:
        transform = transforms[transform_id]
        for pcollection_id in transform.outputs.values():
            writers[pcollection_id] = _node(owner[transform_id], transform.unique_name)
    edges: List[Edge] = []
    for transform_id in leaves:
        transform = transforms[transform_id]
        for pcollection_id in transform.inputs.values():
            if pcollection_id in writers:
                edges.append(Edge(writers[pcollection_id],
                                  _node(owner[transform_id], transform.unique_name)))
    title = "Beam transforms, not fused (the runner decides fusion)" + (f"; {note}" if note else "")
    return PipelineGraph(title, stages, [], edges)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: PipelineGraph) -> str:
    """Render ``graph`` as DOT text: one ``subgraph cluster_<n>`` per stage."""
    lines = ["digraph pipeline {", "  rankdir=LR;", "  compound=true;",
             f"  label={_quote(graph.title)};", "  labelloc=t;",
             '  node [shape=box, fontsize=10, style="rounded,filled", fillcolor=white];']
    for stage in graph.stages:
        lines.append(f"  subgraph cluster_{stage.index} {{")
        label = (f"composite: {stage.name}" if stage.kind == "composite"
                 else f"stage {stage.index} ({stage.kind})")
        lines.append(f"    label={_quote(label)};")
        lines.append(f"    tooltip={_quote(stage.name)};")
        lines.append('    style=filled; fillcolor="#eef3fb"; fontsize=10;')
        for name in stage.transforms:
            lines.append(f"    {_quote(_node(stage.index, name))} [label={_quote(name)}];")
        lines.append("  }")
    for shuffle in graph.shuffles:
        label = f"GroupByKey (shuffle)\n{shuffle.split('/', 1)[1]}"
        lines.append(f"  {_quote(shuffle)} [shape=diamond, label={_quote(label)}, "
                     'fillcolor="#fde9c8"];')
    seen: Set[Tuple[str, str, str]] = set()
    for edge in graph.edges:
        if (edge.source, edge.target, edge.style) in seen:
            continue
        seen.add((edge.source, edge.target, edge.style))
        style = ' [style=dashed, label="side input"]' if edge.style == "side input" else ""
        lines.append(f"  {_quote(edge.source)} -> {_quote(edge.target)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def pipeline_graph(pipeline: Any, runner: Any = None,
                   options: Optional[PipelineOptions] = None) -> PipelineGraph:
    """The fused stages when ``runner`` is our SparkRunner, else Beam's unfused transforms.

    If the Spark runner cannot plan the pipeline, the unfused graph is returned and its
    title says why (a graph is a picture: it should not stop a job).
    """
    from runners.spark.runner import SparkRunner

    if isinstance(runner, SparkRunner):
        try:
            return fused_stage_graph(pipeline, options)
        except Exception as error:  # e.g. UnsupportedPipelineError: say so, draw what we can
            _LOGGER.warning("the Spark runner cannot plan this pipeline (%s); the graph shows "
                            "Beam's transforms without fusion", error)
            return beam_graph(pipeline, note=f"SparkRunner planning failed: {error}")
    return beam_graph(pipeline)


def write_graph(dot: str, path: str) -> List[str]:
    """Write DOT text to ``path``; return the files written.

    A ``path`` ending in ``.svg`` or ``.png`` writes the DOT next to it (``.dot``) and renders
    it with Graphviz's ``dot`` when installed; without it, only the ``.dot`` is written and a
    warning says how to install Graphviz. Any other name gets the DOT text itself.
    """
    root, extension = os.path.splitext(path)
    image_format = RENDERED_FORMATS.get(extension.lower())
    dot_path = root + ".dot" if image_format else path
    directory = os.path.dirname(dot_path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(dot_path, "w", encoding="utf-8") as handle:
        handle.write(dot)
    written = [dot_path]
    if image_format:
        executable = shutil.which("dot")
        if executable is None:
            _LOGGER.warning("wrote %s only: rendering %s needs Graphviz's `dot` (install it: "
                            "sudo apt-get install -y graphviz, or brew install graphviz)",
                            dot_path, path)
        else:
            subprocess.run([executable, f"-T{image_format}", dot_path, "-o", path], check=True,
                           capture_output=True)
            written.append(path)
    return written


def write_pipeline_graph(pipeline: Any, path: str, runner: Any = None,
                         options: Optional[PipelineOptions] = None) -> List[str]:
    """:func:`pipeline_graph` as DOT, written with :func:`write_graph`; return the files."""
    return write_graph(to_dot(pipeline_graph(pipeline, runner, options)), path)
