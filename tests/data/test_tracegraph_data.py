"""TraceGraph data, merging and printing, with hand-made traces: no TensorFlow here."""

import json
import subprocess
import sys

import pytest

from terra_nb.errors import GraphError
from terra_nb.trace.merge import GraphBuilder
from terra_nb.trace.records import LoopRun, Source, TensorSpec, Trace, TraceOp, segment
from terra_nb.trace.tracegraph import TraceGraph, TraceNode, check_graph

F = (TensorSpec("float32", (2,)),)


def op(index, op_type, loc, inputs=(), loops=(), new_iteration=None, fetched=()):
    return TraceOp(
        index=index,
        op_type=op_type,
        attrs=(("T", "float32"),),
        loc=loc,
        location=f"prog.py:{loc}",
        inputs=tuple(inputs),
        input_specs=F * len(inputs),
        outputs=F,
        fetched=fetched,
        loops=loops,
        new_iteration=new_iteration,
    )


FEED = Source("feed", detail="numpy")


def figure3_trace(iteration, branch, trips):
    """if/else with different ops, then a loop of `trips` Tanh ops (the paper's Figure 3)."""
    ops = [op(0, "MatMul", 1, [FEED])]
    if branch:
        ops.append(op(1, "Relu", 2, [Source("op", 0)]))
    else:
        ops.append(op(1, "Sigmoid", 3, [Source("op", 0)]))
    for t in range(trips):
        prev = Source("op", len(ops) - 1)
        ops.append(op(len(ops), "Tanh", 4, [prev], loops=(0,), new_iteration=0 if t else None))
    ops.append(op(len(ops), "Sum", 5, [Source("op", len(ops) - 1)], fetched=(0,)))
    return Trace(iteration, tuple(ops))


def test_segment_folds_loop_iterations():
    block = segment(figure3_trace(0, True, 3).ops)
    kinds = [type(item).__name__ for item in block]
    assert kinds == ["TraceOp", "TraceOp", "LoopRun", "TraceOp"]
    run = block[2]
    assert isinstance(run, LoopRun) and len(run.iterations) == 3


def test_segment_nested_loops():
    ops = []
    for i in range(2):
        for j in range(3):
            first = j == 0
            ops.append(
                op(
                    len(ops),
                    "Tanh",
                    7,
                    loops=(0, 1),
                    new_iteration=(0 if i and first else 1 if j else None),
                )
            )
    block = segment(tuple(ops))
    assert len(block) == 1
    outer = block[0]
    assert outer.loop == 0 and len(outer.iterations) == 2
    assert all(len(it[0].iterations) == 3 for it in outer.iterations)


def test_branch_merges_back_and_loop_merges():
    builder = GraphBuilder()
    assert builder.merge(figure3_trace(0, True, 2)) is False
    assert builder.merge(figure3_trace(1, False, 3)) is False
    assert builder.merge(figure3_trace(2, True, 3)) is True
    g = builder.finish()
    check_graph(g)
    (loop,) = g.nodes_of("loop")
    assert loop.trip_counts == (2, 3)
    body = [n for n in g.nodes if n.parent == loop.id and n.kind == "op"]
    assert [n.op_type for n in body] == ["Tanh"]
    assert body[0].hits == 8
    (branch,) = g.branch_points
    assert g.nodes[branch].op_type == "MatMul"
    assert g.merge_points == (loop.id,)


def test_new_fetch_is_not_covered():
    builder = GraphBuilder()
    builder.merge(figure3_trace(0, True, 1))
    trace = figure3_trace(1, True, 1)
    ops = list(trace.ops)
    ops[0] = op(0, "MatMul", 1, [FEED], fetched=(0,))
    assert builder.merge(Trace(1, tuple(ops))) is False


def test_json_round_trip():
    builder = GraphBuilder(loop_location=lambda i: f"prog.py:{10 + i}")
    builder.merge(figure3_trace(0, True, 2))
    builder.merge(figure3_trace(1, False, 1))
    g = builder.finish()
    again = TraceGraph.from_json(g.to_json())
    assert again == g
    data = json.loads(g.to_json())
    assert {n["kind"] for n in data["nodes"]} == {"start", "end", "op", "loop"}
    assert data["branch_points"] == list(g.branch_points)


def test_repr_is_one_line_per_node():
    builder = GraphBuilder(loop_location=lambda i: "prog.py:4")
    builder.merge(figure3_trace(0, True, 2))
    assert repr(builder.finish()) == "\n".join(
        [
            "TraceGraph(9 nodes, 1 loops, 0 branch points)",
            "  %0 = start -> %1",
            "  %1:f32[2] = MatMul feed:numpy  @prog.py:1 -> %2",
            "  %2:f32[2] = Relu %1  @prog.py:2 -> %3",
            "  %3 = loop @prog.py:4 trips={2} -> %7",
            "      %4 = start -> %5",
            "      %5:f32[2] = Tanh {%2|%5}  @prog.py:4 -> %6",
            "      %6 = end",
            "  %7:f32[2] = Sum %5  @prog.py:5 fetch -> %8",
            "  %8 = end",
        ]
    )


def test_dot_marks_loops_branches_feeds_fetches():
    builder = GraphBuilder()
    builder.merge(figure3_trace(0, True, 2))
    builder.merge(figure3_trace(1, False, 2))
    dot = builder.finish().to_dot()
    assert "subgraph cluster_" in dot and "terra-loop" in dot
    assert "terra-branch" in dot and "terra-feed" in dot and "terra-fetch" in dot


def test_check_graph_names_bad_node():
    g = TraceGraph(
        nodes=(TraceNode(0, "start"), TraceNode(1, "end"), TraceNode(2, "op", op_type="Add")),
        edges=((0, 2),),
    )
    with pytest.raises(GraphError, match="node 2 \\(Add\\) is not on a path"):
        check_graph(g)
    cyclic = TraceGraph(
        nodes=(TraceNode(0, "start"), TraceNode(1, "end"), TraceNode(2, "op"), TraceNode(3, "op")),
        edges=((0, 2), (2, 3), (3, 2), (3, 1)),
    )
    with pytest.raises(GraphError, match="cycle"):
        check_graph(cyclic)


def test_data_modules_do_not_import_tensorflow():
    """The TraceGraph, its merging and printing are plain data: importable without TensorFlow,
    and without the graphviz package until DOT is built."""
    code = (
        "import sys, terra_nb, terra_nb.trace.merge, terra_nb.trace.dot, terra_nb.timeline;"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported';"
        "assert 'graphviz' not in sys.modules, 'graphviz was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dot_without_the_graphviz_package_says_what_to_install(monkeypatch):
    builder = GraphBuilder()
    builder.merge(figure3_trace(0, True, 2))
    graph = builder.finish()
    monkeypatch.setitem(sys.modules, "graphviz", None)
    assert repr(graph).startswith("TraceGraph(")  # the listing needs no graphviz
    with pytest.raises(ImportError, match="pip install graphviz"):
        graph.to_dot()


def test_dot_text_is_literal():
    """Backslashes and ``<...>`` in user text stay text (not DOT escapes, not HTML labels)."""
    from terra_nb.trace.dot import dot_label

    graphviz = pytest.importorskip("graphviz")
    dot = graphviz.Digraph()
    dot.node("n0", label=dot_label("<lambda>", "a\\b"))
    assert 'n0 [label="<lambda>\\na\\\\b"]' in dot.source


def test_dot_output_is_valid_graphviz():
    """`dot` lays out the DOT of a graph with loops, branches, feeds and fetches."""
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("graphviz `dot` is not installed (apt-get install graphviz)")
    builder = GraphBuilder(loop_location=lambda i: 'prog.py:"4"')
    builder.merge(figure3_trace(0, True, 2))
    builder.merge(figure3_trace(1, False, 3))
    svg = subprocess.run(
        ["dot", "-Tsvg"],
        input=builder.finish().to_dot(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'class="cluster terra&#45;loop"' in svg  # dot escapes "-" in SVG attributes
    assert "MatMul</text>" in svg and ">prog.py:1</text>" in svg  # two label lines


def test_a_branch_in_a_loop_body_is_one_loop():
    from terra_nb.capture.location import loop_ranges

    def body(xs):
        total = 0
        for x in xs:  # jumps back from the end of both branches
            if x % 2:
                total += x
            else:
                total -= x
        while total > 10:  # and from a continue
            total -= 3
            if total % 2:
                continue
            total -= 1
        return total

    ranges = loop_ranges(body.__code__)
    assert len(ranges) == 2, ranges
    assert len({start for start, _ in ranges}) == 2
