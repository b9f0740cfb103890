"""Timeline lanes, phase changes, the window (the last iterations, or any range: pan and zoom),
the overview, the summary bar, span placement in iteration columns and the Chrome trace."""

import json
import re

from view_fixtures import classes, make_spans_and_stats, parse_svg

from terra_nb.timeline import RunnerSpan, SpanLog, columns, span_name, to_chrome_trace
from terra_nb.views.static import StaticTimeline
from terra_nb.views.timeline_summary import parts, summary, summary_svg
from terra_nb.views.timeline_svg import timeline_svg
from terra_nb.views.timeline_window import column_times, select

SVG_NS = "{http://www.w3.org/2000/svg}"


def _by_class(root, cls):
    return [el for el in root.iter() if cls in classes(el)]


def test_lanes_spans_and_moments():
    spans, stats = make_spans_and_stats(6)
    root = parse_svg(timeline_svg(spans, stats, window=20))
    assert root.get("data-iterations") == "6"
    assert len(_by_class(root, "terra-lane")) == 2
    python_exec = [el for el in _by_class(root, "terra-exec") if "terra-python" in classes(el)]
    graph_exec = [el for el in _by_class(root, "terra-exec") if "terra-graph" in classes(el)]
    assert len(python_exec) == 6 and len(graph_exec) == 3
    assert len(_by_class(root, "terra-stall")) == 6 + 3
    assert len(_by_class(root, "terra-feed")) == 6 and len(_by_class(root, "terra-fetch")) == 6
    assert float(graph_exec[0].get("y")) > float(python_exec[0].get("y"))  # the GraphRunner lane
    title = python_exec[0].find(f"{SVG_NS}title").text
    assert title == "PythonRunner exec · iteration 0 · tracing · 4.000 ms"


def test_markers_are_drawn_above_every_span():
    """A fetch marker drawn before an exec span lay under it and could not be hovered."""
    spans, stats = make_spans_and_stats(6)
    order = [el for el in parse_svg(timeline_svg(spans, stats)).iter()
             if "terra-span" in classes(el)]
    kinds = ["moment" if classes(el) & {"terra-feed", "terra-fetch"} else "area" for el in order]
    assert kinds.index("moment") > len(kinds) - 1 - kinds[::-1].index("area")


def test_every_drawing_has_its_own_hatch_pattern():
    """Two timelines on one page (two notebooks) once shared the id ``terra-hatch``: ``url(#id)``
    names the first in the page, maybe in a hidden tab, and the stalls turned white."""
    spans, stats = make_spans_and_stats(3)
    ids = []
    for svg in (timeline_svg(spans, stats), timeline_svg(spans, stats), summary_svg(
            summary(stats))):
        (pattern,) = re.findall(r'<pattern id="([^"]+)"', svg)
        assert set(re.findall(r'fill="url\(#([^)]+)\)"', svg)) == {pattern}
        ids.append(pattern)
    assert len(set(ids)) == 3


def test_phase_changes_are_marked():
    spans, stats = make_spans_and_stats(6)
    root = parse_svg(timeline_svg(spans, stats))
    changes = ["".join(el.itertext()) for el in _by_class(root, "terra-phase-change")]
    assert changes == ["→ coexec", "→ fallback", "→ coexec"]
    assert len(_by_class(root, "terra-phase-tracing")) == 2


def test_following_window_keeps_the_last_iterations():
    spans, stats = make_spans_and_stats(30)
    shown = select(spans, stats, 5)
    assert shown.iterations == [25, 26, 27, 28, 29] and shown.follow
    assert {s.iteration for s in shown.spans} == {25, 26, 27, 28, 29}
    root = parse_svg(timeline_svg(spans, stats, window=5))
    assert root.get("data-iterations") == "5"
    assert root.get("data-caption") == "iterations #25–#29 (the last 5 of 30)"
    labels = ["".join(el.itertext()) for el in root.iter() if (el.text or "").startswith("#")]
    assert labels[0] == "#25"


def test_any_range_of_the_run_can_be_shown():
    """Pan and zoom: a range of loop time (seconds from the first iteration's start) shows the
    iterations in it, however early; the overview shows every iteration and marks the range."""
    spans, stats = make_spans_and_stats(30)  # 7 ms per iteration
    root = parse_svg(timeline_svg(spans, stats, window=5, view_range=[0.029, 0.036]))
    assert root.get("data-caption").startswith("iterations #4–#5 of 30")
    assert root.get("data-follow") == "0"
    assert float(root.get("data-t0")) == 0.029 and float(root.get("data-total")) > 0.2
    phases = _by_class(root, "terra-phase")
    assert any("iteration 4: fallback" in el.find(f"{SVG_NS}title").text for el in phases)
    overview = _by_class(root, "terra-overview")[0]
    assert len([el for el in overview if el.tag == f"{SVG_NS}rect"]) == 1 + 30 + 1
    beyond = parse_svg(timeline_svg(spans, stats, view_range=[5.0, 5.01]))  # clamped to the end
    assert beyond.get("data-caption").startswith("iterations #28–#29 of 30")


def test_empty_timeline_says_so():
    assert "no iterations yet" in timeline_svg([], [])


def test_summary_splits_every_iteration_and_adds_up():
    spans, stats = make_spans_and_stats(6)
    totals = summary(stats)
    assert totals["iterations"] == 6
    assert abs(totals["wall"] - (5 * 0.007 + 0.006)) < 1e-9  # start to next start
    assert abs(totals["python_exec"] - 0.024) < 1e-9 and abs(totals["python_stall"] - 0.012) < 1e-9
    assert abs(totals["graph_exec"] - 0.015) < 1e-9 and abs(totals["graph_stall"] - 0.003) < 1e-9
    for runner, shown in parts(totals).items():
        assert abs(sum(v for _, v, _ in shown) - totals["wall"]) < 1e-9, runner
    root = parse_svg(summary_svg(totals))
    rows = {el.get("class").split()[-1]: "".join(el.itertext()) for el in
            _by_class(root, "terra-summary-row")}
    assert "6.83 ms/iteration · exec 59% · stall 29% · between 12%" in rows["terra-summary-python"]
    assert "6.83 ms/iteration · exec 37% · stall 7% · idle 56%" in rows["terra-summary-graph"]


def test_graph_spans_are_placed_in_the_column_they_ran_in():
    """A stall since before the loop, a compile that ran on into the next iterations and a wait
    through an iteration with no graph work: each piece lies in its column, and what a column
    says adds up to at most its length. Before, each span went to the iteration it worked for
    (a 163 ms stall in a 15.6 ms iteration)."""
    log = SpanLog()
    for i, start in enumerate((1.0, 1.01, 1.02, 1.03)):
        log.begin(i, start)
    graph = [RunnerSpan("graph", "stall", 0, "coexec", 0.5, 1.002),  # since the thread started
             RunnerSpan("graph", "compile", 0, "coexec", 1.002, 1.015, "segment s1", 4, True),
             RunnerSpan("graph", "stall", 1, "coexec", 1.015, 1.031),  # on through iteration 2
             RunnerSpan("graph", "exec", 1, "coexec", 1.031, 1.032, "segment s2", 2, True)]
    log.add(graph)
    placed = [(s.kind, s.iteration, s.work, round(s.t_start, 3), round(s.t_end, 3))
              for s in log.spans()]
    assert placed == [("stall", 0, 0, 1.0, 1.002), ("compile", 0, 0, 1.002, 1.01),
                      ("compile", 1, 0, 1.01, 1.015), ("stall", 1, 1, 1.015, 1.02),
                      ("stall", 3, 1, 1.03, 1.031), ("exec", 3, 1, 1.031, 1.032)]
    # iteration 2: the GraphRunner had nothing to do (idle, not a stall)
    assert 2 not in log.graph_times
    assert [round(v, 3) for v in log.graph_times[1]] == [0.0, 0.005, 0.005]


def test_column_times_add_up_to_the_column():
    spans, stats = make_spans_and_stats(3)
    cols = columns(stats, spans)
    for s, col in zip(stats, cols):
        t = column_times(s, col, spans)
        python = t["exec"] + t["stall"] + t["views"] + t["between"]
        graph = t["graph_exec"] + t["graph_compile"] + t["graph_stall"] + t["graph_idle"]
        assert abs(python - t["wall"]) < 1e-9 and abs(graph - t["wall"]) < 1e-9


def test_spans_name_what_ran():
    compiled = RunnerSpan("graph", "exec", 3, "coexec", 0, 1, "segment s2 · MatMul … Tanh", 14,
                          True)
    assert span_name(compiled) == "segment s2 · MatMul … Tanh · 14 ops · compiled"
    op_by_op = RunnerSpan("graph", "exec", 3, "coexec", 0, 1, "segment s2 · MatMul", 1, False)
    assert span_name(op_by_op) == "segment s2 · MatMul · 1 op · op by op"
    compile_ = RunnerSpan("graph", "compile", 3, "coexec", 0, 1, "segment s2 · MatMul", 1, True)
    assert span_name(compile_) == "compile segment s2 · MatMul · 1 op · compiled"


def test_chrome_trace_has_both_lanes_moments_and_named_slices():
    spans, _ = make_spans_and_stats(3)
    spans.append(RunnerSpan("graph", "compile", 2, "coexec", 100.02, 100.03, "segment s1 · Mul",
                            3, True, work=1))
    trace = json.loads(to_chrome_trace(spans))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"PythonRunner", "GraphRunner"}
    phases = [e["ph"] for e in trace["traceEvents"] if e["ph"] != "M"]
    assert phases.count("X") == 9 and phases.count("i") == 6
    assert all(e["ts"] >= 0 for e in trace["traceEvents"] if "ts" in e)
    compile_ = next(e for e in trace["traceEvents"] if e.get("cat") == "compile")
    assert compile_["name"] == "compile segment s1 · Mul · 3 ops · compiled"
    assert compile_["args"]["work_of_iteration"] == 1 and compile_["args"]["iteration"] == 2


def test_static_timeline_pictures():
    spans, stats = make_spans_and_stats(4)
    bundle = StaticTimeline(spans, stats, window=3)._repr_mimebundle_()
    assert 'data-caption="iterations #1–#3 (the last 3 of 4)"' in bundle["image/svg+xml"]
    assert bundle["image/png"].startswith(b"\x89PNG") and "text/html" not in bundle


def test_the_span_log_keeps_the_last_iterations_also_when_one_arrives_late():
    def span(iteration, runner="python"):
        return RunnerSpan(runner, "exec", iteration, "coexec", 0.0, 1.0)

    log = SpanLog(keep=3)
    log.add([span(0), span(1)])
    log.add([span(2), span(1, "graph")])
    log.add([span(3)])
    assert [s.iteration for s in log.spans()] == [1, 1, 2, 3]
    log.add([span(5), span(4)])  # the GraphRunner's spans of 4 after Python's of 5
    assert [s.iteration for s in log.spans()] == [3, 4, 5]
    log.add([span(6)])
    assert [s.iteration for s in log.spans()] == [4, 5, 6]
    assert log.graph_times == {1: [1.0, 0.0, 0.0]}  # counted for every iteration, kept or not
