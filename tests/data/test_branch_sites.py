"""The graph's branch points as the user's program has them (``trace/branches.py``): one case
site per Python ``if`` at its line, however many paths reach it; a region's versions and the
ops it replaced as its variants, with labels that differ; a loop's per-shape paths as variants,
not a branch; variables by their names. Plain data, no TensorFlow."""

import json
import re
from dataclasses import replace

import pytest
from branch_fixtures import (
    CALLS,
    CELL,
    FORWARD,
    FORWARD_16,
    X8,
    H,
    W,
    branching_graph,
    op,
    sited_graph,
)

from terra_nb.errors import GraphError
from terra_nb.trace.branches import branch_sites, variant_labels
from terra_nb.trace.dot import Listing, to_text
from terra_nb.trace.records import TensorSpec
from terra_nb.trace.tracegraph import BranchSite, TraceGraph, TraceNode, check_graph


def test_an_if_reached_by_every_path_is_one_site_at_its_line():
    g = branching_graph()
    sites = branch_sites(g, {"cell": CELL})
    (user,) = [s for s in sites if s.kind == "if"]
    assert user == BranchSite("if", "cell:6", "if float(loss) > 4.0:",
                              ((5, 6, "true"), (5, 1, "false")))


def test_a_region_and_the_ops_it_replaced_are_its_variants_not_a_branch():
    sites = branch_sites(branching_graph(), {"cell": CELL})
    (region,) = [s for s in sites if s.kind == "region"]
    assert region.location == "cell:4" and region.nodes == (0,)
    assert [label for _, _, label in region.arms] == ["op by op", "compiled", "compiled"]
    assert {s.kind for s in sites} == {"if", "region"}


def test_two_paths_to_one_if_make_one_site():
    """The traced path and the region's path each reach the ``if``: one site, two points."""
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"), op(2, "MatMul", 4),
             op(3, FORWARD, 4), op(4, "Mean", 4), op(5, "Mean", 4, specs=(W,)), op(6, "Mul", 7))
    edges = ((0, 2), (0, 3), (2, 4), (3, 5), (4, 6), (4, 1), (5, 6), (5, 1), (6, 1))
    g = TraceGraph(nodes, edges, CALLS[:1])
    (user,) = [s for s in branch_sites(g, {"cell": CELL}) if s.kind == "if"]
    assert user.nodes == (4, 5) and user.location == "cell:6"


def test_a_loop_over_parameters_of_other_shapes_is_a_loop_not_a_case():
    """``for p, g in zip(params, grads)``: each trip's ops have other shapes, so the loop's
    body parts at its start; the same line decided nothing, so no case."""
    a, b, c = TensorSpec("float32", (4, 8)), TensorSpec("float32", (8,)), TensorSpec("float32",
                                                                                     (8, 1))
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"),
             TraceNode(2, "loop", location="cell:8", body=(3, 4), trip_counts=(3,), hits=2),
             TraceNode(3, "start", parent=2), TraceNode(4, "end", parent=2),
             op(5, "Mul", 9, parent=2, specs=(a,)), op(6, "Mul", 9, parent=2, specs=(b,)),
             op(7, "Mul", 9, parent=2, specs=(c,)))
    edges = ((0, 2), (2, 1), (3, 5), (3, 6), (3, 7), (5, 4), (6, 4), (7, 4))
    g = TraceGraph(nodes, edges)
    check_graph(g)
    (site,) = branch_sites(g, {"cell": CELL})
    assert site.kind == "specs" and site.location == "cell:9"
    assert [label for _, _, label in site.arms] == ["f32[4,8]", "f32[8]", "f32[8,1]"]


def test_a_branch_in_the_loop_frame_is_found_through_helper_frames():
    """``if c: helper_a() else: helper_b()``: the ops' innermost frames are the helpers'; the
    loop frame's lines (the stacks' first frames) tell which way the ``if`` went."""
    cell = "for x in data:\n    if c:\n        a(x)\n    else:\n        b(x)\n"
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"), op(2, "Exp", 30), op(3, "Sin", 40))
    g = TraceGraph(nodes, ((0, 2), (0, 3), (2, 1), (3, 1)))
    stacks = {2: (("cell", 3), ("lib.py", 30)), 3: (("cell", 5), ("lib.py", 40))}
    (site,) = branch_sites(g, {"cell": cell}, stacks)
    assert (site.kind, site.location, site.text) == ("if", "cell:2", "if c:")
    assert [label for _, _, label in site.arms] == ["true", "false"]


def test_region_versions_get_labels_that_differ():
    g = branching_graph()
    labels = variant_labels(g)
    assert labels == {3: "model(x): Sequential · 1 op · f32[8,4]",
                      4: "model(x): Sequential · 1 op · f32[16,4]"}


def test_exported_graph_carries_sites_variable_names_and_variant_labels():
    g = sited_graph()
    assert TraceGraph.from_json(g.to_json()) == g
    data = json.loads(g.to_json())
    assert {"kind": "if", "location": "cell:6", "text": "if float(loss) > 4.0:",
            "arms": [[5, 6, "true"], [5, 1, "false"]]} in data["branches"]
    assert data["variables"] == {"v3": "dense/kernel"}
    assert data["variant_labels"]["4"].endswith("f32[16,4]")
    assert "var:dense/kernel" in to_text(g) and "var:v3" not in to_text(g)


def test_check_graph_names_a_site_on_a_missing_edge():
    g = sited_graph()
    bad = BranchSite("if", "cell:6", "if float(loss) > 4.0:", ((5, 2, "true"),))
    with pytest.raises(GraphError, match="branch site cell:6 names edge 5->2"):
        check_graph(replace(g, branches=(*g.branches, bad)))


def test_a_branch_inside_a_library_call_is_that_line_s_variants():
    """Keras's first ``apply_gradients`` builds the optimizer's variables: that iteration ran
    more ops on line 5 than the others, and no Python line of the user's decided it."""
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"), op(2, "MatMul", 5),
             op(3, "VarHandleOp", 5), op(4, "Greater", 6))
    g = TraceGraph(nodes, ((0, 2), (2, 3), (2, 4), (3, 4), (4, 1)))
    (site,) = branch_sites(g, {"cell": CELL})
    assert (site.kind, site.location) == ("library", "cell:5")
    assert [label for _, _, label in site.arms] == ["VarHandleOp", "on to line 6"]
    assert branch_sites(g, {})[0].kind == "op"  # no source: nothing explains it


def test_the_text_listing_names_the_ways_by_the_if_and_the_variants():
    text = to_text(sited_graph(), Listing())
    assert re.search(r"-> true:%\d+ false:%\d+  \(if float\(loss\) > 4\.0: @cell:6\)", text)
    assert re.search(r"-> op by op:%\d+ compiled:%\d+ compiled:%\d+  \(region variants @cell:4\)",
                     text)
    assert "case 0:" not in text


def test_variants_that_differ_only_in_their_outputs_say_so():
    """``Tile`` of one input to a batch of 8 or of 16: the labels name the output specs."""
    def tile(i, rows):
        return TraceNode(i, "op", op_type="Tile", location="cell:4", loc=i, input_specs=(W,),
                         outputs=(TensorSpec("float32", (rows, 1)),), sources=((),), hits=1)

    nodes = (TraceNode(0, "start"), TraceNode(1, "end"), tile(2, 8), tile(3, 16))
    g = TraceGraph(nodes, ((0, 2), (0, 3), (2, 1), (3, 1)))
    (site,) = branch_sites(g, {"cell": CELL})
    assert [label for _, _, label in site.arms] == ["→ f32[8,1]", "→ f32[16,1]"]


def test_a_region_formed_later_on_the_next_line_is_a_region_variant():
    """After one call's region, a later iteration ran another region's call on the same line
    (a tape's, formed later) before the next line's: the region's variants, not a case."""
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"), op(2, "MatMul", 4),
             op(3, FORWARD, 4), op(4, "Greater", 6))
    g = TraceGraph(nodes, ((0, 2), (2, 3), (2, 4), (3, 4), (4, 1)), CALLS[:1])
    (site,) = branch_sites(g, {"cell": CELL})
    assert (site.kind, site.location) == ("region", "cell:4")
    assert [label for _, _, label in site.arms] == ["model(x): Sequential", "on to line 6"]


def test_region_versions_with_the_same_specs_are_numbered():
    """A cell run again that makes its model anew: the call's region forms again, with the same
    specs; the versions are told apart by number."""
    nodes = (TraceNode(0, "start"), TraceNode(1, "end"), op(2, FORWARD, 4, specs=(X8, H)),
             op(3, FORWARD_16, 4, specs=(X8, H)))
    g = TraceGraph(nodes, ((0, 2), (0, 3), (2, 1), (3, 1)), CALLS)
    assert variant_labels(g) == {2: "model(x): Sequential · 1 op · no args #1",
                                 3: "model(x): Sequential · 1 op · no args #2"}
