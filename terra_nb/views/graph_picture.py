"""A TraceGraph picture: view plan -> DOT -> SVG (Graphviz, or the built-in layout without it),
plus the JSON the widgets' details panel reads. Pure data in, strings out."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace

from ..trace.dot import Listing, cell_names, source_lines  # noqa: F401 - re-exported for views
from ..trace.tracegraph import TraceGraph
from .fallback_layout import fallback_svg
from .graph_dot import LayoutUnavailable, marks_for, render_svg, view_dot
from .graph_model import plan_view


@dataclass(frozen=True, slots=True)
class GraphPicture:
    """``svg``: the drawing; ``dot``: its DOT text; ``message``: why the built-in layout was
    used, or ""; ``groups``: collapsible groups (``c<id>``/``l<id>`` -> kind, members, state)."""

    svg: str
    dot: str
    message: str
    groups: dict[str, dict]
    elements: dict[str, list[int]]


def draw_graph(
    g: TraceGraph,
    *,
    current: Iterable[int] = (),
    new: Iterable[int] = (),
    toggled: Iterable[str] = (),
    min_chain: int = 3,
    collapse_loops: bool | str = "auto",
    bake: bool = True,
) -> GraphPicture:
    """Lay out ``g``, its cells named as the front end names them (``In [3]:6``). With ``bake``
    the current path and new nodes are drawn into the SVG (static output); the widgets pass
    ``bake=False`` and mark them in the browser."""
    g = named_cells(g, cell_names())
    plan = plan_view(g, min_chain=min_chain, collapse_loops=collapse_loops, toggled=toggled)
    current, new = (tuple(current), tuple(new)) if bake else ((), ())
    dot = view_dot(g, plan, current=current, new=new, legend=bake)
    message = ""
    try:
        svg = render_svg(dot)
    except LayoutUnavailable as err:
        message = f"{err}. Showing a simple built-in layout instead."
        svg = fallback_svg(g, plan, marks_for(plan, current, new), note=message if bake else "")
    elements = {k: list(el.members) for k, el in plan.elements.items()}
    return GraphPicture(svg, dot, message, plan.groups, elements)


def named_cells(g: TraceGraph, cells: dict[str, str]) -> TraceGraph:
    """``g`` with each location's file named by ``cells`` (``<terra-cell-ab12>:6`` -> ``In [3]:6``);
    only drawings use it: the exported graph keeps the file names."""
    listing = Listing(cells=cells)
    if not cells:
        return g
    nodes = tuple(replace(n, location=listing.where(n.location)) for n in g.nodes)
    branches = tuple(replace(b, location=listing.where(b.location)) for b in g.branches)
    return replace(g, nodes=nodes, branches=branches)


def graph_payload(g: TraceGraph, picture: GraphPicture, sources: dict[str, str]) -> str:
    """The JSON a widget's details panel reads: the TraceGraph JSON plus the drawn elements,
    collapsible groups and user source lines."""
    data = json.loads(g.to_json())
    data["elements"] = picture.elements
    data["groups"] = picture.groups
    data["source_lines"] = sources
    data["cells"] = cell_names()
    return json.dumps(data)
