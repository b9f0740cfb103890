"""Grouping a TraceGraph into drawn elements: chains, loops, branch cases, path and new nodes."""

from view_fixtures import make_graph

from terra_nb.views.graph_model import (
    ViewEdge,
    as_graph,
    linear_chains,
    new_since,
    path_nodes,
    plan_view,
)


def test_chain_is_ops_on_one_line_with_single_neighbours(graph):
    assert linear_chains(graph, 3) == [(2, 3, 4, 5)]
    assert linear_chains(graph, 5) == []
    assert linear_chains(graph, 0) == []


def test_open_loop_plan_keeps_body_nodes_and_labels_cases(graph):
    plan = plan_view(graph, collapse_loops=False)
    assert sorted(plan.elements) == ["c2", "n0", "n1", "n10", "n11", "n6", "n7", "n8", "n9"]
    assert plan.key_of[4] == "c2"
    assert ViewEdge("n6", "n7", case=0) in plan.edges
    assert ViewEdge("n6", "n9", case=1) in plan.edges  # into the loop: its body start
    assert ViewEdge("n10", "n1") in plan.edges  # out of the loop: its body end
    assert plan.groups["l8"] == {"kind": "loop", "members": [9, 10, 11], "collapsed": False}
    assert plan.groups["c2"]["collapsed"] is True


def test_collapsed_loop_stands_for_its_body(graph):
    plan = plan_view(graph, collapse_loops=True)
    assert plan.elements["l8"].members == (8, 9, 10, 11)
    assert {plan.key_of[i] for i in (8, 9, 10, 11)} == {"l8"}
    assert ViewEdge("n6", "l8", case=1) in plan.edges
    assert ViewEdge("l8", "n1") in plan.edges
    assert plan.collapsed_loops == frozenset({8})


def test_toggled_flips_the_default_state(graph):
    plan = plan_view(graph, collapse_loops=True, toggled=["l8", "c2"])
    assert "l8" not in plan.elements and "c2" not in plan.elements
    assert plan.key_of[3] == "n3"
    assert plan.groups["c2"]["collapsed"] is False
    assert ViewEdge("n5", "n6") in plan.edges


def test_auto_collapses_only_big_loops(graph):
    assert plan_view(graph).collapsed_loops == frozenset()


def test_path_is_nodes_whose_hits_grew_plus_region_ends(graph):
    before = [n.hits for n in graph.nodes]
    after = list(before)
    for i in (2, 3, 4, 5, 6, 8, 11):  # an iteration that took case 1
        after[i] += 1
    assert path_nodes(graph, before, after) == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    assert path_nodes(graph, before, before) == []


def test_new_nodes_are_ids_past_a_prefix_graph(graph):
    first = as_graph(graph.to_json())
    smaller = type(first)(nodes=first.nodes[:7], edges=())
    assert new_since(graph, smaller) == [7, 8, 9, 10, 11]
    assert new_since(graph, None) == []
    assert new_since(smaller, graph) == []
    assert new_since(graph, type(first)(nodes=first.nodes[:2], edges=())) == []  # no op yet


def test_as_graph_accepts_json_text_and_dict(graph):
    import json

    assert as_graph(graph.to_json()) == graph
    assert as_graph(json.loads(graph.to_json())) == make_graph()
