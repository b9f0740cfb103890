"""Hand-built TraceGraphs, runner records and SVG helpers for the view tests (no TensorFlow)."""

import os
import xml.etree.ElementTree as ET

from terra_nb.timeline import RunnerSpan
from terra_nb.trace.records import Source, TensorSpec
from terra_nb.trace.tracegraph import TraceGraph, TraceNode, check_graph

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

F = TensorSpec("float32", (4, 8))
S = TensorSpec("float32", ())


def op(i, op_type, location, *, sources=(), fetches=(), parent=-1, hits=1, outputs=(F,)):
    srcs = tuple(tuple(s) for s in sources) or ((Source("node", i - 1),),)
    return TraceNode(
        id=i, kind="op", op_type=op_type, location=location, loc=i, attrs=(("T", "float32"),),
        input_specs=(F,) * len(srcs), outputs=outputs, sources=srcs, fetches=fetches,
        parent=parent, hits=hits,
    )


def make_graph() -> TraceGraph:
    """start -> [ReadVariableOp MatMul BiasAdd Relu] (one line, a chain) -> Mean (fetched,
    a branch point) -> case 0: Mul -> loop / case 1: loop; loop body: AddV2 (fed) -> end."""
    nodes = (
        TraceNode(0, "start"),
        TraceNode(1, "end"),
        op(2, "ReadVariableOp", "m.py:3", sources=[[Source("var", -1, 0, "v1")]], hits=3),
        op(3, "MatMul", "m.py:3", sources=[[Source("feed", -1, 0, "numpy")], [Source("node", 2)]],
           hits=3),
        op(4, "BiasAdd", "m.py:3", hits=3),
        op(5, "Relu", "m.py:3", hits=3),
        op(6, "Mean", "m.py:4", fetches=(0,), outputs=(S,), hits=3),
        op(7, "Mul", "m.py:6", sources=[[Source("node", 6)], [Source("feed", -1, 0, "python")]],
           outputs=(S,), hits=2),
        TraceNode(8, "loop", location="m.py:8", loc=8, body=(9, 10), trip_counts=(1, 2), hits=3),
        TraceNode(9, "start", parent=8),
        TraceNode(10, "end", parent=8),
        op(11, "AddV2", "m.py:9", parent=8, outputs=(S,), hits=5,
           sources=[[Source("node", 6), Source("carry", 11)], [Source("feed", -1, 0, "tensor")]]),
    )
    edges = ((0, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (6, 8), (7, 8), (8, 1), (9, 11),
             (11, 10))
    g = TraceGraph(nodes=nodes, edges=edges)
    check_graph(g)
    return g


def make_spans_and_stats(iterations: int = 6):
    """Two tracing iterations, then co-execution with a fallback at iteration 4."""
    from terra_nb.session import IterationStats

    spans, stats, t = [], [], 100.0
    for i in range(iterations):
        phase = "tracing" if i < 2 else ("fallback" if i == 4 else "coexec")
        spans.append(RunnerSpan("python", "exec", i, phase, t, t + 0.004))
        spans.append(RunnerSpan("python", "feed", i, phase, t + 0.001, t + 0.001))
        spans.append(RunnerSpan("python", "stall", i, phase, t + 0.004, t + 0.006))
        spans.append(RunnerSpan("python", "fetch", i, phase, t + 0.006, t + 0.006))
        if phase == "coexec":
            spans.append(RunnerSpan("graph", "stall", i, phase, t, t + 0.001))
            spans.append(RunnerSpan("graph", "exec", i, phase, t + 0.001, t + 0.006))
        stats.append(IterationStats(
            iteration=i, phase=phase, t_start=t, t_end=t + 0.006, python_exec=0.004,
            python_stall=0.002, graph_exec=0.005 if phase == "coexec" else 0.0,
            graph_stall=0.001 if phase == "coexec" else 0.0, ops=7, feeds=1, fetches=1,
            covered=True, ended="completed",
        ))
        t += 0.007
    return spans, stats


def parse_svg(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def by_id(root: ET.Element) -> dict[str, ET.Element]:
    return {el.get("id"): el for el in root.iter() if el.get("id")}


def classes(el: ET.Element) -> set[str]:
    return set((el.get("class") or "").split())


FWD = "__inference_region_Sequential_call_forward_12"
BWD = "__inference_region_Sequential_call_backward_20"


def make_region_graph() -> TraceGraph:
    """start -> F of model(x) (3 recorded ops) -> Mean -> Sum -> B (2 ops) -> end: a region's
    forward and backward calls between two ordinary ops on one line."""
    from terra_nb.trace.tracegraph import RegionCall

    source = "m.py:3  loss = tf.reduce_sum(tf.reduce_mean(model(x)))"
    calls = (RegionCall(FWD, "Sequential.__call__", "forward", source, "model(x)",
                        ("ReadVariableOp", "MatMul", "Relu")),
             RegionCall(BWD, "Sequential.__call__", "backward", source, "model(x)",
                        ("ReluGrad", "MatMul")))
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"),
             op(2, FWD, "m.py:3", sources=[[Source("feed", -1, 0, "tensor")]]),
             op(3, "Mean", "m.py:3"), op(4, "Sum", "m.py:3", outputs=(S,)),
             op(5, BWD, "m.py:4"))
    g = TraceGraph(nodes, ((0, 2), (2, 3), (3, 4), (4, 5), (5, 1)), calls)
    check_graph(g)
    return g
