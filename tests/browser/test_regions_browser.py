"""Regions in the graph view, in a real JupyterLab (issue 14): a ``%%terra --regions --viz`` cell
trains a small Keras MLP with Adam; the dashboard's graph shows the model call as one collapsed
region node labelled with ``Sequential``, its details list the op types it runs, and Expand
opens it into a cluster of those op types. Screenshots in ``test-artifacts/``:
``browser-regions-graph.png`` (open) and ``browser-regions-collapsed.png`` (look at them)."""

from __future__ import annotations

from test_dashboard_browser import KERNEL_IDLE, _shot

DASH = ".terra-dashboard"
SVG = f"{DASH} .terra-viewport svg"
DETAILS = f"{DASH} .terra-details"
GRAPH = f"{DASH} .terra-root.terra-graph"
SEQUENTIAL = f"{SVG} g.node.terra-region.terra-region-forward:has-text('Sequential')"


def _run(page, lab: str) -> None:
    page.goto(f"{lab}/lab/tree/regions_graph.ipynb?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_selector(f"{DASH} .terra-counters[data-status=finished]", timeout=240_000)


def test_region_node_collapsed_then_expanded(lab, page):
    _run(page, lab)
    node = page.locator(SEQUENTIAL).first
    node.wait_for(timeout=20_000)
    assert "[+]" in node.text_content() and "model(x): Sequential · 9 ops" in node.text_content()
    assert page.locator(f"{SVG} g.node.terra-region:has-text('Adam.apply_gradients')").count() == 1
    assert page.locator(f"{SVG} g.node.terra-region-backward:has-text('∇ Sequential')").count() == 1
    assert page.locator(f"{SVG} g.cluster.terra-region").count() == 0  # collapsed by default
    # a fresh query: the dashboard may render once more after it says finished, and a
    # locator's scroll waits on the element it found first (flaked once: "not attached")
    page.evaluate(f"() => document.querySelector('{DASH}').scrollIntoView()")
    _shot(page, "regions-collapsed")
    node.click()
    page.wait_for_function(
        f"() => document.querySelector('{DETAILS} h4').innerText.includes('Sequential')",
        timeout=5_000)
    details = page.inner_text(DETAILS)
    assert "Sequential.__call__" in details and "9 op types it runs" in details
    assert "BiasAdd" in details and "loss = loss_fn(y, model(x))" in details
    page.click(f"{DETAILS} button.terra-toggle")  # Expand: Python lays the graph out again
    cluster = f"{SVG} g.cluster.terra-region-forward:has-text('Sequential')"
    page.wait_for_selector(cluster, timeout=20_000)
    ops = [t.strip() for t in page.locator(f"{SVG} g.node.terra-region-op").all_text_contents()]
    assert ops == ["ReadVariableOp", "MatMul", "ReadVariableOp", "BiasAdd", "Relu",
                   "ReadVariableOp", "MatMul", "ReadVariableOp", "BiasAdd"]
    assert "[−] ▶ model(x): Sequential · 9 ops" in page.locator(cluster).text_content()
    assert page.locator(f"{DETAILS} button.terra-toggle").inner_text() == "Collapse region"
    _show_expanded(page)
    _shot(page, "regions-graph")
    assert page.terra_errors == []


def _show_expanded(page) -> None:
    """A taller viewport (as its resize handle gives), the open region found by its label and
    panned to the middle, zoomed in one step, the graph at the top of the window."""
    page.evaluate(f"() => {{ document.querySelector('{GRAPH} .terra-viewport').style.height ="
                  " '640px'; }")
    page.click(f"{GRAPH} button.terra-btn >> text=Fit")
    page.fill(f"{GRAPH} input.terra-search", "model(x): Sequential")
    page.wait_for_function(
        f"() => Number(document.querySelector('{GRAPH}').dataset.found) == 1", timeout=5_000)
    page.fill(f"{GRAPH} input.terra-search", "")  # the match's highlight off, the view stays
    page.click(f"{GRAPH} button.terra-btn >> text=+")
    page.evaluate(f"() => document.querySelector('{GRAPH}').scrollIntoView()")
