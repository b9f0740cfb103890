"""%terra status | explain | graph | timeline | export PATH | reset."""

from __future__ import annotations

import json
import re

import pytest
from IPython.core.error import UsageError

import kernel_ext
from kernel_ext.report import Explanation, Status

LOOP = """
import tensorflow as tf
v = tf.Variable(1.0)
for i in range(4):
    v.assign(v * 2.0)
    if i % 2:
        v.assign_add(1.0)
"""


@pytest.fixture
def ran(ip, no_views):
    """A shell whose last %%terra run is LOOP (views unavailable: text output)."""
    assert ip.run_cell("%%terra --quiet --mode trace\n" + LOOP).success
    return ip


def test_status_reports_the_last_run(ran):
    status = ran.run_line_magic("terra", "status")
    terra = ran.magics_manager.registry["TerraMagics"].runner.last
    assert isinstance(status, Status)
    assert (status.mode, status.phase, status.iterations, status.completed) == (
        "trace", "tracing", 4, 4)
    assert status.fallbacks == len(terra.explain()) == 0
    assert status.nodes == len(terra.graph.nodes) > 2
    assert status.speed > 0 and status.error == ""
    assert ran.run_line_magic("terra", "") == status  # status is the default
    assert "iterations  4 (4 completed)" in str(status)
    assert (status.programs, status.runs_op_by_op) == (len(terra.programs), terra.runs_op_by_op)
    assert (f"segments    {status.programs}, {status.compiled} compiled (the 256 most recent "
            "kept), ") in str(status)
    assert "plan        segments (the default" in str(status)


def test_status_shows_the_whole_program(ip, no_views):
    loop = LOOP.replace("range(4)", "range(8)")
    assert ip.run_cell("%%terra --quiet --program whole\n" + loop).success
    status = ip.run_line_magic("terra", "status")
    terra = ip.magics_manager.registry["TerraMagics"].runner.last
    assert status.whole_program == terra.program.summary()
    assert "1 cases" in status.whole_program  # the `if i % 2` branch
    assert f"program     {status.whole_program}" in str(status)
    assert "plan        the whole program" in str(status)
    assert ip.user_ns["v"].numpy() == pytest.approx(_eager(loop))


def _eager(loop: str) -> float:
    namespace: dict = {}
    exec(loop, namespace)
    return namespace["v"].numpy()


def test_status_after_an_error_names_it(ip):
    ip.run_cell("%%terra --quiet\nfor i in range(5):\n    if i == 2:\n        1 / 0\n")
    status = ip.run_line_magic("terra", "status")
    assert (status.iterations, status.completed, status.error, status.stopped_at) == (
        3, 2, "ZeroDivisionError", 2)


def test_explain_lists_fallbacks(ran):
    explanation = ran.run_line_magic("terra", "explain")
    assert isinstance(explanation, Explanation)
    assert explanation.fallbacks == ()
    assert str(explanation) == "no fallbacks in the last run (mode trace)"


LATE = """
import tensorflow as tf
v = tf.Variable(1.0)
for i in range(8):
    v.assign(v * 1.5)
    if i == 6:
        v.assign_add(1.0)
"""


def test_explain_names_the_cell_as_ipython_does(ip, no_views):
    """A fallback's location reads ``In [n]:8``, as IPython's tracebacks name the cell, both in
    ``%terra explain`` and when a cell shows ``terra.explain()``."""
    assert ip.run_cell("%%terra --quiet\n" + LATE, store_history=True).success
    number = max(ip.compile._filename_map.values())  # the %%terra cell's, in IPython 8 and 9
    cell = rf"In \[{number}\]:8  v\.assign_add\(1\.0\)"
    explained = str(ip.run_line_magic("terra", "explain"))
    first, *rest = explained.splitlines()
    assert re.fullmatch(rf"iteration 6: .* at AssignAddVariableOp \({cell}\)", first)
    assert rest[0] == "did not co-execute:"  # then the iterations that traced, and why
    assert "terra-cell" not in explained
    ip.user_ns["fallbacks"] = ip.magics_manager.registry["TerraMagics"].runner.last.explain()
    shown = ip.display_formatter.format(ip.user_ns["fallbacks"])[0]["text/plain"]
    assert re.search(rf"AssignAddVariableOp \({cell}\)", shown) and "terra-cell" not in shown
    kernel_ext.unload_ipython_extension(ip)  # the plain dataclass repr again
    assert "Fallback(" in ip.display_formatter.format(ip.user_ns["fallbacks"])[0]["text/plain"]


def test_graph_prints_the_tracegraph_listing(ran, capsys):
    capsys.readouterr()
    assert ran.run_line_magic("terra", "graph") is None
    terra = ran.magics_manager.registry["TerraMagics"].runner.last
    out = capsys.readouterr().out
    assert out.startswith(repr(terra.graph).splitlines()[0])  # TraceGraph(... branch points)
    assert re.search(r"-> (true|false):%\d+ (true|false):%\d+  \(if i % 2: @In \[\d+\]:\d+\)",
                     out)  # the `if i % 2` branch, named with its line
    assert re.search(r"AssignAddVariableOp .*@In \[\d+\]:\d+", out)  # the cell, named
    assert "# v.assign_add(1.0)" in out and "fetch: Python reads this output" in out


def test_timeline_prints_the_breakdown_table(ran, capsys):
    capsys.readouterr()
    ran.run_line_magic("terra", "timeline")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["iter", "phase", "wall", "ms", "python", "exec", "python",
                                "stall", "graph", "exec", "graph", "stall", "ops", "graph"]
    rows = [line.split() for line in lines[1:-1]]
    terra = ran.magics_manager.registry["TerraMagics"].runner.last
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert [r[1] for r in rows] == ["tracing"] * 4
    assert [float(r[3]) for r in rows] == [round(s.python_exec * 1e3, 2) for s in terra.stats]
    assert [int(r[7]) for r in rows] == [s.ops for s in terra.stats]
    assert [r[8] == "covered" for r in rows] == [s.covered for s in terra.stats]
    assert lines[-1].split()[0] == "mean"


@pytest.fixture
def terminal(monkeypatch):
    """The shell is a terminal IPython (no widget front end)."""
    import kernel_ext.magics

    monkeypatch.setattr(kernel_ext.magics, "is_terminal", lambda shell: True)


def test_terminal_shows_text_even_with_views(ip, terminal, capsys):
    assert ip.run_cell("%%terra --quiet --mode trace\n" + LOOP).success
    capsys.readouterr()
    ip.run_line_magic("terra", "graph")
    assert "false:" in capsys.readouterr().out
    ip.run_line_magic("terra", "timeline")
    assert capsys.readouterr().out.splitlines()[0].split()[:2] == ["iter", "phase"]


def test_viz_in_a_terminal_says_it_shows_the_text_views_and_does(ip, terminal, capsys):
    """Before, --viz in a terminal IPython was ignored without a word."""
    assert ip.run_cell("%%terra --viz --mode trace\n" + LOOP).success
    out = capsys.readouterr().out
    assert out.startswith("terra: --viz in a terminal shows the text views")
    summary = out.index("terra[trace]:")
    assert "false:" in out[summary:]  # the TraceGraph listing: the `if i % 2` ways
    assert any(line.split()[:2] == ["iter", "phase"] for line in out[summary:].splitlines())


def test_terminal_progress_goes_to_stderr_not_stdout(ip, terminal, capsys):
    ip.run_line_magic("config", "TerraMagics.progress_interval = 0.05")
    assert ip.run_cell("%%terra\nimport time\nfor i in range(12):\n    time.sleep(0.02)\n")
    captured = capsys.readouterr()
    assert "terra: iteration" not in captured.out  # the program's stdout: only the summary
    assert captured.out.startswith("terra[coexec]: 12 iterations")
    assert "\rterra: iteration " in captured.err and captured.err.endswith("\r")


def test_export_writes_graph_and_chrome_trace(ran, tmp_path):
    out = ran.run_line_magic("terra", f"export {tmp_path / 'run1'}")
    terra = ran.magics_manager.registry["TerraMagics"].runner.last
    assert json.loads(out.graph_json.read_text()) == json.loads(terra.graph.to_json())
    assert out.graph_dot.read_text() == terra.graph.to_dot()
    events = json.loads(out.chrome_trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == len(terra.spans) == 4
    assert str(out).count("wrote ") == 3


def test_reset_forgets_cached_graphs(ran, capsys):
    cell = "%%terra --quiet\nfor i in range(3):\n    v.assign(v * 2.0)\n"
    assert ran.run_cell(cell).success
    runner = ran.magics_manager.registry["TerraMagics"].runner
    assert ran.run_cell(cell).success and runner.last.stats[0].covered
    capsys.readouterr()
    ran.run_line_magic("terra", "reset")
    assert capsys.readouterr().out == "terra: forgot 2 cached cell graph(s)\n"  # LOOP, cell
    assert ran.run_cell(cell).success
    assert runner.last.stats[0].covered is False  # traced from scratch again


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("frobnicate", "invalid choice: 'frobnicate'"),
        ("export", "needs a directory"),
        ("status now", "takes no argument"),
        ("graph a b", "unrecognized arguments"),
    ],
)
def test_bad_subcommands_are_usage_errors(ran, line, message):
    with pytest.raises(UsageError, match=message):
        ran.run_line_magic("terra", line)


@pytest.mark.parametrize("command", ["status", "explain", "graph", "timeline", "export x"])
def test_nothing_to_show_before_a_run(ip, command):
    with pytest.raises(UsageError, match="no %%terra cell has run yet"):
        ip.run_line_magic("terra", command)
