"""Every notebook in notebooks/ runs end to end in a real kernel, and shows what it promises."""

from __future__ import annotations

import ast
import json
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

    def __init__(self, name: str, timeout: int = 120) -> None:
        path = NOTEBOOKS / f"{name}.ipynb"
        self.nb = nbformat.read(path, as_version=4)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        client = nbclient.NotebookClient(
            self.nb, timeout=timeout, kernel_name="python3",
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


def executed(name: str, timeout: int = 120) -> Executed:
    if name not in _cache:
        _cache[name] = Executed(name, timeout)
    return _cache[name]


def shows_view(book: Executed, cell, text_marker: str) -> bool:
    """A view cell shows a widget (views installed) or its text form."""
    widget = any(WIDGET in o.get("data", {}) for o in cell.outputs)
    return widget or text_marker in book.text(cell)


def test_every_notebook_is_tested():
    assert {p.stem for p in NOTEBOOKS.glob("*.ipynb")} == {
        "quickstart", "how_it_works", "debugging", "live_views", "benchmarks"}


def test_kernels_import_this_checkout():
    """The notebooks' kernels run the terra_nb under test, not another installed copy."""
    book = executed("quickstart")
    assert book.errors() == []
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import terra_nb; print(terra_nb.__file__)")])
    nbclient.NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    printed = nb.cells[0].outputs[0].text.strip()
    assert printed == str(NOTEBOOKS.parent / "terra_nb" / "__init__.py")


def test_live_views():
    """The teaching notebook: an inner loop, a branch on a fetched value and a late new path,
    live under --viz; its views are pictures too (a saved notebook shows them)."""
    book = executed("live_views")
    assert book.errors() == []
    assert book.code[0].outputs == []  # no TensorFlow start-up log
    train = book.cell("%%terra --viz")
    assert any(WIDGET in o.get("data", {}) for o in train.outputs)
    assert any("image/png" in o.get("data", {}) for o in train.outputs)
    text = book.text(train)
    last = float(re.search(r"loss: first [\d.]+, last ([\d.]+)", text).group(1))
    assert last < 0.1
    assert re.search(r"terra\[coexec\]: 200 iterations in .* phase coexec", text)
    explained = book.text(book.cell("%terra explain"))
    # the late new path, in the cell as IPython names it
    assert re.search(r"iteration 150: .*\(In \[3\]:\d+  loss = loss \+ 1e-3", explained)
    status = book.text(book.cell("%terra status"))
    assert "phase       coexec" in status
    graph = book.cell("%terra graph")
    assert shows_view(book, graph, "loops")
    assert re.search(r"[1-9]\d* loops, [1-9]\d* branch points", book.text(graph))
    assert book.nb.metadata["widgets"]  # nbclient stores the widgets' state
    _regions_in_live_views(book)


def _regions_in_live_views(book) -> None:
    """The regions cell: a Keras MLP with Adam under --regions; its graph view's exported data
    names the model's region node (the view draws it collapsed, labelled by call and object)."""
    regions = book.text(book.cell("%%terra --regions"))
    assert re.search(r"terra\[coexec\]: 30 iterations in .* phase coexec", regions)
    assert shows_view(book, book.code[-1], "TraceGraph view")
    state = book.nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    labels = [c["label"] for model in state.values() if "graph_json" in model["state"]
              for c in json.loads(model["state"]["graph_json"]).get("region_calls", {}).values()]
    assert "mlp(x[-1]): Sequential · 9 ops" in labels
    assert any(label.startswith("∇ Sequential · ") for label in labels)


def test_quickstart():
    book = executed("quickstart")
    assert book.errors() == []
    assert "%load_ext terra_nb" in book.code[0].source
    assert book.code[0].outputs == []  # no TensorFlow start-up log
    train_cell = book.cell("%%terra\n")
    assert train_cell.source.splitlines()[0] == "%%terra"  # the default mode
    train = book.text(train_cell)
    first, last = map(float, re.search(r"loss: first ([\d.]+), last ([\d.]+)", train).groups())
    assert last < first
    assert re.search(r"terra\[coexec\]: 32 iterations in .* phase coexec, 1 fallbacks", train)
    assert book.text(book.cell("terra_weights")) == "same as eager: True\n"
    status = book.text(book.cell("%terra status"))
    for line in ("mode        coexec", "phase       coexec", "iterations  32 (32 completed)",
                 "covered     from iteration 1", "fallbacks   1"):
        assert line in status
    explained = book.text(book.cell("%terra explain"))
    fallback = re.match(
        r"iteration (\d+): new op or new program location at AssignVariableOp "
        r"\(In \[2\]:10  optimizer\.learning_rate\.assign\(0\.02\)\)\n", explained)
    assert fallback and int(fallback.group(1)) >= 2  # after the warm-up, in co-execution
    # then the regions (on by default): the model call and apply_gradients ran compiled
    assert re.search(r"Sequential\.__call__ .* formed  at In \[2\]:6 ", explained), explained
    assert re.search(r"SGD\.apply_gradients .* formed", explained), explained
    assert shows_view(book, book.cell("%terra timeline"), "coexec")
    assert shows_view(book, book.cell("%terra graph"), "1 branch points")
    exported = book.text(book.cell("import tempfile"))
    assert exported == "['timeline.json', 'tracegraph.dot', 'tracegraph.json']\n"


def test_how_it_works():
    book = executed("how_it_works")
    assert book.errors() == []
    tracing = book.text(book.cell('with terra_nb.Terra(mode="trace") as terra:\n    w = '))
    assert tracing.splitlines() == [
        "iteration 0: phase tracing, 7 ops, covered=False",
        "iteration 1: phase tracing, 7 ops, covered=True",
        "iteration 2: phase tracing, 7 ops, covered=True",
    ]
    graphs = [book.text(c) for c in book.code if c.source == "print(graph_listing(terra.graph))"]
    assert graphs[0].startswith("TraceGraph(9 nodes, 0 loops, 0 branch points)")
    growth = book.text(book.cell("growth = []"))
    covered = re.findall(r"iteration (\d): (\d) ops, covered=(\w+), TraceGraph (\d+) nodes", growth)
    assert len(covered) == 7
    assert [c[2] for c in covered[:3]] == ["False"] * 3  # the branch is new at iteration 2
    assert covered[-1][2] == "True"
    assert int(covered[2][3]) > int(covered[0][3])  # the graph grew
    assert "branch points: 1" in growth
    assert graphs[1].startswith("TraceGraph(4 nodes, 0 loops, 1 branch points)")
    assert re.search(r"= Sqrt %1 ", graphs[1])
    loops = book.text(book.cell('with terra_nb.Terra(mode="trace") as terra:\n    for i'))
    assert "loop nodes: 1 trip counts seen: [2, 3]" in loops
    assert re.search(r"= loop @.* trips=\{2,3\}", loops)
    feeds = book.text(book.cell('with terra_nb.Terra(mode="trace") as terra:\n    m = '))
    assert "per iteration: 5 feeds, 1 fetch\n" in feeds
    assert re.search(r"node \d+ Mean  fed inputs \[1\], fetched outputs \[0\]", feeds)

    switch = book.text(book.cell("rng = np.random.default_rng(0)"))
    phases = ast.literal_eval(re.search(r"phases: (\[.*\])", switch).group(1))
    assert len(phases) == 24
    assert phases[:2] == ["tracing", "tracing"] and phases[2] == "coexec"
    assert phases[15] == "fallback" and set(phases[2:15] + phases[16:]) == {"coexec"}
    assert "first co-executed iteration: 2" in switch
    assert "same as eager: True" in switch
    programs = book.text(book.cell("print(len(terra.programs)"))
    assert int(re.match(r"(\d+) segment\(s\), \d+ compiled", programs).group(1)) >= 1
    assert re.search(r"segment\(\d+ args\) -> \d+ values", programs)
    assert re.search(r"#\d+ node \d+: AssignSubVariableOp var\d+ op\d+", programs)
    fallback = book.text(book.cell("for fallback in terra.explain()"))
    assert re.match(
        r"iteration 15: new op or new program location at ReadVariableOp "
        r"\(.*:15  w\.assign\(w \* 0\.5\)\)\n", fallback)
    assert "phase of iteration 15: fallback | after it: ['coexec']" in fallback
    assert "branch points now: 1" in fallback

    timeline = book.text(book.cell("print(f\"{'iter'"))
    rows = re.findall(r"^\s*(\d+)  (\w+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                      timeline, re.M)
    assert [int(r[0]) for r in rows] == list(range(24))
    assert [r[1] for r in rows] == phases
    for _, phase, _, _, graph_exec, _ in rows:
        assert (float(graph_exec) > 0) == (phase != "tracing")
    assert "graph exec > 0 in every co-executed iteration: True" in timeline
    assert "graph exec while tracing: 0.0" in timeline
    assert shows_view(book, book.cell("import terra_nb.views"), "StaticTimeline")

    grown = book.text(book.cell("def grow(loop):"))
    phases = ast.literal_eval(re.search(r"phases: (\[.*\])", grown).group(1))
    assert phases == ["tracing"] * 2 + ["coexec"] * 8
    counts = re.search(
        r"fallbacks: (\d+) \| segments: (\d+) \| compiled: (\d+) \| runs op by op: (\d+)", grown)
    assert counts and (counts.group(1), counts.group(3)) == ("0", "0")
    assert int(counts.group(2)) >= 8 and int(counts.group(4)) >= 8
    assert "same as eager: True" in grown

    whole = book.text(book.cell("def decay(loop):"))
    assert whole.startswith("Program(")
    assert re.search(r"^  loop n\d+ while \(Loop Cond\):$", whole, re.M)
    assert re.search(r"^  case after n\d+ \(Case Select\):$", whole, re.M)
    assert "<- const [1]" in whole  # the 0.5s
    phases = ast.literal_eval(re.search(r"phases: (\[.*\])", whole).group(1))
    assert phases[:3] == ["tracing", "tracing", "fallback"] and set(phases[3:]) == {"coexec"}
    assert re.search(r"iteration 2: a value of node \d+ outlives the iteration", whole)
    assert "same as eager: True" in whole
    # locations read as the notebook names its cells (not temp-file names), every output
    everything = "".join(book.text(c) for c in book.code)
    assert re.findall(r"In \[\d+\]:\d+", everything)
    assert not re.search(r"\b\d+\.py:\d+|terra-cell", everything)
    assert "(end of iteration) ()" not in everything


def test_debugging():
    book = executed("debugging")
    printed = book.text(book.cell("%%terra\nmodel, optimizer = make_model()\nhistory"))
    assert re.findall(r"step (\d+): loss=[\d.]+ \|grad\|=[\d.]+ bias\[0\]=", printed) == [
        "0", "3", "6", "9"]
    assert re.search(r"terra\[coexec\]: 12 iterations in .* phase coexec, 0 fallbacks", printed)
    after = book.text(book.cell('print("steps recorded'))
    assert "steps recorded: 12\nlast step: 11" in after
    assert "grad tensors: 4" in after
    assert "last gradient of the output bias: [" in after
    assert book.text(book.cell("eager_model, eager_optimizer = make_model()\neager_history")) == (
        "same as eager: True\n")
    stopped = book.text(book.cell("%%terra\nthreshold"))
    assert "stopped at step 6 with loss" in stopped
    assert re.search(r"terra\[coexec\]: 7 iterations in .* phase coexec", stopped)
    failing = book.cell("%%terra\nfor step, (x, y) in enumerate(bad_data)")
    failed = book.text(failing)
    assert "FloatingPointError: loss is nan at step 6" in failed
    assert "phase coexec, 0 fallbacks" in failed
    assert "stopped by FloatingPointError in iteration 6" in failed
    assert book.errors() == ["FloatingPointError"]
    after = book.text(book.cell('print("failed at step'))
    assert after.splitlines() == [
        "failed at step 6", "bad inputs: 24 NaNs", "weights finite: True",
        "updates applied before the error: True", "optimizer steps: 6"]
    assert book.text(book.cell("eager_model, eager_optimizer = make_model()\ntry")) == (
        "eager: loss is nan at step 6\nsame as eager: True\n")
    status = book.text(book.code[-1])
    assert "mode        coexec" in status and "phase       coexec" in status
    assert "iterations  7 (6 completed)" in status
    assert "error       FloatingPointError in iteration 6" in status


def test_benchmarks(monkeypatch):
    # one program, tiny counts: the kernel inherits these and runs the harness on dcgan only
    monkeypatch.setenv("TERRA_BENCH_ONLY", "dcgan")
    monkeypatch.setenv("TERRA_BENCH_ARGS", "--warmup 3 --iterations 2 --repeats 1 --timeout 120")
    book = executed("benchmarks", timeout=400)
    assert book.errors() == []
    shown = [o.data["text/markdown"] for o in book.cell("display(Markdown(").outputs
             if "text/markdown" in o.get("data", {})]
    assert shown and "| dcgan |" in shown[0] and "tf.function coverage" in shown[0]
    run = book.cell("document = paper.main(argv")
    assert "| dcgan |" in book.text(run)
    # progress: one bar updated in place (its last state: done), no block of stderr lines
    assert not [o for o in run.outputs if o.output_type == "stream" and o.name == "stderr"]
    bar = next(o for o in run.outputs if "text/html" in o.get("data", {}))
    assert "<progress" in bar.data["text/html"] and "done in" in bar.data["text/plain"]
    for start in ('Image(filename=str(out / "speedup.png"))',
                  'Image(filename=str(out / "breakdown.png"))'):
        assert any("image/png" in o.get("data", {}) for o in book.cell(start).outputs), start
    coverage = book.text(book.cell('for p in document["programs"]'))
    assert coverage.startswith("dcgan") and "runs, equal to eager" in coverage
