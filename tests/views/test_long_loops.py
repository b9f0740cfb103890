"""The timeline of a long co-executed loop: both lanes in every shown iteration, the GraphRunner
breakdown counted once its times arrive, the spans kept bounded."""

import json
import re

import pytest

pytest.importorskip("anywidget")
tf = pytest.importorskip("tensorflow")

import terra_nb  # noqa: E402
from terra_nb.views import Dashboard, TimelineView  # noqa: E402
from terra_nb.views.timeline_window import select  # noqa: E402

ITERATIONS = 100


@pytest.fixture(scope="module")
def long_run():
    """A 100-iteration co-executed loop watched by a dashboard that redraws at every iteration."""
    w = tf.Variable(tf.ones((8, 8)))
    with terra_nb.Terra(mode="coexec", keep_spans=30) as terra:
        dash = Dashboard(interval=0.0, window=20).attach(terra)
        for _ in terra.loop(range(ITERATIONS)):
            w.assign(tf.matmul(w, w) / 8.0)
            float(tf.reduce_sum(w))
    return terra, dash


def _lane_iterations(spans, runner):
    return {s.iteration for s in spans if s.runner == runner and s.kind == "exec"}


def test_spans_are_kept_per_iteration_and_bounded(long_run):
    terra, _ = long_run
    spans = terra.spans
    assert {s.iteration for s in spans} == set(range(ITERATIONS - 30, ITERATIONS))
    assert [s.iteration for s in spans] == sorted(s.iteration for s in spans)
    covered = [s.iteration for s in terra.stats if s.phase == "coexec"]
    assert len(covered) > 90
    worked = {s.of_iteration for s in spans if s.runner == "graph" and s.kind in ("exec",
                                                                                 "compile")}
    kept = {s.iteration for s in terra.stats[-30:] if s.phase == "coexec"}
    assert kept <= worked  # the GraphRunner ran every co-executed iteration's ops
    assert sum(s.graph_exec for s in terra.stats) > 0


def test_the_window_has_both_lanes_in_every_iteration(long_run):
    terra, _ = long_run
    shown = select(terra.spans, terra.stats, 20).spans
    last20 = set(range(ITERATIONS - 20, ITERATIONS))
    assert _lane_iterations(shown, "python") == last20
    assert _lane_iterations(shown, "graph") == last20
    view = TimelineView(terra.spans, terra.stats, window=20)
    python = re.findall(r'class="terra-span terra-exec terra-python"', view.timeline_svg)
    graph = re.findall(r'class="terra-span terra-exec terra-graph"', view.timeline_svg)
    assert len(python) >= 20 and len(graph) >= 20
    assert 'data-caption="iterations #80–#99 (the last 20 of 100)"' in view.timeline_svg


def test_the_live_dashboard_shows_both_lanes_and_the_graph_time(long_run):
    terra, dash = long_run
    assert "terra-exec terra-python" in dash.timeline_svg
    assert "terra-exec terra-graph" in dash.timeline_svg
    dash.finish()
    summary = re.search(r'terra-summary-graph">.*?</g>', dash.summary_svg).group(0)
    assert "0.00 ms/iteration" not in summary
    share = float(re.search(r"· exec (\d+)%", summary).group(1))
    stats = terra.stats
    wall = stats[-1].t_end - stats[0].t_start
    exact = sum(s.graph_exec for s in stats) / wall * 100
    assert share == pytest.approx(exact, abs=1.0) and share > 0
    assert json.loads(dash.counters)["iteration"] == ITERATIONS - 1


def test_the_running_dashboard_counts_graph_time_before_the_end():
    """Before ``finish``: graph spans are counted as they arrive, not read from stale stats."""
    w = tf.Variable(tf.ones((8, 8)))
    with terra_nb.Terra(mode="coexec") as terra:
        dash = Dashboard(interval=0.0).attach(terra)
        for _ in terra.loop(range(40)):
            w.assign(tf.matmul(w, w) / 8.0)
            float(tf.reduce_sum(w))
    assert dash._totals["graph_exec"] > 0
