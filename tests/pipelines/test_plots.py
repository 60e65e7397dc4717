"""Pictures of a replay: the marks behind the pane diagram, and figures that are real images.

The marks are tested exactly on a small replay (hand-written panes, then the panes a real
pipeline fires on the test's runner); the PNGs are read back and checked for size and
content. Nothing is timed.
"""

from __future__ import annotations

import json

import numpy
import pytest
from matplotlib import image as matplotlib_image

from pipelines import team_scores
from pipelines.events import GameEvent
from pictures.diagram import BatchRecord, InputPoint, PaneMark, watermark_lag
from pictures.plots import TIMING_STYLE, companion_path, draw_pane_diagram, draw_throughput
from pipelines.generator import GeneratedRecord
from pipelines.output import WriteJsonLines
from pipelines.pane_diagram import pane_diagram, replay_batches, typed_elements
from pipelines.replay import Replay, plan_replay
from pipelines.team_scores import TeamScores
from transforms.aggregations import SumFn
from transforms.parsing import ParseJson
from transforms.windows import fixed_windows
from triggers.panes import DescribePanes, pane_record

ELEMENTS = typed_elements(GameEvent, lambda event: [(event.team, event.score)])


def _game(event_time, arrival, team, score):
    fields = {"user": f"{team}_player", "team": team, "score": score, "timestamp": event_time}
    return GeneratedRecord(float(event_time), 1000.0 + arrival, fields)


#: Ticks 0, 5, 10, 15, 20 (+ the final tick 21); watermark 10 s behind the newest event.
RECORDS = [
    _game(10, 0, "red", 1),
    _game(20, 5, "red", 2),
    _game(70, 10, "blue", 4),   # the watermark reaches 60: [0, 60) is on time at tick 10
    _game(30, 15, "red", 8),    # behind the watermark: late for [0, 60)
    _game(100, 20, "blue", 16),
    GeneratedRecord(40.0, 1020.5, {"team": "red", "timestamp": 40.0}),  # malformed: no score
]
STEPS = plan_replay(RECORDS, tick_seconds=1, watermark_lag_seconds=10)


def _diagram(panes, late_firings_per_element=False):
    return pane_diagram(STEPS, panes, elements=ELEMENTS, window_fn=fixed_windows(60),
                        combine_fn=SumFn(), tick_seconds=1,
                        late_firings_per_element=late_firings_per_element)


def _pane(key, value, window, timing, index):
    return pane_record(key, value, window=window, timestamp=window[1] - 0.001, timing=timing,
                       index=index, is_first=index == 0, is_last=False)


HAND_PANES = [
    _pane("red", 1, (0, 60), "EARLY", 0),
    _pane("red", 3, (0, 60), "ON_TIME", 1),
    _pane("red", 11, (0, 60), "LATE", 2),
    _pane("blue", 20, (60, 120), "ON_TIME", 0),
    _pane("blue", 99, (60, 120), "EARLY", 0),  # no tick ever holds 99: not placed
]


def test_inputs_and_watermark_come_from_the_replay_plan():
    diagram = _diagram(HAND_PANES)
    assert diagram.inputs == [
        InputPoint(0.0, 10.0, False), InputPoint(5.0, 20.0, False),
        InputPoint(10.0, 70.0, False), InputPoint(15.0, 30.0, True),
        InputPoint(20.0, 100.0, False), InputPoint(20.0, 40.0, True)]
    # The final tick (21) carries the watermark past the newest event time, then to infinity.
    assert diagram.watermark == [(0.0, 0.0), (5.0, 10.0), (10.0, 60.0), (15.0, 60.0),
                                 (20.0, 90.0), (21.0, 101.0)]
    assert diagram.windows == [(0.0, 60.0), (60.0, 120.0)]
    assert diagram.keys == ["blue", "red"]
    assert diagram.end_time == 21.0


def test_pane_marks_place_each_pane_at_its_fire_time_or_span():
    diagram = _diagram(HAND_PANES)
    assert diagram.panes == [
        PaneMark("red", 1, (0.0, 60.0), "EARLY", 0, 0.0, 5.0, False),
        PaneMark("red", 3, (0.0, 60.0), "ON_TIME", 1, 10.0, 10.0, True),
        PaneMark("red", 11, (0.0, 60.0), "LATE", 2, 15.0, 21.0, False),
        PaneMark("blue", 20, (60.0, 120.0), "ON_TIME", 0, 21.0, 21.0, True),
        PaneMark("blue", 99, (60.0, 120.0), "EARLY", 0, None, None, False),
    ]


def test_a_late_pane_per_late_element_fires_on_its_arrival():
    late = [mark for mark in _diagram(HAND_PANES, late_firings_per_element=True).panes
            if mark.timing == "LATE"]
    assert late == [PaneMark("red", 11, (0.0, 60.0), "LATE", 2, 15.0, 15.0, True)]


def test_an_early_pane_cannot_be_placed_after_its_window_closed():
    # 11 is red's total only after the late element (tick 15), when [0, 60) had closed.
    mark = _diagram([_pane("red", 11, (0, 60), "EARLY", 0)]).panes[0]
    assert (mark.fire_time, mark.fire_time_latest) == (None, None)


def test_batches_and_watermark_lag_from_the_replay_plan():
    batches = replay_batches(STEPS)
    assert batches == [BatchRecord(0.0, 1, 0.0, 10.0), BatchRecord(5.0, 1, 10.0, 20.0),
                       BatchRecord(10.0, 1, 60.0, 70.0), BatchRecord(15.0, 1, 60.0, 70.0),
                       BatchRecord(20.0, 2, 90.0, 100.0)]
    assert watermark_lag(batches) == [(0.0, 10.0), (5.0, 10.0), (10.0, 10.0), (15.0, 10.0),
                                      (20.0, 10.0)]


def _panes_of_a_real_run(make_pipeline, tmp_path, early_seconds):
    path = str(tmp_path / "panes.jsonl")
    with make_pipeline(streaming=True) as p:
        _ = (p
             | Replay(RECORDS, tick_seconds=1, watermark_lag_seconds=10)
             | ParseJson(GameEvent)).parsed \
            | TeamScores(window_seconds=60, early_seconds=early_seconds, allowed_lateness=120) \
            | DescribePanes() | WriteJsonLines(path)
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def test_every_pane_of_a_real_run_is_placed(make_pipeline, tmp_path):
    panes = _panes_of_a_real_run(make_pipeline, tmp_path, early_seconds=3)
    diagram = _diagram(panes, late_firings_per_element=True)
    assert len(diagram.panes) == len(panes) and panes
    assert all(mark.fire_time is not None for mark in diagram.panes), diagram.panes
    exact = sorted((mark.key, mark.timing, mark.value, mark.fire_time)
                   for mark in diagram.panes if mark.timing != "EARLY")
    assert exact == [("blue", "ON_TIME", 20, 21.0), ("red", "LATE", 11, 15.0),
                     ("red", "ON_TIME", 3, 10.0)]
    # Early panes every 3 s: each within the span from its content's arrival to the next
    # change of the total (red's at 5 and 10, blue's at 15 in the model).
    early = sorted((mark.key, mark.value, mark.fire_time, mark.fire_time_latest)
                   for mark in diagram.panes if mark.timing == "EARLY")
    assert early == [("blue", 4, 10.0, 20.0), ("red", 1, 0.0, 5.0), ("red", 3, 5.0, 10.0)]


def _read_png(path):
    pixels = matplotlib_image.imread(str(path))
    assert pixels.ndim == 3 and pixels.shape[2] in (3, 4)
    return pixels[:, :, :3]


def _has_colour(pixels, hex_colour, tolerance=0.02):
    rgb = numpy.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return bool((numpy.abs(pixels - rgb).max(axis=2) < tolerance).any())


def test_the_pane_diagram_is_a_real_picture(tmp_path):
    path = tmp_path / "panes.png"
    assert draw_pane_diagram(_diagram(HAND_PANES), str(path), title="test") == str(path)
    assert path.stat().st_size > 0
    pixels = _read_png(path)
    assert pixels.shape[:2] == (800, 1200)  # 12 x 8 inches at 100 dpi
    assert (pixels < 0.95).any(axis=2).mean() > 0.01  # not blank
    assert len(numpy.unique(pixels.reshape(-1, 3), axis=0)) > 10
    for timing in ("ON_TIME", "LATE", "EARLY"):
        assert _has_colour(pixels, TIMING_STYLE[timing][1]), timing


def test_the_throughput_figure_is_a_real_picture(tmp_path):
    path = tmp_path / "run-throughput.png"
    draw_throughput(replay_batches(STEPS), str(path))
    pixels = _read_png(path)
    assert pixels.shape[:2] == (600, 1000)
    assert _has_colour(pixels, "#0072b2") and _has_colour(pixels, "#009e73")


def test_companion_path_names_the_second_figure():
    assert companion_path("out/run.png", "throughput") == "out/run-throughput.png"
    assert companion_path("run", "throughput") == "run-throughput"


def test_team_scores_plot_option_writes_both_figures(tmp_path, capsys):
    plot = tmp_path / "pictures" / "scores.png"
    team_scores.run(["--events", "40", "--seed", "3", "--plot", str(plot),
                     "--output", str(tmp_path / "scores")])
    assert f"pictures: {plot}, {tmp_path / 'pictures' / 'scores-throughput.png'}" in \
        capsys.readouterr().err
    for path in (plot, tmp_path / "pictures" / "scores-throughput.png"):
        assert _read_png(path).shape[0] > 100


@pytest.mark.parametrize("arguments, message", [
    (["--plot", "x.png", "--source", "file"], "--plot draws a replayed stream"),
    (["--plot", "x.gif"], "name a .png, .svg, .pdf file"),
])
def test_bad_plot_options_are_usage_errors(tmp_path, capsys, arguments, message):
    data = tmp_path / "game.jsonl"
    data.write_text("{}\n")
    if "file" in arguments:
        arguments = arguments + ["--input", str(data)]
    with pytest.raises(SystemExit) as exit_info:
        team_scores.run(arguments)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_float_values_match_within_rounding():
    from transforms.aggregations import MeanCombineFn

    records = [GeneratedRecord(1.0, 0.0, {"s": 0.1}), GeneratedRecord(2.0, 0.0, {"s": 0.2})]
    diagram = pane_diagram(
        plan_replay(records), [_pane("k", 0.15, (0, 60), "ON_TIME", 0)],
        elements=lambda record: [("k", record.fields["s"])], window_fn=fixed_windows(60),
        combine_fn=MeanCombineFn(), tick_seconds=1)
    assert (0.1 + 0.2) / 2 != 0.15  # the pane value and the recomputed mean differ in the last bit
    assert diagram.panes[0].fire_time == 1.0


# ---- the pictures of a live run (make run): observed panes, the runner's batch report ----

from pipelines.live.pictures import live_pane_diagram, report_batches  # noqa: E402
from pipelines.live.report import ReportTail  # noqa: E402


def _report_line(batch, at, elements, watermark):
    """A line as the SparkRunner's --streaming_report writes it (a subset of its fields)."""
    lag = None if watermark is None else at - watermark
    return json.dumps({"batch": batch, "time": at + 0.2, "clock": at, "input_elements": elements,
                       "rate": float(elements), "millis": 150,
                       "output_watermarks": {"Group": watermark},
                       "watermark_lag_seconds": lag}) + "\n"


def test_the_streaming_report_is_read_as_it_grows(tmp_path):
    path = tmp_path / "report.jsonl"
    tail = ReportTail(str(path))
    assert tail.read() == []  # not written yet
    first, second = _report_line(0, 100.0, 7, None), _report_line(1, 101.0, 5, 97.0)
    path.write_text(first + second[:20])  # the second line is torn mid-write
    assert [(b.batch, b.watermark, b.lag) for b in tail.read()] == [(0, None, None)]
    with open(path, "a") as handle:
        handle.write(second[20:] + "not json\n")
    assert [(b.batch, b.input_elements, b.watermark, b.lag) for b in tail.read()] == [
        (1, 5, 97.0, 4.0)]
    assert tail.read() == []


def _live_run():
    lines = [_report_line(0, 100.0, 30, None), _report_line(1, 101.0, 12, 95.0),
             _report_line(2, 102.0, 20, 99.5)]
    from pipelines.live.report import parse_report_line

    reports = [parse_report_line(line) for line in lines]
    sent = [(100.5, _game(96.0, 0, "red", 2)), (101.5, _game(96.5, 0, "blue", 3)),
            (101.6, _game(90.0, 0, "red", 5)),   # behind the watermark (95) when sent: late
            (101.8, _game(101.0, 0, "red", 1))]
    window = {"start": 90.0, "end": 100.0}
    panes = [(101.2, {"key": "red", "value": 2, "window": window,
                      "pane": {"timing": "EARLY", "index": 0}}),
             (102.3, {"key": "red", "value": 2, "window": window,
                      "pane": {"timing": "ON_TIME", "index": 1}}),
             (102.4, {"key": "blue", "value": 3, "window": window,
                      "pane": {"timing": "ON_TIME", "index": 0}}),
             (102.6, {"key": "red", "value": 7, "window": window,
                      "pane": {"timing": "LATE", "index": 2}})]
    return sent, panes, reports


def test_the_live_pane_diagram_draws_what_was_sent_seen_and_reported():
    sent, panes, reports = _live_run()
    diagram = live_pane_diagram(sent, panes, reports, started=100.0)
    assert [(round(point.arrival, 3), point.event_time, point.late) for point in diagram.inputs] == [
        (0.5, 96.0, False), (1.5, 96.5, False), (1.6, 90.0, True), (1.8, 101.0, False)]
    # The watermark of each batch, at the time the batch ended (None: not drawn).
    assert diagram.watermark == [(pytest.approx(1.2), 95.0), (pytest.approx(2.2), 99.5)]
    assert [(mark.key, mark.timing, mark.index, round(mark.fire_time, 1), mark.value)
            for mark in diagram.panes] == [("red", "EARLY", 0, 1.2, 2), ("red", "ON_TIME", 1, 2.3, 2),
                                           ("blue", "ON_TIME", 0, 2.4, 3), ("red", "LATE", 2, 2.6, 7)]
    assert diagram.windows == [(90.0, 100.0)] and diagram.keys == ["blue", "red"]
    batches = report_batches(reports, started=100.0)
    assert [(round(b.time, 1), b.events) for b in batches] == [(0.2, 30), (1.2, 12), (2.2, 20)]
    # The figure's lag: wall time at the end of the batch - watermark.
    assert [lag for _, lag in watermark_lag(batches)] == [None, pytest.approx(6.2),
                                                          pytest.approx(2.7)]


def test_the_live_figures_are_real_pictures(tmp_path):
    from pipelines.live.pictures import draw_live_pictures

    sent, panes, reports = _live_run()

    class _Producer:  # what draw_live_pictures reads of the producer
        pass

    producer = _Producer()
    producer.sent = sent
    path = tmp_path / "live.png"
    files = draw_live_pictures(str(path), producer, panes, reports, started=100.0)
    assert files == [str(path), str(tmp_path / "live-throughput.png")]
    diagram, throughput = _read_png(files[0]), _read_png(files[1])
    assert diagram.shape[:2] == (800, 1200) and throughput.shape[:2] == (600, 1000)
    for pixels in (diagram, throughput):
        assert (pixels < 0.95).any(axis=2).mean() > 0.01  # not blank
    for timing in ("ON_TIME", "LATE", "EARLY"):
        assert _has_colour(diagram, TIMING_STYLE[timing][1]), timing
    assert _has_colour(diagram, "#cc0000")  # the late input
    assert _has_colour(throughput, "#0072b2") and _has_colour(throughput, "#009e73")


def test_the_benchmark_figure_draws_the_results_files(tmp_path):
    from pictures.bench_figure import draw_benchmarks, read_results, throughputs

    results = tmp_path / "run.jsonl"
    rows = [{"workload": "global_sum", "engine": engine, "status": "ok", "agrees": True,
             "events": 1000, "events_per_second": rate, "run_id": "r1"}
            for engine, rate in (("spark", 500.0), ("direct", 800.0), ("pyspark", 2000.0))]
    rows.append({**rows[0], "agrees": False, "events_per_second": 9e9})  # a wrong answer
    rows.append({**rows[0], "events": 10, "events_per_second": 1.0})     # another size
    rows.append({"kind": "ratio", "workload": "global_sum", "ratio": "spark/direct"})
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    records = read_results([str(results)])
    assert throughputs(records, events=1000) == {
        "global_sum": {"spark": [500.0], "direct": [800.0], "pyspark": [2000.0]}}
    path = tmp_path / "bench.png"
    assert draw_benchmarks(records, str(path)) == str(path)
    pixels = _read_png(path)
    assert pixels.shape[:2] == (500, 1000)
    assert _has_colour(pixels, "#0072b2") and _has_colour(pixels, "#009e73")
    with pytest.raises(ValueError, match="no good benchmark run of 5 events"):
        draw_benchmarks(records, str(path), events=5)
