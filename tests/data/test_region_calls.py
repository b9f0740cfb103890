"""Region calls in the TraceGraph (DESIGN 5b, issue 14 views): a region's compiled function is
one op node; the graph's ``region_calls`` name it. Hand-built graphs: no TensorFlow here."""

import json

import pytest

from terra_nb.errors import GraphError
from terra_nb.trace.dot import Listing, to_text
from terra_nb.trace.records import Source, TensorSpec
from terra_nb.trace.tracegraph import RegionCall, TraceGraph, TraceNode, check_graph

F = (TensorSpec("float32", (2,)),)
FWD = "__inference_region_Sequential_call_forward_12"
BWD = "__inference_region_Sequential_call_backward_20"
ADAM = "__inference_region_Adam_apply_gradients_forward_31"
SOURCE = "prog.py:3  loss = loss_fn(y, model(x))"


def calls() -> tuple[RegionCall, ...]:
    return (
        RegionCall(FWD, "Sequential.__call__", "forward", SOURCE, "model(x)",
                   ("ReadVariableOp", "MatMul", "Relu")),
        RegionCall(BWD, "Sequential.__call__", "backward", SOURCE, "model(x)",
                   ("ReluGrad", "MatMul")),
        RegionCall(ADAM, "Adam.apply_gradients", "forward", "prog.py:5  opt.apply_gradients(g)",
                   "opt.apply_gradients(g)", ("AssignAddVariableOp",)),
    )


def region_graph() -> TraceGraph:
    """start -> F (fed x) -> Mean -> B -> Adam -> end."""
    def node(i, op_type, line, source):
        return TraceNode(i, "op", op_type, f"prog.py:{line}", line, (), F, F, ((source,),))

    nodes = (TraceNode(0, "start"), TraceNode(1, "end"),
             node(2, FWD, 3, Source("feed", detail="tensor")),
             node(3, "Mean", 3, Source("node", 2)),
             node(4, BWD, 4, Source("node", 3)), node(5, ADAM, 5, Source("node", 4)))
    g = TraceGraph(nodes, ((0, 2), (2, 3), (3, 4), (4, 5), (5, 1)), calls())
    check_graph(g)
    return g


def test_labels_name_the_call_object_and_size():
    fwd, bwd, adam = calls()
    assert fwd.label == "model(x): Sequential · 3 ops"
    assert bwd.label == "∇ Sequential · 2 ops"
    assert adam.label == "Adam.apply_gradients · 1 op"
    long = RegionCall(FWD, "MeanSquaredError.__call__", "forward", "", "loss_fn(y, model(x))")
    assert long.label == "loss_fn(…): MeanSquaredError · 0 ops"
    guard = RegionCall(FWD, "Sequential.__call__", "guard", ops=("Greater",))
    assert guard.label == "guard Sequential · 1 op"


def test_region_calls_round_trip_and_json_shape():
    g = region_graph()
    data = json.loads(g.to_json())
    assert data["region_calls"][FWD] == {
        "name": "Sequential.__call__", "kind": "forward", "source": SOURCE, "call": "model(x)",
        "ops": ["ReadVariableOp", "MatMul", "Relu"], "label": "model(x): Sequential · 3 ops"}
    back = TraceGraph.from_json(g.to_json())
    assert back == g
    assert back.region_call(back.nodes[4]).kind == "backward"
    assert back.region_call(back.nodes[3]) is None  # an ordinary op


def test_graph_json_without_region_calls_still_reads():
    data = json.loads(region_graph().to_json())
    del data["region_calls"]
    assert TraceGraph.from_json(json.dumps(data)).region_calls == ()


def test_listing_names_region_nodes():
    text = to_text(region_graph(), Listing())
    assert "%1:f32[2] = region[model(x): Sequential · 3 ops] feed:tensor  @prog.py:3" in text
    assert "= region[∇ Sequential · 2 ops] %2" in text
    assert "= region[Adam.apply_gradients · 1 op] %3" in text
    assert FWD not in text
    assert "region[...] a call of a region's compiled function" in text
    assert "region[" in repr(region_graph())


def test_check_graph_names_a_bad_region_kind():
    g = region_graph()
    bad = TraceGraph(g.nodes, g.edges, (RegionCall(FWD, "Sequential.__call__", "sideways"),))
    with pytest.raises(GraphError, match=f"region call {FWD} has unknown kind 'sideways'"):
        check_graph(bad)
