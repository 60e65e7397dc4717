"""The pipeline graph as DOT: fused stages on the SparkRunner, Beam's transforms otherwise.

Planning is driver-side and starts no Spark job, so these tests build pipelines and never
run them (except one job run on the DirectRunner, for ``--graph``).
"""

from __future__ import annotations

import logging
import re
import shutil

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import team_scores
from pipelines.events import GameEvent
from pipelines.output import WritePanes
from pipelines.sources import ReadEvents
from pipelines.team_scores import TeamScores
from runners.spark import SparkRunner
from runners.spark import graph as graph_module
from runners.spark.graph import (
    beam_graph,
    fused_stage_graph,
    pipeline_graph,
    to_dot,
    write_graph,
    write_pipeline_graph,
)


def _pipeline(streaming=False):
    p = beam.Pipeline(options=PipelineOptions(streaming=streaming))
    side = p | "Side" >> beam.Create([10])
    _ = (p
         | "Create" >> beam.Create([("a", 1), ("b", 2)])
         | "AddSide" >> beam.Map(lambda kv, extra: (kv[0], kv[1] + extra[0]),
                                 beam.pvalue.AsList(side))
         | "Double" >> beam.Map(lambda kv: (kv[0], kv[1] * 2))
         | "Group" >> beam.GroupByKey()
         | "Total" >> beam.MapTuple(lambda key, values: (key, sum(values))))
    return p


def _clusters(dot):
    """Cluster label -> names of the transforms inside, parsed back from the DOT text."""
    clusters = {}
    for body in re.findall(r"subgraph cluster_\d+ \{\n(.*?)\n  \}", dot, re.S):
        label = re.search(r'label="([^"]*)"', body).group(1)
        clusters[label] = re.findall(r'\[label="([^"]*)"\]', body)
    return clusters


def test_fused_transforms_share_a_stage_cluster_and_a_shuffle_separates_stages():
    dot = to_dot(fused_stage_graph(_pipeline()))
    clusters = _clusters(dot)
    assert all(re.fullmatch(r"stage \d+ \((sdk|reshuffle)\)", label) for label in clusters)
    # Create's Reshuffle (two elements) is a runner stage of its own.
    assert [names for label, names in clusters.items() if "reshuffle" in label] == [["Reshuffle"]]
    by_transform = {name: label for label, names in clusters.items() for name in names}
    assert by_transform["AddSide"] == by_transform["Double"]  # fused: one Spark task
    assert by_transform["Total"] != by_transform["Double"]   # the GroupByKey ends a stage
    assert by_transform["Side/Map(decode)"] != by_transform["AddSide"]  # side input: materialized
    assert "Impulse" in clusters[by_transform["Side/Map(decode)"]]
    shuffle = '"shuffle/Group"'
    assert f'{shuffle} [shape=diamond, label="GroupByKey (shuffle)\\nGroup"' in dot
    double = f'"{by_transform["Double"].split()[1]}/Double"'
    total = f'"{by_transform["Total"].split()[1]}/Total"'
    assert f"{double} -> {shuffle};" in dot and f"{shuffle} -> {total};" in dot
    side = f'"{by_transform["Side/Map(decode)"].split()[1]}/Side/Map(decode)"'
    add_side = f'"{by_transform["AddSide"].split()[1]}/AddSide"'
    assert f'{side} -> {add_side} [style=dashed, label="side input"];' in dot
    assert dot.startswith("digraph pipeline {") and dot.endswith("}\n")


def test_a_streaming_job_shows_its_test_stream_stage_and_shuffles():
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    events = p | "ReadEvents" >> ReadEvents(GameEvent, kind="game", events=10, seed=1)
    _ = (events.parsed | "TeamScores" >> TeamScores(60, 0, 120)
         | "WritePanes" >> WritePanes(None))
    graph = fused_stage_graph(p)
    assert graph.title.startswith("SparkRunner fused stages (streaming)")
    kinds = {stage.kind for stage in graph.stages}
    assert {"test_stream", "sdk"} <= kinds
    stream = next(stage for stage in graph.stages if stage.kind == "test_stream")
    assert stream.transforms == ("TestStream",)
    assert "shuffle/TeamScores/SumPerTeamAndWindow/What/Group" in graph.shuffles
    stage_of = {name: stage.index for stage in graph.stages for name in stage.transforms}
    assert stage_of["ReadEvents/Parse/Parse/ParDo(_ParseJsonFn)"] == \
        stage_of["TeamScores/TeamAndScore"]
    assert stage_of["WritePanes/DescribePanes/Describe"] == \
        stage_of["TeamScores/SumPerTeamAndWindow/What/ExtractOutputs"]


def test_other_runners_get_beams_transforms_unfused_and_say_so():
    graph = pipeline_graph(_pipeline(), runner="DirectRunner")
    assert graph.title == "Beam transforms, not fused (the runner decides fusion)"
    clusters = _clusters(to_dot(graph))
    assert clusters["composite: Group"] == ["Group"]
    assert {"Create/Impulse", "Create/Map(decode)"} <= set(clusters["composite: Create"])
    assert '"3/Double" -> "4/Group";' in to_dot(graph)


def test_the_spark_runner_gets_the_fused_graph():
    graph = pipeline_graph(_pipeline(), runner=SparkRunner())
    assert graph.title == f"SparkRunner fused stages (batch): {len(graph.stages)} stages"
    assert beam_graph(_pipeline()).stages != graph.stages


def test_without_graphviz_an_image_name_writes_the_dot_and_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(graph_module.shutil, "which", lambda name: None)
    with caplog.at_level(logging.WARNING, logger="runners.spark.graph"):
        written = write_graph("digraph pipeline {}\n", str(tmp_path / "g" / "stages.svg"))
    assert written == [str(tmp_path / "g" / "stages.dot")]
    assert (tmp_path / "g" / "stages.dot").read_text() == "digraph pipeline {}\n"
    assert not (tmp_path / "g" / "stages.svg").exists()
    assert "apt-get install -y graphviz" in caplog.text


def test_a_dot_name_writes_the_dot_text(tmp_path):
    path = tmp_path / "stages.dot"
    assert write_pipeline_graph(_pipeline(), str(path), SparkRunner()) == [str(path)]
    assert _clusters(path.read_text())


@pytest.mark.skipif(shutil.which("dot") is None,
                    reason="Graphviz's dot is not installed (Debian package graphviz)")
def test_with_graphviz_an_svg_is_rendered(tmp_path):
    written = write_graph(to_dot(fused_stage_graph(_pipeline())), str(tmp_path / "g.svg"))
    assert written == [str(tmp_path / "g.dot"), str(tmp_path / "g.svg")]
    assert "<svg" in (tmp_path / "g.svg").read_text()


def test_the_graph_option_of_a_job(tmp_path, capsys):
    path = tmp_path / "team_scores.dot"
    team_scores.run(["--events", "10", "--graph", str(path), "--output", str(tmp_path / "out")])
    assert f"pipeline graph: {path}" in capsys.readouterr().err
    dot = path.read_text()
    assert "not fused" in dot and '[label="TeamScores/TeamAndScore"]' in dot
