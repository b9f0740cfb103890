"""Region call nodes in the graph view (issue 14): one collapsed element labelled by its call,
object and size; open, a cluster of the op types the region runs. No TensorFlow here."""

import json
from dataclasses import replace

import pytest
from view_fixtures import BWD, FWD, by_id, classes, make_region_graph, parse_svg

from terra_nb.views.fallback_layout import fallback_svg
from terra_nb.views.graph_dot import marks_for, view_dot
from terra_nb.views.graph_model import plan_view
from terra_nb.views.graph_picture import draw_graph, graph_payload
from terra_nb.views.graph_regions import COLUMN

needs_dot = pytest.mark.usefixtures("needs_dot")


def test_region_nodes_are_collapsed_elements_outside_chains():
    g = make_region_graph()
    plan = plan_view(g, min_chain=2)
    assert plan.key_of[2] == "r2" and plan.key_of[5] == "r5"
    assert plan.elements["r2"].kind == "region" and plan.elements["r2"].members == (2,)
    assert plan.groups["r2"] == {"kind": "region", "members": [2], "collapsed": True}
    assert plan.open_regions == frozenset()
    assert plan.key_of[3] == plan.key_of[4] == "c3"  # Mean, Sum: a chain; F is not in it
    assert [(e.src, e.dst) for e in plan.edges] == [("n0", "r2"), ("r2", "c3"), ("c3", "r5"),
                                                   ("r5", "n1")]


def test_collapsed_region_label_in_dot():
    g = make_region_graph()
    dot = view_dot(g, plan_view(g))
    assert 'r2 [label="[+] ▶ model(x): Sequential · 3 ops\\nm.py:3"' in dot
    assert 'r5 [label="[+] ∇ Sequential · 2 ops\\nm.py:4"' in dot
    assert "terra-region terra-region-forward" in dot and "terra-collapsed" in dot
    assert FWD not in dot and BWD not in dot  # the generated names are never drawn


def test_toggled_region_opens_to_its_op_types():
    g = make_region_graph()
    plan = plan_view(g, toggled=["r2"])
    assert plan.open_regions == frozenset({2}) and plan.groups["r2"]["collapsed"] is False
    dot = view_dot(g, plan)
    assert "subgraph cluster_r2 {" in dot
    for k, op in enumerate(("ReadVariableOp", "MatMul", "Relu")):
        assert f'r2_{k} [label={op} ' in dot or f'r2_{k} [label="{op}"' in dot
    assert "r2_0 -> r2_1" in dot and "r2_1 -> r2_2" in dot
    assert "n0 -> r2_0" in dot and "r2_2 -> n3" in dot  # entered at the first op, left at last
    assert 'id=e_r2_n3' in dot or 'id="e_r2_n3"' in dot  # the view edge keeps element keys


def test_a_long_region_opens_in_columns_read_left_to_right():
    g = make_region_graph()
    ops = tuple(f"Op{k}" for k in range(2 * COLUMN + 3))
    g = replace(g, region_calls=(replace(g.region_calls[0], ops=ops), g.region_calls[1]))
    dot = view_dot(g, plan_view(g, toggled=["r2"]))
    assert f"r2_{COLUMN - 1} -> r2_{COLUMN} [" in dot and "constraint=false" in dot
    assert "rank=same" in dot
    assert f"r2_0 -> r2_{COLUMN} [style=invis]" in dot
    assert f"r2_{COLUMN} -> r2_{2 * COLUMN} [style=invis]" in dot
    assert f"r2_{len(ops) - 1} -> n3" in dot


def test_payload_carries_the_region_table():
    g = make_region_graph()
    picture = draw_graph(g, toggled=["r5"])
    data = json.loads(graph_payload(g, picture, {}))
    assert data["region_calls"][BWD]["ops"] == ["ReluGrad", "MatMul"]
    assert data["region_calls"][FWD]["label"] == "model(x): Sequential · 3 ops"
    assert data["groups"]["r5"]["collapsed"] is False and data["elements"]["r2"] == [2]


@needs_dot
def test_svg_has_the_region_node_and_the_open_cluster():
    g = make_region_graph()
    ids = by_id(parse_svg(draw_graph(g, toggled=["r5"]).svg))
    assert {"node", "terra-region", "terra-collapsed", "terra-feed"} <= classes(ids["r2"])
    assert {"cluster", "terra-region", "terra-region-backward"} <= classes(ids["cluster_r5"])
    assert {"r5_0", "r5_1"} <= ids.keys() and "r5" not in ids
    texts = [t.text for t in ids["cluster_r5"].iter() if t.tag.endswith("text")]
    assert "[−] ∇ Sequential · 2 ops" in texts


def test_built_in_layout_draws_regions_both_ways():
    g = make_region_graph()
    plan = plan_view(g, toggled=["r5"])
    ids = by_id(parse_svg(fallback_svg(g, plan, marks_for(plan))))
    assert {"terra-region", "terra-collapsed"} <= classes(ids["r2"])
    texts = [t.text for t in ids["cluster_r5"].iter() if t.tag.endswith("text")]
    assert texts[0] == "[−] ∇ Sequential · 2 ops" and texts[2:] == ["ReluGrad", "MatMul"]
