"""The teaching notebook in a real JupyterLab: its 200-iteration ``%%terra --viz`` loop ends with
both timeline lanes filled and a graph with a loop cluster and case edges; the notebook saved by
the headless runner (the views as pictures, as JupyterLab saves them with terra-nb's server
extension), reopened trusted and untrusted, shows every view as its picture.
Screenshots go to ``test-artifacts/`` (look at them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.sign import NotebookNotary
from test_dashboard_browser import KERNEL_IDLE, _shot, mark_running_view, wait_final_view

from terra_nb.views.saved import keeps_widgets

ROOT = Path(__file__).resolve().parents[2]
DASH = ".terra-dashboard"
LANES = f"{DASH} .terra-timeline-lanes svg"


def _open(page, lab: str, name: str) -> None:
    page.goto(f"{lab}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)


def test_live_views_200_iterations(lab, page):
    _open(page, lab, "live_views.ipynb")
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    mark_running_view(page)  # the 200 iterations take seconds: it is marked before they end
    wait_final_view(page, timeout=240_000)
    caption = page.inner_text(f"{DASH} .terra-timeline .terra-toolbar")
    assert "iterations #180–#199 (the last 20 of 200)" in caption
    last = page.evaluate(f"""() => {{
        const svg = document.querySelector('{LANES}');
        const number = (el) => el.dataset.tip.match(/iteration (\\d+)/)[1];
        const count = (runner) => new Set(
            [...svg.querySelectorAll(`.terra-exec.terra-${{runner}}`)].map(number));
        return {{python: [...count('python')], graph: [...count('graph')]}};
    }}""")
    assert len(last["python"]) == 20 and len(last["graph"]) >= 19  # both lanes, every iteration
    summary = page.inner_text(f"{DASH} .terra-timeline-summary")
    assert "0.00 ms/iteration" not in summary
    assert re.search(r"GraphRunner\s+[\d.]+ ms/iteration · exec [1-9]", summary), summary
    svg = f"{DASH} .terra-viewport svg"
    assert page.locator(f"{svg} g.cluster.terra-loop").count() >= 1
    assert page.locator(f"{svg} g.edge.terra-case").count() >= 2
    page.locator(f"{DASH} .terra-timeline").scroll_into_view_if_needed()
    _shot(page, "live-views-timeline-200")
    page.locator(f"{DASH} .terra-viewport").scroll_into_view_if_needed()
    _shot(page, "live-views-graph")
    _search_and_legibility(page)
    assert page.terra_errors == []


# the live graph redraws while later cells run: on a slow machine (the README's main job took
# 87 s instead of 48) a search's highlight came after 5 s
WAIT = 20_000


def _search_and_legibility(page) -> None:
    """Labels stay legible (a large graph is panned, not shrunk); the search box finds nodes by
    op type and by source text."""
    graph = f"{DASH} .terra-graph"
    assert float(page.get_attribute(graph, "data-scale")) >= 0.8
    found = f"() => Number(document.querySelector('{graph}').dataset.found) >= 1"
    page.fill(f"{graph} input.terra-search", "tanh")
    page.wait_for_function(found, timeout=WAIT)
    page.wait_for_selector(f"{graph} .terra-viewport svg .terra-match", timeout=WAIT)
    _shot(page, "live-views-search")
    page.fill(f"{graph} input.terra-search", "clip_by_norm")  # source text of the branch
    page.wait_for_function(found, timeout=WAIT)


@pytest.fixture(scope="session")
def saved(lab_root) -> dict[str, str]:
    """The teaching notebook run by the headless runner (the README's main job), saved, then
    copied signed (trusted) and unsigned (untrusted, as any notebook from elsewhere)."""
    out = lab_root / "saved"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    subprocess.run(
        [sys.executable, "-m", "kernel_ext.run_notebook", "notebooks/live_views.ipynb",
         "--out", str(out)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=600,
    )
    nb = nbformat.read(out / "live_views.ipynb", as_version=4)
    assert keeps_widgets(nb) == []  # saved as JupyterLab saves it: the views as pictures
    NotebookNotary().sign(nb)  # the signature is a hash of the content: sign before the copy
    nbformat.write(nb, lab_root / "saved_trusted.ipynb")
    nb.metadata["copy"] = "untrusted"  # other content: not covered by that signature
    nbformat.write(nb, lab_root / "saved_untrusted.ipynb")
    assert not NotebookNotary().check_signature(nb)
    return {"trusted": "saved_trusted.ipynb", "untrusted": "saved_untrusted.ipynb"}


def _view_cells(page) -> dict[str, object]:
    """What the three view outputs (dashboard, %terra graph, %terra timeline) show."""
    return page.evaluate("""() => {
        const cells = [...document.querySelectorAll('.jp-CodeCell')];
        const pick = (text) => cells.find((c) => c.querySelector('.jp-InputArea')
            .innerText.includes(text));
        const shows = (cell) => ({
            widget: !!cell.querySelector('.terra-root svg'),
            image: [...cell.querySelectorAll('.jp-OutputArea-output img')].filter(
                (img) => img.naturalWidth > 100).length,
            error: cell.querySelector('.jp-OutputArea').innerText.includes('Error displaying'),
            html: cell.querySelector('.jp-OutputArea').innerHTML.slice(0, 300),
        });
        return {dashboard: shows(pick('%%terra --viz')), graph: shows(pick('%terra graph')),
                timeline: shows(pick('%terra timeline'))};
    }""")


@pytest.mark.parametrize("trust", ["untrusted", "trusted"])
def test_saved_notebook_shows_the_views_as_pictures(lab, page, saved, trust):
    _open(page, lab, saved[trust])
    page.wait_for_function(  # outputs rendered, widgets restored from the saved state
        "() => document.querySelectorAll('.jp-OutputArea-output').length > 5 && ![...document"
        ".querySelectorAll('.jp-OutputArea-output')].some((o) => o.innerText.includes("
        "'Loading widget'))", timeout=60_000)
    page.wait_for_timeout(1_000)
    shown = _view_cells(page)
    for name, view in shown.items():
        assert not view["error"], f"{trust} {name}: {view}"
        assert view["image"], f"{trust} {name} shows no picture: {view}"  # the PNG
    for name in ("graph", "timeline"):
        # the first: the notebook's regions part ends with a second %terra graph
        page.locator(".jp-CodeCell", has_text=f"%terra {name}").first.scroll_into_view_if_needed()
        _shot(page, f"saved-{trust}-{name}")
    assert page.terra_errors == []
