"""Hand-built TraceGraphs with branch points a user's program explains (plain data, no
TensorFlow): an ``if`` every path reaches, a region's versions, the ops a region replaced."""

from dataclasses import replace

from terra_nb.trace.branches import branch_sites
from terra_nb.trace.records import Source, TensorSpec
from terra_nb.trace.tracegraph import RegionCall, TraceGraph, TraceNode, check_graph

X8, X16, W = TensorSpec("float32", (8, 4)), TensorSpec("float32", (16, 4)), TensorSpec("float32",
                                                                                   (4, 1))
H = TensorSpec("resource", ())
CELL = """\
%%terra --viz
for x, y in batches:
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, params)
    if float(loss) > 4.0:  # the branch (a comment is no part of the case's label)
        grads = [g * 0.5 for g in grads]
    for p, g in zip(params, grads):
        p.assign_sub(0.01 * g)
"""
FORWARD = "__inference_region_Sequential_call_forward_7"
FORWARD_16 = "__inference_region_Sequential_call_forward_9"
CALLS = (RegionCall(FORWARD, "Sequential.__call__", "forward", "cell:4", "model(x)", ("MatMul",)),
         RegionCall(FORWARD_16, "Sequential.__call__", "forward", "cell:4", "model(x)",
                    ("MatMul",)))


def op(i, op_type, line, *, parent=-1, specs=(X8,), var=""):
    sources = ((Source("var", detail=var),),) if var else ((Source("feed", detail="numpy"),),)
    return TraceNode(i, "op", op_type=op_type, location=f"cell:{line}", loc=i,
                     input_specs=specs, outputs=(W,), sources=sources, parent=parent, hits=2)


def branching_graph() -> TraceGraph:
    """Two iterations traced op by op (MatMul), then the model call as a region at batch 8
    and at batch 16; every path reaches the ``if`` (Mul in its body, or straight to the end)."""
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"),
             op(2, "MatMul", 4, var="v3"), op(3, FORWARD, 4, specs=(X8, H)),
             op(4, FORWARD_16, 4, specs=(X16, H)), op(5, "Mean", 4), op(6, "Mul", 7))
    edges = ((0, 2), (0, 3), (0, 4), (2, 5), (3, 5), (4, 5), (5, 6), (5, 1), (6, 1))
    g = TraceGraph(nodes, edges, CALLS, variables=(("v3", "dense/kernel"),))
    check_graph(g)
    return g


def sited_graph() -> TraceGraph:
    """``branching_graph`` with its branch sites, as ``Terra.graph`` hands a graph out."""
    g = branching_graph()
    return replace(g, branches=branch_sites(g, {"cell": CELL}))
