"""How the graph view draws a region call node (one call of a region's compiled function, named
by the TraceGraph's ``region_calls``): collapsed, one box ``[+] model(x): Sequential · 9 ops``;
open, a cluster ``cluster_r<id>`` holding the op types the region runs (``r<id>_<k>``), in
columns of ``COLUMN`` read top to bottom, left to right (the column heads share a rank, in
order). Edges to an open region enter its first op and leave its last. Pure functions of the
graph and the view plan.
"""

from __future__ import annotations

from ..trace.dot import DotItem, dot_label
from ..trace.tracegraph import RegionCall, TraceGraph, TraceNode
from .graph_model import ViewPlan, hexagons, region_ops

COLUMN = 16  # op types per column of an open region
COLORS = {  # kind -> (fill, border)
    "forward": ("#e6fcf5", "#0ca678"),
    "backward": ("#edf2ff", "#4263eb"),
    "guard": ("#f8f9fa", "#868e96"),
}
KIND_TEXT = {"forward": "forward function", "backward": "backward function (on the tape)",
             "guard": "branch guard"}


def region_title(call: RegionCall, n: TraceNode, opened: bool, label: str | None = None) -> str:
    """The region's caption: ``[+]`` (collapsed) or ``[−]`` (open), feed and fetch marks;
    ``label``: its variant's label, when versions of the call share ``call.label``."""
    return (("[−] " if opened else "[+] ") + ("▶ " if n.feeds else "") + (label or call.label)
            + (" ▶" if n.fetches else ""))


def region_tooltip(call: RegionCall, label: str | None = None) -> str:
    """Its name, kind, source line and the first op types, for a hover title."""
    lines = [label or call.label, f"{call.name}: {KIND_TEXT.get(call.kind, call.kind)}",
             call.source]
    lines += [f"{k}: {op}" for k, op in enumerate(call.ops[:30])]
    lines += [f"… {len(call.ops) - 30} more"] if len(call.ops) > 30 else []
    return dot_label("&#10;".join(x.replace("&", "&amp;") for x in lines))


def region_item(g: TraceGraph, n: TraceNode, key: str, opened: bool, marks: list[str],
                variant: str | None = None) -> DotItem:
    """The drawn item of region call node ``n`` (element ``key``): a box, or an open cluster;
    ``variant``: its label among the call's versions."""
    call = g.region_call(n)
    fill, border = COLORS.get(call.kind, COLORS["guard"])
    classes = ["terra-op", "terra-region", f"terra-region-{call.kind}", *marks]
    classes += (["terra-feed"] if n.feeds else []) + (["terra-fetch"] if n.fetches else [])
    if n.id in hexagons(g):
        classes.append("terra-branch")
    label = dot_label(region_title(call, n, opened, variant), n.location)
    tooltip = region_tooltip(call, variant)
    if not opened:
        return DotItem(key, {
            "label": label, "id": key, "shape": "box", "style": "rounded,filled,bold",
            "fillcolor": fill, "color": border, "penwidth": "1.6", "margin": "0.12,0.06",
            "tooltip": tooltip, "class": " ".join([*classes, "terra-collapsed"]),
        })
    attrs = {"id": f"cluster_{key}", "label": label, "style": "rounded,filled", "fillcolor": fill,
             "color": border, "penwidth": "1.6", "labeljust": "l", "labelloc": "t",
             "tooltip": tooltip, "class": " ".join(classes)}
    inner = tuple((f"{key}_{k}", {
        "label": dot_label(op), "id": f"{key}_{k}", "shape": "box", "style": "rounded,filled",
        "fillcolor": "#ffffff", "color": border, "fontsize": "9", "height": "0.22",
        "tooltip": dot_label(f"{k}: {op} (in {call.label})"), "class": "terra-region-op",
    }) for k, op in enumerate(call.ops or ("(no ops)",)))
    heads = tuple(name for k, (name, _) in enumerate(inner) if k % COLUMN == 0)
    return DotItem(f"cluster_{key}", attrs, cluster=True, inner=inner,
                   rows=(heads,) if len(heads) > 1 else ())


def region_ports(g: TraceGraph, plan: ViewPlan) -> dict[str, tuple[str, str]]:
    """Open region key -> (the DOT node edges enter, the DOT node edges leave)."""
    ports = {}
    for node_id in plan.open_regions:
        key, count = f"r{node_id}", max(len(region_ops(g, node_id)), 1)
        ports[key] = (f"{key}_0", f"{key}_{count - 1}")
    return ports


def region_edges(g: TraceGraph, plan: ViewPlan) -> list[tuple[str, str, dict[str, str]]]:
    """The edges between an open region's op types: down a column, then (dotted, not ranking)
    to the top of the next column."""
    out = []
    for node_id in sorted(plan.open_regions):
        key, count = f"r{node_id}", len(region_ops(g, node_id))
        color = COLORS.get(g.region_call(g.nodes[node_id]).kind, COLORS["guard"])[1]
        for k in range(1, count):
            attrs = {"color": color, "arrowsize": "0.4", "class": "terra-region-edge",
                     "id": f"e_{key}_{k}"}
            if k % COLUMN == 0:  # faint: it only says where reading goes on
                attrs.update(constraint="false", style="dotted", color=color + "80")
            out.append((f"{key}_{k - 1}", f"{key}_{k}", attrs))
    return out
