"""Every notebook in notebooks/ runs end to end in a real kernel, and shows what it promises."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
WIDGET = "application/vnd.jupyter.widget-view+json"


class Executed:
    """An executed notebook: the text and mime types of each code cell's outputs."""

    def __init__(self, name: str) -> None:
        path = NOTEBOOKS / f"{name}.ipynb"
        self.nb = nbformat.read(path, as_version=4)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        client = nbclient.NotebookClient(
            self.nb, timeout=120, kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        client.execute()
        self.code = [c for c in self.nb.cells if c.cell_type == "code"]

    def cell(self, starts: str):
        """The first code cell whose source starts with ``starts``."""
        return next(c for c in self.code if c.source.startswith(starts))

    def text(self, cell) -> str:
        parts = []
        for out in cell.outputs:
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.data.get("text/plain", "") + "\n")
            elif out.output_type == "error":
                parts.append(f"{out.ename}: {out.evalue}\n")
        return "".join(parts)

    def errors(self) -> list[str]:
        return [o.ename for c in self.code for o in c.outputs if o.output_type == "error"]


_cache: dict[str, Executed] = {}


def executed(name: str) -> Executed:
    if name not in _cache:
        _cache[name] = Executed(name)
    return _cache[name]


def shows_view(book: Executed, cell, text_marker: str) -> bool:
    """A view cell shows a widget (views installed) or its text form."""
    widget = any(WIDGET in o.get("data", {}) for o in cell.outputs)
    return widget or text_marker in book.text(cell)


def test_every_notebook_is_tested():
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == {
        "quickstart", "how_it_works", "debugging"}


def test_quickstart():
    book = executed("quickstart")
    assert book.errors() == []
    assert "%load_ext terra_nb" in book.code[0].source
    train = book.text(book.cell("%%terra --mode trace"))
    first, last = map(float, re.search(r"loss: first ([\d.]+), last ([\d.]+)", train).groups())
    assert last < first
    assert re.search(r"terra\[trace\]: 12 iterations in .* 0 fallbacks", train)
    assert book.text(book.cell("terra_weights")) == "same as eager: True\n"
    status = book.text(book.cell("%terra status"))
    assert "iterations  12 (12 completed)" in status and "fallbacks   0" in status
    assert "covered     from iteration" in status
    assert shows_view(book, book.cell("%terra timeline"), "tracing")
    assert shows_view(book, book.cell("%terra graph"), "TraceGraph(")
    assert book.text(book.cell("%terra explain")) == "no fallbacks in the last run (mode trace)\n"
    exported = book.text(book.cell("import tempfile"))
    assert exported == "['timeline.json', 'tracegraph.dot', 'tracegraph.json']\n"


def test_how_it_works():
    book = executed("how_it_works")
    first = book.text(book.cell("%%terra --mode trace\nw = "))
    assert "terra[trace]: 3 iterations" in first
    growth = book.text(book.cell("growth = []"))
    covered = re.findall(r"iteration (\d): (\d) ops, covered=(\w+), TraceGraph (\d+) nodes", growth)
    assert len(covered) == 7
    assert [c[2] for c in covered[:3]] == ["False"] * 3  # the branch is new at iteration 2
    assert covered[-1][2] == "True"
    assert int(covered[2][3]) > int(covered[0][3])  # the graph grew
    assert "branch points: 1" in growth
    assert "1 branch points" in book.text(book.cell("print(repr(terra.graph))"))
    loops = book.text(book.cell("with terra_nb.Terra"))
    assert "loop nodes: 1 trip counts seen: [2, 3]" in loops
    assert re.search(r"= loop @.* trips=\{2,3\}", loops)
    assert "no fallbacks" in book.text(book.cell("%terra explain"))
    coexec = book.cell("%%terra --mode coexec")
    assert "raises-exception" in coexec.metadata.get("tags", [])
    text = book.text(coexec)
    assert "UsageError: mode 'coexec' needs the co-execution engine" in text or (
        "terra[coexec]: 3 iterations" in text)


def test_debugging():
    book = executed("debugging")
    printed = book.text(book.cell("%%terra --mode trace\nhistory"))
    assert re.findall(r"step (\d+): loss=", printed) == ["0", "3", "6", "9"]
    assert "steps recorded: 10\nlast step: 9" in book.text(book.cell('print("steps recorded'))
    stopped = book.text(book.cell("%%terra --mode trace\nthreshold"))
    step = int(re.search(r"stopped at step (\d+)", stopped).group(1))
    assert f"terra[trace]: {step + 1} iterations" in stopped
    failing = book.cell("%%terra --mode trace\nfor step, (x, y) in enumerate(bad_data)")
    assert "FloatingPointError: loss is nan at step 4" in book.text(failing)
    assert book.errors() == ["FloatingPointError"]
    after = book.text(book.cell('print("failed at step'))
    expected = ["failed at step 4", "bad inputs: 24 NaNs", "weights finite: True"]
    assert after.splitlines()[:3] == expected
    assert "updates applied before the error: True" in after
    assert "error       FloatingPointError in iteration 4" in book.text(book.code[-1])
