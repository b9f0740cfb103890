"""The graph view's Fit in a real JupyterLab (issue 40, item 3): after Fit every node of a 400-op
graph lies inside the pane; a large graph first shows legible labels with an overview (a
minimap) that says where the view is and moves it on a click; a 3-op graph is not blown up.
Screenshots: ``browser-graph-*``."""

from __future__ import annotations

import pytest
from test_dashboard_browser import KERNEL_IDLE, _shot

BIG = ".jp-CodeCell:nth-child(3) .terra-graph"
TINY = ".jp-CodeCell:nth-child(4) .terra-graph"
ALL_RAN = """() => {
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
    return prompts.length === 3 && prompts.every((p) => /\\[\\d+\\]/.test(p.innerText)) &&
        document.querySelectorAll('.terra-graph .terra-viewport svg g.node').length > 400;
}"""
OUTSIDE = """(sel) => {
    const pane = document.querySelector(sel + ' .terra-viewport').getBoundingClientRect();
    const nodes = [...document.querySelectorAll(sel + ' .terra-viewport svg g.node')];
    const out = nodes.filter((n) => {
        const r = n.getBoundingClientRect();
        return r.left < pane.left - 1 || r.right > pane.right + 1 || r.top < pane.top - 1 ||
            r.bottom > pane.bottom + 1;
    });
    return {nodes: nodes.length, outside: out.length};
}"""


@pytest.fixture(scope="module")
def graphs(lab, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.terra_errors = errors
    page.goto(f"{lab}/lab/tree/graph_fit.ipynb?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(ALL_RAN, timeout=180_000)
    yield page
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    context.close()


def test_fit_shows_every_node_of_a_400_op_graph(graphs):
    page = graphs
    page.locator(BIG).scroll_into_view_if_needed()
    assert float(page.get_attribute(BIG, "data-scale")) >= 0.8  # first: legible labels ...
    assert page.get_attribute(BIG, "data-minimap") == "shown"  # ... and where they are
    assert page.evaluate(OUTSIDE, BIG)["outside"] > 300
    _shot(page, "graph-400-first-view")
    page.click(f"{BIG} button:text('Fit')")
    shown = page.evaluate(OUTSIDE, BIG)
    assert shown["nodes"] > 400 and shown["outside"] == 0, shown
    assert page.get_attribute(BIG, "data-minimap") == "hidden"  # the whole graph is in view
    _shot(page, "graph-400-fit")


def test_the_overview_moves_the_view(graphs):
    page = graphs
    page.locator(BIG).scroll_into_view_if_needed()
    for _ in range(4):
        page.click(f"{BIG} button:text('+')")
    assert page.get_attribute(BIG, "data-minimap") == "shown"
    before = page.get_attribute(f"{BIG} .terra-viewport svg", "viewBox")
    box = page.locator(f"{BIG} .terra-minimap").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] * 0.9)
    after = page.get_attribute(f"{BIG} .terra-viewport svg", "viewBox")
    assert after != before
    assert float(after.split()[1]) > float(before.split()[1])  # further down the graph
    _shot(page, "graph-400-minimap")


def test_a_tiny_graph_stays_at_a_readable_scale(graphs):
    page = graphs
    page.locator(TINY).scroll_into_view_if_needed()
    page.click(f"{TINY} button:text('Fit')")
    assert float(page.get_attribute(TINY, "data-scale")) <= 1.25
    assert page.evaluate(OUTSIDE, TINY) == {"nodes": 5, "outside": 0}
    height = page.evaluate(f"""() => document.querySelector('{TINY} .terra-viewport svg g.node
        text').getBoundingClientRect().height""".replace("\n        ", " "))
    assert 8 <= height <= 20  # a label's letters: legible, not giant
    _shot(page, "graph-tiny-fit")
    assert page.terra_errors == []
