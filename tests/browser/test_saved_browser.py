"""A notebook saved by JupyterLab itself (Ctrl+S), its kernel shut down, reopened in a fresh
browser, trusted and untrusted, and converted to HTML by nbconvert: every terra-nb view (the
``--viz`` dashboard, ``%terra graph``, ``%terra timeline``) shows its picture, never "Error
displaying widget: model not found" (issue 40, item 1). Screenshots: ``browser-reopened-*``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_dashboard_browser import KERNEL_IDLE, _shot
from test_views_browser import _view_cells

from terra_nb.views.saved import WIDGET_VIEW, keeps_widgets

NAME = "saved_views.ipynb"
ALL_RAN = """() => {
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
    return prompts.length >= 4 && prompts.every((p) => /\\[\\d+\\]/.test(p.innerText));
}"""
RENDERED = """() => {
    const outputs = [...document.querySelectorAll('.jp-OutputArea-output')];
    return outputs.length >= 3 && !outputs.some((o) => o.innerText.includes('Loading widget'));
}"""


def _shut_down_kernel(page) -> None:
    """Shut the open notebook's kernel down, as its Kernel menu does (the server's REST API
    wants the page's XSRF cookie)."""
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")


@pytest.fixture(scope="module")
def saved_in_lab(lab, lab_root, browser) -> Path:
    """``saved_views.ipynb`` run in JupyterLab, saved with Ctrl+S, its kernel shut down."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(f"{lab}/lab/tree/{NAME}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(ALL_RAN, timeout=240_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.wait_for_timeout(1_500)  # the dashboard's output refreshed at the cell's end
    live = _view_cells(page)
    assert all(view["widget"] for view in live.values()), live  # live widgets while it runs
    page.click(".jp-MarkdownCell")  # the notebook has the focus: Ctrl+S is JupyterLab's save
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
    _shut_down_kernel(page)
    context.close()
    return lab_root / NAME


def _reopen(browser, lab: str, name: str):
    """``name`` opened in a fresh browser (no state of the earlier session)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(f"{lab}/lab/tree/{name}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_function(RENDERED, timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)  # the widget manager has restored
    page.wait_for_timeout(1_500)
    return context, page, errors


def _assert_pictures(shown: dict, where: str) -> None:
    for name, view in shown.items():
        assert not view["error"], f"{where} {name}: {view}"
        assert view["image"], f"{where} {name} shows no picture: {view}"


def test_saved_file_keeps_pictures_not_widgets(saved_in_lab):
    nb = nbformat.read(saved_in_lab, as_version=4)
    assert keeps_widgets(nb) == []
    views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if "terra_nb" in o.get("metadata", {})]
    assert len(views) == 3 and all("image/png" in o.data for o in views)
    assert not any(WIDGET_VIEW in o.data for o in views)


@pytest.mark.parametrize("trust", ["trusted", "untrusted"])
def test_reopened_notebook_shows_pictures(lab, lab_root, browser, saved_in_lab, trust):
    name = NAME
    if trust == "untrusted":  # a copy from elsewhere: its signature does not match
        nb = nbformat.read(saved_in_lab, as_version=4)
        nb.metadata["copy"] = "untrusted"
        name = f"untrusted_{NAME}"
        nbformat.write(nb, lab_root / name)
    context, page, errors = _reopen(browser, lab, name)
    try:
        _assert_pictures(_view_cells(page), f"reopened {trust}")
        for view in ("%%terra --viz", "%terra graph", "%terra timeline"):
            page.locator(".jp-CodeCell", has_text=view).first.scroll_into_view_if_needed()
            _shot(page, f"reopened-{trust}-{view.split()[-1].lstrip('-')}")
        assert errors == []
    finally:
        _shut_down_kernel(page)
        context.close()


def test_nbconvert_html_shows_pictures(browser, saved_in_lab, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", str(saved_in_lab),
                    "--output-dir", str(tmp_path)], check=True, capture_output=True, env=env,
                   timeout=120)
    html = tmp_path / "saved_views.html"
    assert WIDGET_VIEW not in html.read_text()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        pictures = page.evaluate("""() => [
            ...document.querySelectorAll(".jp-OutputArea-output img")]
            .filter((img) => img.naturalWidth > 100).length""")
        assert pictures >= 3
        assert "Error displaying" not in page.inner_text("body")
        page.locator("img").nth(1).scroll_into_view_if_needed()
        _shot(page, "reopened-nbconvert-html")
    finally:
        context.close()
