"""The graph view draws the user's program (issue 40): one case node per Python ``if`` at its
line, between the branch points it caused and their successors; a region's versions and the
ops it replaced as variant edges (never a case, never a hexagon); region versions with labels
that differ; variables by name in the data the widget reads."""

import json

from branch_fixtures import sited_graph

from terra_nb.views.fallback_layout import fallback_svg
from terra_nb.views.graph_dot import marks_for, render_svg, view_dot
from terra_nb.views.graph_model import ViewEdge, plan_view
from terra_nb.views.graph_picture import draw_graph, graph_payload


def test_the_if_is_one_case_element_between_its_branch_point_and_its_ways():
    g = sited_graph()
    plan = plan_view(g)
    (case,) = plan.cases
    assert plan.elements[case].kind == "case" and plan.cases[case][1] == (5,)
    assert ViewEdge("n5", case) in plan.edges
    assert ViewEdge(case, "n6", 0, "true") in plan.edges
    assert ViewEdge(case, "n1", 1, "false") in plan.edges
    assert not plan.hexagons  # every branch point is explained


def test_a_region_and_its_replaced_ops_are_variant_edges():
    plan = plan_view(sited_graph())
    variants = {(e.dst, e.label) for e in plan.edges if e.variant}
    assert variants == {("n2", "op by op"), ("r3", "compiled"), ("r4", "compiled")}
    assert all(e.case < 0 for e in plan.edges if e.src == "n0")


def test_the_drawing_has_one_case_node_at_the_if_line_and_distinct_region_labels(needs_dot):
    g = sited_graph()
    plan = plan_view(g)
    svg = render_svg(view_dot(g, plan)).replace("&#45;", "-")
    assert svg.count('class="node terra-case-node terra-user-case terra-branch') == 1
    assert "if float(loss) &gt; 4.0:" in svg and ">cell:6<" in svg
    assert "model(x): Sequential · 1 op · f32[8,4]" in svg
    assert "model(x): Sequential · 1 op · f32[16,4]" in svg
    assert "terra-variant" in svg and ">compiled<" in svg and ">op by op<" in svg
    assert "terra-branch" not in svg.replace("terra-user-case terra-branch", "")


def test_the_built_in_layout_draws_the_case_node_too():
    g = sited_graph()
    plan = plan_view(g)
    svg = fallback_svg(g, plan, marks_for(plan))
    assert svg.count('class="node terra-case-node terra-user-case terra-branch') == 1
    assert "if float(loss) &gt; 4.0:" in svg and ">true<" in svg and ">false<" in svg


def test_the_current_path_runs_through_the_case_node():
    g = sited_graph()
    plan = plan_view(g)
    (case,) = plan.cases
    assert "terra-current" in marks_for(plan, current=[0, 3, 5, 6, 1])[case]
    assert "terra-current" not in marks_for(plan, current=[0, 3, 5]).get(case, [])


def test_the_widget_data_carries_sites_variable_names_and_labels():
    g = sited_graph()
    picture = draw_graph(g, bake=False)
    data = json.loads(graph_payload(g, picture, {}))
    (case,) = [b for b in data["branches"] if b["kind"] == "if"]
    assert case["location"] == "cell:6" and case["text"] == "if float(loss) > 4.0:"
    assert data["variables"] == {"v3": "dense/kernel"}
    assert data["variant_labels"] == {"3": "model(x): Sequential · 1 op · f32[8,4]",
                                      "4": "model(x): Sequential · 1 op · f32[16,4]"}
    key = f"u{data['branches'].index(case)}"
    assert data["elements"][key] == []
