"""The live views in a real JupyterLab: a notebook trains a tiny Keras model under
``Terra(mode="trace")`` with a dashboard; headless Chromium checks that the graph and the
timeline render, update while the cell runs, show node details on hover and click, zoom, expand
a collapsed chain, and raise no page errors. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import time
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

DASH = ".terra-dashboard"
KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return k && k.status === 'idle';
}"""
ITERATION = f"() => Number(document.querySelector('{DASH} .terra-counters')?.dataset.iteration)"


def mark_running_view(page) -> None:
    """Tag the dashboard shown while its cell runs. At the cell's end the dashboard refreshes its
    output (the picture a saved notebook keeps) and JupyterLab then draws a new view of it, about
    0.5 s later, seconds on a loaded machine: tests interact with that view, not the old one."""
    page.wait_for_selector(DASH, timeout=120_000)
    page.evaluate(f"() => {{ document.querySelector('{DASH}').dataset.running = 'shown'; }}")


def wait_final_view(page, timeout: int) -> None:
    """Wait for the view drawn after the cell's end (see ``mark_running_view``)."""
    page.wait_for_function(f"""() => {{
        const root = document.querySelector('{DASH}');
        return root && !root.dataset.running &&
            !!root.querySelector('.terra-counters[data-status=finished]');
    }}""", timeout=timeout)


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=False)


def _open_and_run(page, lab: str) -> None:
    page.goto(f"{lab}/lab/tree/live_dashboard.ipynb?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    # not awaited: the command's promise settles only when every cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def _live_updates(page) -> None:
    """While the training cell runs, the counters, timeline and graph change."""
    page.wait_for_function(f"() => ({ITERATION})() >= 3", timeout=120_000)
    mark_running_view(page)
    page.fill(f"{DASH} input.terra-search", "matmul")  # kept by the view drawn at the cell's end
    lanes = f"{DASH} .terra-timeline-lanes"
    page.wait_for_selector(f"{lanes} svg .terra-exec", timeout=10_000)
    page.wait_for_selector(f"{DASH} .terra-viewport svg g.node", timeout=20_000)
    first = page.evaluate(ITERATION)
    first_lanes = page.inner_html(lanes)
    status = page.get_attribute(f"{DASH} .terra-counters", "data-status")
    assert status == "running"
    page.locator(DASH).scroll_into_view_if_needed()
    _shot(page, "dashboard-running")
    page.wait_for_function(f"() => ({ITERATION})() >= {first + 5}", timeout=20_000)
    assert page.get_attribute(f"{DASH} .terra-counters", "data-status") == "running"
    assert page.inner_html(lanes) != first_lanes


def _finished_graph(page) -> None:
    wait_final_view(page, timeout=120_000)
    assert page.evaluate(ITERATION) == 159
    assert page.input_value(f"{DASH} input.terra-search") == "matmul"
    page.wait_for_selector(f"{DASH} .terra-viewport svg .terra-match", timeout=20_000)
    page.fill(f"{DASH} input.terra-search", "")
    page.click(f"{DASH} .terra-graph button:text('Fit')")
    svg = f"{DASH} .terra-viewport svg"
    assert page.locator(f"{svg} g.cluster.terra-loop").count() == 1
    assert page.locator(f"{svg} g.edge.terra-case").count() >= 2
    assert page.locator(f"{svg} g.node.terra-fetch").count() >= 1
    assert page.locator(f"{svg} g.node.terra-branch").count() >= 1
    assert page.locator(f"{DASH} .terra-timeline-summary .terra-summary-python").count() == 1
    page.locator(DASH).scroll_into_view_if_needed()
    _shot(page, "dashboard-finished")


def _details(page) -> None:
    svg = f"{DASH} .terra-viewport svg"
    page.hover(f"{svg} g.node.terra-fetch")
    details = f"{DASH} .terra-details"
    assert "traced" in page.inner_text(details) and "In [" in page.inner_text(details)
    assert "loss" in page.inner_text(f"{details} .terra-source")
    assert page.locator(f"{details} .terra-badge.terra-fetch").count() == 1
    page.click(f"{svg} g.node.terra-chain >> nth=0")
    page.wait_for_selector(f"{svg} g.node.terra-chain.terra-selected", timeout=5_000)
    # hovering previews whatever node is under the mouse (after a re-render it may be another
    # one); leaving the graph shows the selected node
    page.mouse.move(0, 0)
    page.wait_for_function(
        f"() => document.querySelector('{details} h4').innerText.includes('ops on one line')",
        timeout=5_000,
    )
    _shot(page, "node-details")
    before = page.locator(f"{svg} g.node").count()
    page.click(f"{details} button.terra-toggle")  # Expand: Python lays the graph out again
    page.wait_for_function(
        f"() => document.querySelectorAll('{svg} g.node').length > {before}", timeout=20_000
    )


def _zoom(page) -> None:
    viewport = page.locator(f"{DASH} .terra-viewport")
    box = viewport.bounding_box()
    before = page.get_attribute(f"{DASH} .terra-viewport svg", "viewBox")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -400)
    page.wait_for_function(
        f"() => document.querySelector('{DASH} .terra-viewport svg').getAttribute('viewBox')"
        f" !== '{before}'",
        timeout=5_000,
    )


def test_live_dashboard_in_jupyterlab(lab, page):
    started = time.monotonic()
    _open_and_run(page, lab)
    _live_updates(page)
    _finished_graph(page)
    _details(page)
    _zoom(page)
    page.wait_for_selector(".jp-Cell:last-child .terra-graph .terra-viewport svg g.node")
    assert page.locator(".terra-graph").count() >= 2  # the dashboard's and show_graph's
    _shot(page, "dashboard-interacted")
    assert page.terra_errors == []
    assert time.monotonic() - started < 180
