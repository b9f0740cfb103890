"""The graph view's DOT and SVG: ids, clusters, classes for loop, case, feed, fetch, branch."""

import json

import pytest
from view_fixtures import by_id, classes, parse_svg

from terra_nb.views import graph_dot
from terra_nb.views.graph_model import plan_view
from terra_nb.views.graph_picture import draw_graph, graph_payload, source_lines
from terra_nb.views.static import StaticGraph

needs_dot = pytest.mark.usefixtures("needs_dot")


def test_dot_text_has_clusters_cases_and_classes(graph):
    dot = graph_dot.view_dot(graph, plan_view(graph, collapse_loops=False))
    assert "subgraph cluster_8 {" in dot
    assert 'label="loop @m.py:8 trips 1,2"' in dot
    assert 'n6 -> n7 [label="case 0"' in dot
    assert 'class="terra-edge terra-case terra-case-1"' in dot
    assert 'c2 [label="▶ 4 ops: ReadVariableOp … Relu\\nm.py:3"' in dot


@needs_dot
def test_svg_nodes_clusters_and_classes(graph):
    picture = draw_graph(graph, collapse_loops=False)
    assert picture.message == ""
    ids = by_id(parse_svg(picture.svg))
    assert {"n0", "n1", "c2", "n6", "n7", "n9", "n10", "n11", "cluster_8"} <= ids.keys()
    assert {"cluster", "terra-loop"} <= classes(ids["cluster_8"])
    assert {"node", "terra-op", "terra-fetch", "terra-branch"} <= classes(ids["n6"])
    assert {"terra-op", "terra-feed", "terra-case"} <= classes(ids["n7"])
    assert {"terra-op", "terra-feed"} <= classes(ids["n11"])
    assert {"terra-chain", "terra-collapsed", "terra-feed"} <= classes(ids["c2"])
    assert {"edge", "terra-case", "terra-case-0"} <= classes(ids["e_n6_n7"])
    assert {"terra-case", "terra-case-1"} <= classes(ids["e_n6_n9"])
    texts = " ".join(t.text or "" for t in parse_svg(picture.svg).iter() if t.tag.endswith("text"))
    assert "loop @m.py:8 trips 1,2" in texts and "case 1" in texts


@needs_dot
def test_collapsed_loop_is_one_node_with_trip_counts(graph):
    ids = by_id(parse_svg(draw_graph(graph, collapse_loops=True).svg))
    assert "cluster_8" not in ids and "n11" not in ids
    assert {"terra-loop", "terra-case"} <= classes(ids["l8"])
    title = ids["l8"].find(".//{http://www.w3.org/1999/xlink}a") or ids["l8"]
    assert "trips 1,2" in json.dumps([t.text for t in ids["l8"].iter()] + [str(title.attrib)])


@needs_dot
def test_baked_path_and_new_nodes(graph):
    picture = draw_graph(graph, current=[0, 2, 3, 6, 7], new=[7], collapse_loops=False)
    ids = by_id(parse_svg(picture.svg))
    assert "terra-current" in classes(ids["c2"]) and "terra-current" in classes(ids["n7"])
    assert "terra-new" in classes(ids["n7"]) and "terra-new" not in classes(ids["n6"])
    assert "terra-current" in classes(ids["e_n6_n7"])
    assert "terra-current" not in classes(ids["e_n6_n9"])


@needs_dot
def test_tooltip_names_op_shapes_and_attributes(graph):
    ids = by_id(parse_svg(draw_graph(graph).svg))
    link = next(el for el in ids["n6"].iter() if el.tag.endswith("}a"))
    tip = link.get("{http://www.w3.org/1999/xlink}title")
    assert tip.splitlines() == [
        "Mean @m.py:4", "in: f32[4,8]", "out: f32[]", "fetched outputs: 0", "T = float32"
    ]


def test_without_dot_a_builtin_layout_and_a_message(graph, monkeypatch):
    monkeypatch.setattr(graph_dot.shutil, "which", lambda name: None)
    picture = draw_graph(graph, current=[6], collapse_loops=False)
    assert "Graphviz `dot` was not found" in picture.message
    assert "built-in layout" in picture.message
    root = parse_svg(picture.svg)
    ids = by_id(root)
    assert {"c2", "n6", "n7", "n11", "cluster_8"} <= ids.keys()
    assert {"terra-loop"} <= classes(ids["cluster_8"])
    assert {"terra-fetch", "terra-branch", "terra-current"} <= classes(ids["n6"])
    assert {"terra-case", "terra-case-0"} <= classes(ids["e_n6_n7"])
    bundle = StaticGraph(graph)._repr_mimebundle_()
    assert "Graphviz `dot` was not found" in bundle["image/svg+xml"]  # said in the picture
    assert "image/png" not in bundle  # only Graphviz draws the PNG


def test_payload_carries_elements_groups_and_source_lines(graph, tmp_path, monkeypatch):
    (tmp_path / "m.py").write_text("a\nb\nh = layer(x)\nloss = h.mean()\n")
    monkeypatch.chdir(tmp_path)
    sources = source_lines(graph)
    assert sources["m.py:3"] == "h = layer(x)" and sources["m.py:4"] == "loss = h.mean()"
    data = json.loads(graph_payload(graph, draw_graph(graph), sources))
    assert data["elements"]["c2"] == [2, 3, 4, 5]
    assert data["groups"]["c2"]["kind"] == "chain"
    assert data["nodes"][6]["fetches"] == [0] and data["branch_points"] == [6]
    assert data["source_lines"]["m.py:4"] == "loss = h.mean()"


@needs_dot
def test_static_graph_is_svg_and_png(graph):
    bundle = StaticGraph(graph, current=[0, 2])._repr_mimebundle_()
    html = bundle["image/svg+xml"]
    assert html.startswith("<svg") and bundle["image/png"].startswith(b"\x89PNG")
    assert 'id="cluster_8"' in html and 'id="n11"' in html  # the small loop stays open
    assert 'class="node terra&#45;chain terra&#45;collapsed terra&#45;current' in html


@needs_dot
def test_many_nodes_lay_out(graph):
    from terra_nb.trace.records import Source
    from terra_nb.trace.tracegraph import TraceGraph, TraceNode

    n = 2000
    nodes = [TraceNode(0, "start"), TraceNode(1, "end")]
    nodes += [
        TraceNode(i, "op", op_type="AddV2", location=f"big.py:{i // 7}", loc=i,
                  sources=((Source("node", i - 1),),), hits=1)
        for i in range(2, n)
    ]
    edges = [(0, 2), *((i, i + 1) for i in range(2, n - 1)), (n - 1, 1)]
    big = TraceGraph(nodes=tuple(nodes), edges=tuple(edges))
    picture = draw_graph(big)
    assert len(picture.elements) < n / 3  # chains of one line collapsed
    assert sum(len(m) for m in picture.elements.values()) == n
    assert picture.svg.count('class="node') == len(picture.elements)
