"""The graph shows the user's program (issue 40), in a real JupyterLab: a 200-iteration Keras
MLP cell with one ``if`` and an inner ``for p, g in zip(...)`` loop draws exactly one case
node, at the ``if``'s line, also after the cell is run again; the loop is a loop; the model
call's region versions (batches of 8 and 16) have labels that differ; a variable reads as
``dense/kernel``. The quickstart's ``if`` is one case node at its line. Screenshots in
``test-artifacts/``: ``browser-user-program-graph.png`` (the case node, the loops),
``browser-user-program-variants.png`` (the region versions), ``browser-user-program-variable.png``
(a variable's name), ``browser-user-program-rerun.png`` (after the cell ran again),
``browser-quickstart-case.png`` (the quickstart's ``if``) (look at them)."""

from __future__ import annotations

import re

from test_dashboard_browser import KERNEL_IDLE, _shot, mark_running_view, wait_final_view

DASH = ".terra-dashboard"
SVG = f"{DASH} .terra-viewport svg"
GRAPH = f"{DASH} .terra-root.terra-graph"
CASE = "g.node.terra-user-case"
IF_LINE = 7  # the MLP cell's ``if`` (line 1 is ``%%terra --viz``)


def _open(page, lab: str, name: str) -> None:
    page.goto(f"{lab}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)


def _one_case_at_the_if(page, svg: str, text: str, line: int) -> None:
    cases = page.locator(f"{svg} {CASE}")
    assert cases.count() == 1, [c.strip() for c in cases.all_text_contents()]
    label = cases.first.text_content()
    assert text in label and re.search(rf":{line}\b", label), label
    # no op drawn as a branch: the case node is the only branch mark
    assert page.locator(f"{svg} g.node.terra-branch").count() == 1


def _show(page, query: str, graph: str = GRAPH, scale: float = 0.9) -> None:
    """A taller pane (as its resize handle gives), zoomed in from Fit to about ``scale`` (0.9:
    labels read at about their size), the element matching ``query`` panned to the middle."""
    page.evaluate(f"() => {{ document.querySelector('{graph} .terra-viewport').style.height ="
                  " '640px'; }")
    page.click(f"{graph} button.terra-btn >> text=Fit")
    for _ in range(8):
        if float(page.get_attribute(graph, "data-scale")) >= scale:
            break
        page.click(f"{graph} button.terra-btn >> text=+")
    page.fill(f"{graph} input.terra-search", query)
    page.wait_for_function(
        f"() => Number(document.querySelector('{graph}').dataset.found) >= 1", timeout=10_000)
    page.fill(f"{graph} input.terra-search", "")  # the match's highlight off, the view stays
    page.evaluate(f"() => document.querySelector('{graph}').scrollIntoView()")


def _rerun_loop_cell(page) -> None:
    """Run the training cell (the third) again, and wait for its final view."""
    page.evaluate(f"() => {{ document.querySelector('{DASH}').dataset.running = 'old'; }}")
    page.evaluate("""() => {
        const panel = window.jupyterapp.shell.currentWidget;
        panel.content.activeCellIndex = 2;
        window.jupyterapp.commands.execute('notebook:run-cell');
    }""")
    page.wait_for_function(f"""() => {{
        const root = document.querySelector('{DASH}');
        return root && !root.dataset.running;
    }}""", timeout=120_000)
    mark_running_view(page)
    wait_final_view(page, timeout=240_000)


def test_mlp_loop_one_case_node_variants_and_names(lab, page):
    _open(page, lab, "user_program.ipynb")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    mark_running_view(page)
    wait_final_view(page, timeout=300_000)
    _one_case_at_the_if(page, SVG, "if float(loss) > 4.0:", IF_LINE)
    assert page.locator(f"{SVG} g.cluster.terra-loop, {SVG} g.node.terra-loop").count() >= 1
    forward = page.locator(f"{SVG} g.terra-region-forward").all_text_contents()
    labels = [re.sub(r"\s+", " ", t).strip() for t in forward]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert any("f32[8," in t for t in labels) and any("f32[16," in t for t in labels), labels
    assert page.locator(f"{SVG} g.edge.terra-variant").count() >= 2
    _show(page, "if float(loss)")
    _shot(page, "user-program-graph")
    _show(page, "ReadVariableOp", scale=0.6)  # the top: the versions' labels, side by side
    _shot(page, "user-program-variants")
    _show(page, "ReadVariableOp")  # an op of the model traced one by one: it reads a variable
    node = page.locator(f"{SVG} g.node.terra-op:not(.terra-region):has-text('ReadVariableOp')")
    node.first.dispatch_event("mouseover")  # the details panel follows the pointer
    details = page.inner_text(f"{GRAPH} .terra-details")
    assert re.search(r"var \S*dense(_\d+)?/(kernel|bias)", details), details
    _shot(page, "user-program-variable")
    _rerun_loop_cell(page)
    _one_case_at_the_if(page, SVG, "if float(loss) > 4.0:", IF_LINE)
    _show(page, "if float(loss)")
    _shot(page, "user-program-rerun")
    assert page.terra_errors == []


def test_quickstart_if_is_one_case_node(lab, page):
    _open(page, lab, "quickstart.ipynb")
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    graph = ".jp-OutputArea .terra-root.terra-graph"
    page.wait_for_selector(f"{graph} .terra-viewport svg g.node", timeout=300_000)
    page.wait_for_function(KERNEL_IDLE, timeout=300_000)
    svg = f"{graph} .terra-viewport svg"
    _one_case_at_the_if(page, svg, "if float(loss) < 7.0:", 9)
    _show(page, "if float(loss)", graph)
    _shot(page, "quickstart-case")
    assert page.terra_errors == []
