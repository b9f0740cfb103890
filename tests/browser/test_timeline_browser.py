"""The timeline in a real JupyterLab tells what ran (issue 40, item 2): the quickstart's loop under
``%%terra``, then ``%terra timeline``, in two notebooks open side by side. Checked as a user sees
it: both timelines show hatched stalls (each drawing has its own pattern id); a tooltip sits at
the pointer; a fetch marker can be hovered; a GraphRunner span names its segment; "All" shows
every iteration (the fallback at #4 too), the wheel zooms in; every span lies within its
iteration's column. Screenshots: ``browser-timeline-*``."""

from __future__ import annotations

import re

import nbformat
import pytest
from test_dashboard_browser import KERNEL_IDLE, _shot

SETUP = """%load_ext terra_nb
import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)
rng = np.random.default_rng(0)
x_all = rng.normal(size=(64, 4)).astype("float32")
y_all = x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
batches = [(x_all[i:i + 16], y_all[i:i + 16]) for i in range(0, 64, 16)] * 8"""
LOOP = """%%terra --compile-after 1
for x, y in batches:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if float(loss) < 7.0:
        optimizer.learning_rate.assign(0.02)"""
NAMES = ("timeline_a.ipynb", "timeline_b.ipynb")
TIMELINE = ".jp-CodeCell:last-child .terra-timeline"
LANES = f"{TIMELINE} .terra-timeline-lanes svg"
ALL_RAN = """() => {
    const prompts = [...document.querySelectorAll('[data-terra-current] .jp-InputPrompt')];
    return prompts.length === 3 && prompts.every((p) => /\\[\\d+\\]/.test(p.innerText));
}"""


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(LOOP),
                nbformat.v4.new_code_cell("%terra timeline")]
    return nb


@pytest.fixture(scope="module")
def two_timelines(lab, lab_root, browser):
    """Both notebooks run, each in its own tab of one JupyterLab page; the page."""
    for name in NAMES:
        nbformat.write(_notebook(), lab_root / name)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.terra_errors = errors
    page.goto(f"{lab}/lab/tree/{NAMES[0]}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    for name in NAMES:
        _activate(page, name, scroll=False)
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(ALL_RAN, timeout=240_000)
        page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    yield page
    for name in NAMES:
        _activate(page, name, scroll=False)
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
    context.close()


def _visible(selector: str) -> str:
    """``selector`` inside the notebook on show (``_activate`` marks it)."""
    return f"[data-terra-current] {selector}"


def _activate(page, name: str, scroll: bool = True) -> None:
    """Show notebook ``name`` (open it in a tab of its own if it is not open) and mark it."""
    page.evaluate("(path) => window.jupyterapp.commands.execute('docmanager:open', {path})",
                  name)
    page.wait_for_function(f"() => window.jupyterapp.shell.currentWidget?.title.label === "
                           f"'{name}'", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.node"
                           ".querySelector('.jp-Cell')", timeout=60_000)
    page.evaluate("""() => {
        for (const n of document.querySelectorAll('[data-terra-current]')) {
            n.removeAttribute('data-terra-current');
        }
        window.jupyterapp.shell.currentWidget.node.setAttribute('data-terra-current', '1');
    }""")
    if scroll:
        page.locator(_visible(TIMELINE)).scroll_into_view_if_needed()
        page.wait_for_timeout(300)


def test_two_timelines_both_hatch_their_stalls(two_timelines):
    page = two_timelines
    patterns = page.evaluate("""() => [...document.querySelectorAll('.terra-timeline svg pattern')]
        .map((p) => p.id)""")
    assert len(patterns) >= 4 and len(set(patterns)) == len(patterns)  # lanes and summary, x2
    for name in NAMES:
        _activate(page, name)
        own = page.evaluate("""(sel) => [...document.querySelectorAll(sel + ' .terra-stall')]
            .map((r) => {
                const id = r.getAttribute('fill').match(/url\\(#(.+)\\)/)[1];
                return document.getElementById(id).closest('svg') === r.closest('svg');
            })""", _visible(TIMELINE))
        assert own and all(own), name  # each stall is hatched by its own drawing's pattern
        _shot(page, f"timeline-two-notebooks-{name.split('.')[0][-1]}")


def _hover(page, selector: str, at: float = 0.5, min_width: float = 0.0) -> dict:
    """Move the pointer onto the first ``selector`` at least ``min_width`` pixels wide whose
    middle lies in the left 70% of the lanes (``at``: how far down); where the tip is and what
    it says. A run narrower than a pixel leaves the pointer on its neighbour, and the tip is
    clamped inside the widget near its right edge."""
    lanes = page.locator(_visible(LANES)).first.bounding_box()
    boxes = [b for b in (e.bounding_box() for e in page.locator(selector).all()) if b]
    box = next((b for b in boxes if b["width"] >= min_width
                and b["x"] + b["width"] / 2 < lanes["x"] + 0.7 * lanes["width"]), boxes[0])
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] * at
    page.mouse.move(x, y)
    tip = page.locator(_visible(f"{TIMELINE} .terra-tip"))
    tip.wait_for(state="visible", timeout=5_000)
    for _ in range(20):  # placed on the pointer's next event: a loaded machine may be a frame late
        where = tip.bounding_box()
        if abs(where["x"] - x) < 30 and abs(where["y"] - y) < 30:
            break
        page.wait_for_timeout(100)
    return {"x": x, "y": y, "tip": where, "text": tip.inner_text()}


def test_tooltips_sit_at_the_pointer_and_name_what_ran(two_timelines):
    page = two_timelines
    _activate(page, NAMES[0])
    shown = _hover(page, _visible(f"{LANES} .terra-exec.terra-graph"), min_width=3)
    assert abs(shown["tip"]["x"] - shown["x"]) < 30 and abs(shown["tip"]["y"] - shown["y"]) < 30
    assert re.search(r"GraphRunner segment s\d+ · .* · \d+ ops? · (compiled|op by op)",
                     shown["text"]), shown["text"]
    _shot(page, "timeline-tooltip")
    fetch = _hover(page, _visible(f"{LANES} g.terra-fetch"), at=0.8)  # its triangle
    assert fetch["text"].startswith("fetch · iteration"), fetch["text"]
    compile_ = page.locator(_visible(f"{LANES} .terra-compile"))
    assert compile_.count() >= 1 or "compile" in page.inner_text(_visible(TIMELINE))


def test_every_iteration_can_be_reached_and_spans_lie_in_their_columns(two_timelines):
    page = two_timelines
    _activate(page, NAMES[0])
    caption = _visible(f"{TIMELINE} .terra-caption")
    assert page.inner_text(caption) == "iterations #12–#31 (the last 20 of 32)"
    page.click(_visible(f"{TIMELINE} button.terra-all"))
    page.wait_for_function(f"() => document.querySelector('{caption}').innerText"
                           ".startsWith('iterations #0–#31 of 32')", timeout=10_000)
    tips = page.evaluate("""(sel) => [...document.querySelectorAll(sel + ' .terra-phase')]
        .map((r) => r.dataset.tip.split('\\n')[0])""", _visible(LANES))
    assert len(tips) == 32 and any(re.match(r"iteration \d+: fallback", t) for t in tips)
    outside = page.evaluate(f"""() => {{
        const svg = document.querySelector('{_visible(LANES)}');
        const column = {{}};
        for (const r of svg.querySelectorAll('.terra-phase')) {{
            const n = r.dataset.tip.match(/^iteration (\\d+)/)[1];
            column[n] = [Number(r.getAttribute('x')),
                         Number(r.getAttribute('x')) + Number(r.getAttribute('width'))];
        }}
        const bad = [];
        for (const r of svg.querySelectorAll('rect.terra-span')) {{
            const n = r.dataset.tip.match(/iteration (\\d+)/)[1];
            const [a, b] = column[n], x = Number(r.getAttribute('x'));
            const w = Number(r.getAttribute('width'));
            // drawn at least 1-1.5 units wide: the start of such a span is what counts
            const end = w > 1.51 ? x + w : x;
            if (x < a - 0.15 || end > b + 0.15) bad.push(r.dataset.tip);
        }}
        return bad;
    }}""")
    assert outside == []
    _shot(page, "timeline-all-iterations")
    fallback = _visible(f"{LANES} .terra-phase-fallback")
    box = page.locator(fallback).first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 40)
    for _ in range(3):
        page.mouse.wheel(0, -300)
        page.wait_for_timeout(250)
    page.wait_for_function(f"""() => {{
        const text = document.querySelector('{caption}').innerText;
        const m = text.match(/#(\\d+)–#(\\d+) of 32/);
        return m && Number(m[2]) - Number(m[1]) < 12;
    }}""", timeout=10_000)
    shown = page.inner_text(caption)
    first, last = map(int, re.search(r"#(\d+)–#(\d+)", shown).groups())
    fell_back = int(re.search(r"iteration (\d+): fallback",
                              " ".join(tips)).group(1))
    assert first <= fell_back <= last, shown
    _shot(page, "timeline-zoomed-on-the-fallback")
    page.click(_visible(f"{TIMELINE} button.terra-latest"))
    page.wait_for_function(f"() => document.querySelector('{caption}').innerText === "
                           "'iterations #12–#31 (the last 20 of 32)'", timeout=10_000)
    assert page.terra_errors == []
