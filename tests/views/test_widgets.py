"""The widgets from Python: traits after construction, toggling, messages, mimebundles, the
dashboard's throttled updates, the ES modules."""

import json
import shutil
import subprocess
import sys
import time

import pytest
from view_fixtures import make_graph, make_spans_and_stats

pytest.importorskip("anywidget")

from terra_nb.views import Dashboard, GraphView, TimelineView  # noqa: E402
from terra_nb.views.dashboard import compose_esm  # noqa: E402

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PNG_MAGIC = b"\x89PNG"


def test_graph_view_traits(graph):
    view = GraphView(graph, collapse_loops=False)
    assert view.svg.startswith("<svg") and 'id="c2"' in view.svg
    data = json.loads(view.graph_json)
    assert len(data["nodes"]) == 12 and data["elements"]["c2"] == [2, 3, 4, 5]
    assert view.details(6)["op_type"] == "Mean"
    view.set_graph(graph, current=[0, 2, 6, 7], new=[7])
    assert view.current == [0, 2, 6, 7] and view.new_nodes == [7]


def test_toggling_a_chain_lays_the_graph_out_again(graph):
    view = GraphView(graph)
    assert 'id="c2"' in view.svg and 'id="n3"' not in view.svg
    view.toggled = ["c2"]
    assert 'id="c2"' not in view.svg and 'id="n3"' in view.svg
    assert json.loads(view.graph_json)["groups"]["c2"]["collapsed"] is False


@pytest.mark.usefixtures("needs_dot")
def test_graph_view_mimebundle_has_static_pictures(graph):
    """SVG and PNG, never HTML: a saved notebook reopened untrusted sanitises HTML (inline SVG
    is stripped) and shows no SVG output, but it shows a PNG."""
    view = GraphView(graph)
    view.current = [0, 2]
    data, _ = view._repr_mimebundle_()
    assert WIDGET_MIME in data and "text/html" not in data
    assert data["image/svg+xml"].startswith("<svg") and "terra&#45;current" in data["image/svg+xml"]
    assert data["image/png"].startswith(PNG_MAGIC)
    assert "yellow hexagon node: a Python if" in data["image/svg+xml"]  # the legend is there


def test_timeline_view_traits_and_chrome_trace_message():
    spans, stats = make_spans_and_stats(5)
    view = TimelineView(spans, stats, window=3)
    assert 'data-iterations="3"' in view.timeline_svg
    assert "terra-summary-python" in view.summary_svg
    sent = []
    view.send = lambda content, buffers=None: sent.append(content)
    view._on_timeline_msg(view, {"type": "chrome_trace"}, [])
    assert sent[0]["type"] == "chrome_trace"
    assert len(json.loads(sent[0]["json"])["traceEvents"]) == 2 + len(spans)
    data, _ = view._repr_mimebundle_()
    assert WIDGET_MIME in data and "text/html" not in data
    assert "terra-timeline-svg" in data["image/svg+xml"] and data["image/png"].startswith(PNG_MAGIC)


class FakeTerra:
    """What a dashboard reads from a Terra: subscribe, graph, spans, stats."""

    def __init__(self):
        self.listeners, self.graph = [], make_graph()
        self.all_spans, self.all_stats = make_spans_and_stats(200)
        self.spans, self.stats = (), ()

    def subscribe(self, listener):
        self.listeners.append(listener)

    def run(self, n, seconds_per_iteration):
        for i in range(n):
            time.sleep(seconds_per_iteration)
            self.spans = tuple(s for s in self.all_spans if s.iteration <= i)
            self.stats = tuple(self.all_stats[: i + 1])
            for listener in self.listeners:
                listener(self.stats[-1])


def test_dashboard_updates_at_a_bounded_rate():
    terra = FakeTerra()
    dash = Dashboard(interval=0.1).attach(terra)
    start = dash.updates
    terra.run(100, 0.004)  # ~0.4-0.5 s of iterations
    assert 2 <= dash.updates - start <= 7
    counters = json.loads(dash.counters)
    assert counters["phase"] in ("coexec", "fallback") and counters["iteration"] > 50
    assert counters["fallbacks"] == 1 and counters["iterations_per_s"] > 50
    dash._worker.wait()
    assert 'id="c2"' in dash.svg and json.loads(dash.graph_json)["elements"]


def test_dashboard_flush_and_finish_catch_up():
    terra = FakeTerra()
    dash = Dashboard(interval=10.0).attach(terra)
    terra.run(12, 0.0)
    assert json.loads(dash.counters)["iteration"] < 11  # throttled
    dash.finish()
    counters = json.loads(dash.counters)
    assert counters["iteration"] == 11 and counters["status"] == "finished"
    assert 'data-iterations="12"' in dash.timeline_svg
    data, _ = dash._repr_mimebundle_()
    assert "text/html" not in data and data["image/png"].startswith(PNG_MAGIC)
    dash.close()


def test_dashboard_uses_an_exported_path_when_the_source_has_one():
    terra = FakeTerra()
    terra.last_path = (0, 2, 6, 8)
    dash = Dashboard(interval=0.0).attach(terra)
    terra.run(3, 0.0)
    assert dash.current == [0, 2, 6, 8]


def test_composed_dashboard_module_has_one_render():
    esm = compose_esm("graph_view.js", "timeline_view.js", entry="dashboard.js")
    assert esm.count("export default { render }") == 1 and esm.count("function render(") == 1
    assert "export function mountGraph" in esm and "export function mountTimeline" in esm
    assert str(Dashboard._esm) == esm


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("name", ["graph_view.js", "timeline_view.js", "dashboard"])
def test_es_modules_parse(name, tmp_path):
    from terra_nb.views import dashboard

    source = (
        str(Dashboard._esm) if name == "dashboard" else (dashboard.HERE / name).read_text()
    )
    path = tmp_path / "module.mjs"
    path.write_text(source)
    done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_widgets_need_anywidget_with_a_clear_error(monkeypatch):
    import terra_nb.views as views

    monkeypatch.setitem(sys.modules, "anywidget", None)
    with pytest.raises(ImportError, match=r"pip install terra-nb\[views\]"):
        views._widget_module("GraphView")
    assert views.StaticGraph(make_graph())._repr_mimebundle_()["image/svg+xml"].startswith("<svg")
