"""Timeline lanes, phase changes, the rolling window, the summary bar and the Chrome trace."""

import json

from view_fixtures import classes, make_spans_and_stats, parse_svg

from terra_nb.timeline import to_chrome_trace
from terra_nb.views.static import StaticTimeline
from terra_nb.views.timeline_svg import last_iterations, summary, summary_svg, timeline_svg


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
    title = python_exec[0].find("{http://www.w3.org/2000/svg}title").text
    assert title == "PythonRunner exec · iteration 0 · tracing · 4.000 ms"


def test_phase_changes_are_marked():
    spans, stats = make_spans_and_stats(6)
    root = parse_svg(timeline_svg(spans, stats))
    changes = ["".join(el.itertext()) for el in _by_class(root, "terra-phase-change")]
    assert changes == ["→ coexec", "→ fallback", "→ coexec"]
    assert len(_by_class(root, "terra-phase-tracing")) == 2


def test_rolling_window_keeps_the_last_iterations():
    spans, stats = make_spans_and_stats(30)
    w_spans, w_stats = last_iterations(spans, stats, 5)
    assert [s.iteration for s in w_stats] == [25, 26, 27, 28, 29]
    assert {s.iteration for s in w_spans} == {25, 26, 27, 28, 29}
    root = parse_svg(timeline_svg(spans, stats, window=5))
    assert root.get("data-iterations") == "5"
    labels = ["".join(el.itertext()) for el in root.iter() if (el.text or "").startswith("#")]
    assert labels[0] == "#25"


def test_empty_timeline_says_so():
    assert "no iterations yet" in timeline_svg([], [])


def test_summary_is_exec_and_stall_per_runner():
    spans, stats = make_spans_and_stats(6)
    totals = summary(stats)
    assert totals["iterations"] == 6
    assert abs(totals["python_exec"] - 0.024) < 1e-9 and abs(totals["python_stall"] - 0.012) < 1e-9
    assert abs(totals["graph_exec"] - 0.015) < 1e-9 and abs(totals["graph_stall"] - 0.003) < 1e-9
    root = parse_svg(summary_svg(totals))
    rows = {el.get("class").split()[-1]: "".join(el.itertext()) for el in
            _by_class(root, "terra-summary-row")}
    assert "6.00 ms/iteration · exec 67% · stall 33%" in rows["terra-summary-python"]
    assert "3.00 ms/iteration · exec 83% · stall 17%" in rows["terra-summary-graph"]


def test_chrome_trace_has_both_lanes_and_moments():
    spans, _ = make_spans_and_stats(3)
    trace = json.loads(to_chrome_trace(spans))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"PythonRunner", "GraphRunner"}
    phases = [e["ph"] for e in trace["traceEvents"] if e["ph"] != "M"]
    assert phases.count("X") == 8 and phases.count("i") == 6
    assert all(e["ts"] >= 0 for e in trace["traceEvents"] if "ts" in e)


def test_static_timeline_pictures():
    spans, stats = make_spans_and_stats(4)
    bundle = StaticTimeline(spans, stats, window=3)._repr_mimebundle_()
    assert 'data-caption="iterations #1–#3 (the last 3 of 4)"' in bundle["image/svg+xml"]
    assert bundle["image/png"].startswith(b"\x89PNG") and "text/html" not in bundle


def test_the_span_log_keeps_the_last_iterations_also_when_one_arrives_late():
    from terra_nb.timeline import RunnerSpan, SpanLog

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
    assert log.graph_times == {1: [1.0, 0.0]}  # counted for every iteration, kept or not
