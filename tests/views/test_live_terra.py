"""A dashboard on a real ``Terra(mode="trace")`` loop: it reads only the exported data."""

import json

import pytest

pytest.importorskip("anywidget")
tf = pytest.importorskip("tensorflow")

import terra_nb  # noqa: E402
from terra_nb.views import Dashboard, StaticGraph  # noqa: E402


def test_dashboard_follows_a_traced_loop():
    w = tf.Variable(tf.ones((3, 3)))
    with terra_nb.Terra(mode="trace") as terra:
        dash = Dashboard(interval=0.0).attach(terra)
        for step in terra.loop(range(6)):
            y = tf.matmul(w, w)
            if step % 2 == 0:
                y = y * 2.0
            for _ in range(1 + step % 3):
                y = y + 1.0
            w.assign(y / tf.reduce_max(y))
            float(tf.reduce_sum(y))
    dash.finish()
    counters = json.loads(dash.counters)
    assert counters["iteration"] == 5 and counters["phase"] == "tracing"
    assert counters["status"] == "finished" and counters["nodes"] == len(terra.graph.nodes)
    data = json.loads(dash.graph_json)
    assert len(data["nodes"]) == len(terra.graph.nodes)
    assert data["branch_points"] == list(terra.graph.branch_points)
    loops = [n for n in data["nodes"] if n["kind"] == "loop"]
    assert len(loops) == 1 and sorted(loops[0]["trip_counts"]) == [1, 2, 3]
    assert "y = y + 1.0" in [line.strip() for line in data["source_lines"].values()]
    assert 'data-iterations="6"' in dash.timeline_svg
    svg = dash.svg.replace("&#45;", "-")  # Graphviz escapes the hyphens of class names
    assert "terra-case" in svg and "terra-fetch" in svg
    svg = StaticGraph(terra.graph)._repr_mimebundle_()["image/svg+xml"].replace("&#45;", "-")
    assert 'class="cluster terra-loop"' in svg


def test_dashboard_follows_a_co_executed_loop():
    """Under coexec the dashboard gets GraphRunner spans and the current path from last_path."""
    w = tf.Variable(tf.ones((3, 3)))
    with terra_nb.Terra(mode="coexec") as terra:
        dash = Dashboard(interval=0.0).attach(terra)
        for _ in terra.loop(range(6)):
            w.assign(tf.matmul(w, w) / 3.0)
            float(tf.reduce_sum(w))
    dash.finish()
    counters = json.loads(dash.counters)
    assert counters["phase"] == "coexec" and counters["iteration"] == 5
    assert terra.last_path and set(terra.last_path) <= {n.id for n in terra.graph.nodes}
    assert {s.runner for s in terra.spans} == {"python", "graph"}
    assert 'data-iterations="6"' in dash.timeline_svg
