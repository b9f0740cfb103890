"""DOT for the graph view, and its layout by the Graphviz ``dot`` binary.

Built by ``terra_nb.dot.to_dot`` (same ``n<id>`` ids, ``cluster_<id>`` loops, ``terra-*``
classes); what a view adds is passed to it as ``DotStyle`` options: collapsed chains (``c<id>``)
and loops (``l<id>``), branch cases as labelled ``terra-case`` edges, tooltips, colours that
survive without CSS, and optionally the current iteration's path (``terra-current``) and new
nodes (``terra-new``) baked in.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from ..trace.dot import DotItem, DotStyle, dot_label, loop_text, to_dot
from ..trace.tracegraph import BranchSite, TraceGraph, TraceNode
from .graph_model import Element, ViewEdge, ViewPlan
from .graph_regions import region_edges, region_item, region_ports

CASE_COLORS = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599")
INSTALL_HINT = "install Graphviz (apt-get install graphviz / conda install graphviz)"


LEGEND = (
    "▶ op: an input Python feeds · op ▶ (red): an output Python fetches",
    "yellow hexagon node: a Python if at its line, its edges true / false · dashed box: ops on "
    "one line",
    "grey dashed edges compiled / op by op / a spec: a region's or a line's variants, not a "
    "branch · an op as a hexagon: paths part there, no source line says why (case 0, case 1)",
    "purple box: a Python loop inside the iteration (trips: the trip counts seen)",
    "orange: the last iteration's path · yellow: nodes new since the previous picture",
)


REGION_LEGEND = ("green/blue box [+]: one call of a region's forward/backward function "
                 "(open: the op types it runs)")


class LayoutUnavailable(RuntimeError):
    """The Graphviz ``dot`` binary is missing or failed."""


def spec_text(spec) -> str:
    return str(spec)


def node_tooltip(n: TraceNode) -> str:
    """Op type, location, shapes, feeds/fetches and attributes, for a hover title."""
    if n.kind != "op":
        return f"{n.kind} #{n.id}"
    lines = [f"{n.op_type} @{n.location}"]
    lines.append("in: " + (", ".join(map(spec_text, n.input_specs)) or "-"))
    lines.append("out: " + (", ".join(map(spec_text, n.outputs)) or "-"))
    if n.feeds:
        lines.append("feed inputs: " + ", ".join(map(str, n.feeds)))
    if n.fetches:
        lines.append("fetched outputs: " + ", ".join(map(str, n.fetches)))
    lines += [f"{k} = {v}" for k, v in n.attrs[:12]]
    return _tooltip(lines)


def _tooltip(lines: Iterable[str]) -> str:
    """A hover title: lines joined by an SVG line break entity, ``&`` escaped."""
    return dot_label("&#10;".join(x.replace("&", "&amp;") for x in lines))


def _node_attrs(g: TraceGraph, n: TraceNode, extra: list[str],
                hexagons: frozenset[int]) -> dict[str, str]:
    classes = [f"terra-{n.kind}", *extra]
    if n.kind != "op":
        attrs = {"label": dot_label(n.kind[0].upper()), "width": "0.3", "fixedsize": "true",
                 "shape": "circle" if n.kind == "start" else "doublecircle", "style": "filled",
                 "fillcolor": "#dee2e6", "color": "#868e96"}
    else:
        title = ("▶ " if n.feeds else "") + n.op_type + (" ▶" if n.fetches else "")
        attrs = {"label": dot_label(title, n.location), "shape": "box",
                 "style": "rounded,filled", "fillcolor": "#f8f9fa", "color": "#495057"}
        if n.feeds:
            classes.append("terra-feed")
            attrs["fillcolor"] = "#e7f5ff"
        if n.fetches:
            classes.append("terra-fetch")
            attrs.update(color="#c92a2a", style="rounded,filled,bold", fillcolor="#fff5f5")
    if n.id in hexagons:
        classes.append("terra-branch")
        attrs.update(shape="hexagon" if n.kind == "op" else "diamond", fillcolor="#fff3bf")
    attrs.update(id=f"n{n.id}", tooltip=node_tooltip(n), **{"class": " ".join(classes)})
    return attrs


def case_attrs(key: str, site: BranchSite, branch_points: int, extra: list[str]) -> dict:
    """A user's case node: the statement and its line, as a yellow hexagon."""
    arms = sorted({label for _, _, label in site.arms})
    tip = [f"{site.text}  @{site.location}", "a Python branch: its ways " + " / ".join(arms),
           f"{branch_points} branch point(s) of the TraceGraph (one per path reaching it)"]
    return {"label": dot_label(site.text or "if", site.location), "id": key, "shape": "hexagon",
            "style": "filled,bold", "fillcolor": "#fff3bf", "color": "#f08c00",
            "tooltip": _tooltip(tip),
            "class": " ".join(["terra-case-node", "terra-user-case", "terra-branch", *extra])}


def _chain_attrs(g: TraceGraph, el: Element, extra: list[str]) -> dict[str, str]:
    ops = [g.nodes[m] for m in el.members]
    feeds = sum(1 for n in ops if n.feeds)
    classes = ["terra-chain", "terra-collapsed", *extra] + (["terra-feed"] if feeds else [])
    head = f"{len(ops)} ops: {ops[0].op_type} … {ops[-1].op_type}"
    tip = _tooltip(f"{n.op_type}: {', '.join(map(spec_text, n.outputs))}" for n in ops[:40])
    return {"label": dot_label(("▶ " if feeds else "") + head, ops[0].location), "id": el.key,
            "shape": "box", "style": "rounded,filled,dashed", "fillcolor": "#f1f3f5",
            "color": "#495057", "tooltip": tip, "class": " ".join(classes)}


def _collapsed_loop_attrs(g: TraceGraph, el: Element, extra: list[str]) -> dict[str, str]:
    n = g.nodes[el.members[0]]
    ops = sum(1 for m in el.members if g.nodes[m].kind == "op")
    return {"label": dot_label(loop_text(n), f"{ops} ops (collapsed)"), "id": el.key,
            "shape": "box3d", "style": "filled", "fillcolor": "#f3f0ff", "color": "#7048e8",
            "tooltip": dot_label(f"{loop_text(n)}: {ops} ops"),
            "class": " ".join(["terra-loop", *extra])}


def _cluster_attrs(n: TraceNode, marks: list[str]) -> dict[str, str]:
    current = "terra-current" in marks
    return {"id": f"cluster_{n.id}", "label": dot_label(loop_text(n)), "style": "rounded,filled",
            "fillcolor": "#f8f7ff", "color": "#e8590c" if current else "#7048e8",
            "penwidth": "2" if current else "1", "class": " ".join(["terra-loop", *marks])}


def _baked(classes: list[str]) -> dict[str, str]:
    """Colours for baked-in highlights, so a static SVG shows them without CSS."""
    style = {}
    if "terra-new" in classes:
        style["fillcolor"] = "#ffec99"
    if "terra-current" in classes:
        style.update(color="#e8590c", penwidth="2.5")
    return style


@dataclass(frozen=True)
class _ViewItems:
    """``DotStyle.item`` for a view plan: one item per drawn element, at its first node."""

    plan: ViewPlan
    marks: dict[str, list[str]]

    def __call__(self, g: TraceGraph, n: TraceNode) -> DotItem | None:
        el = self.plan.elements.get(self.plan.key_of[n.id])
        if el is None or el.members[0] != n.id:
            return None  # drawn by the chain it belongs to
        extra = self.marks.get(el.key, [])
        cases = tuple((key, {**case_attrs(key, site, len(shown), self.marks.get(key, [])),
                             **_baked(self.marks.get(key, []))})
                      for key, (site, shown) in self.plan.cases.items() if shown[0] == n.id)
        if el.kind == "region":
            item = region_item(g, n, el.key, n.id in self.plan.open_regions, extra,
                               self.plan.labels.get(n.id))
            return DotItem(item.name, {**item.attrs, **_baked(extra)}, item.cluster, item.inner,
                           item.rows, cases)
        if el.kind == "node" and n.kind == "loop":
            return DotItem(f"cluster_{n.id}", _cluster_attrs(n, extra), cluster=True, extra=cases)
        if el.kind == "chain":
            attrs = _chain_attrs(g, el, extra)
        elif el.kind == "loop":
            attrs = _collapsed_loop_attrs(g, el, extra)
        else:
            attrs = _node_attrs(g, n, extra, self.plan.hexagons)
        return DotItem(el.key, {**attrs, **_baked(extra)}, extra=cases)


def view_dot(
    g: TraceGraph,
    plan: ViewPlan,
    *,
    current: Iterable[int] = (),
    new: Iterable[int] = (),
    legend: bool = False,
) -> str:
    """DOT for ``plan`` (``terra_nb.dot.to_dot`` with the view's style); ``current`` and ``new``
    node ids are baked in as classes and colours (the live widgets leave them out and toggle the
    classes in the browser instead); with ``legend`` the marks are explained under the graph (a
    static picture has no legend box)."""
    marks = marks_for(plan, current, new)
    ports = region_ports(g, plan)
    lines = LEGEND + ((REGION_LEGEND,) if g.region_calls else ())
    caption = {"label": dot_label(*lines), "labeljust": "l", "labelloc": "b"} if legend else {}
    style = DotStyle(
        item=_ViewItems(plan, marks),
        edges=lambda _g: [_edge(e, marks, ports) for e in plan.edges] + region_edges(g, plan),
        graph={"rankdir": "TB", "nodesep": "0.25", "ranksep": "0.3", "fontname": "Helvetica",
               "fontsize": "10", **caption},
        node={"fontname": "Helvetica", "fontsize": "10", "height": "0.3"},
        edge={"color": "#868e96", "arrowsize": "0.6", "fontname": "Helvetica", "fontsize": "9"},
    )
    return to_dot(g, style)


def marks_for(
    plan: ViewPlan, current: Iterable[int] = (), new: Iterable[int] = ()
) -> dict[str, list[str]]:
    """Extra classes per element key: the current path, new nodes, and branch-case heads."""
    marks: dict[str, list[str]] = {}
    current = set(current)
    on_path = {key for key, (site, _) in plan.cases.items()
               if any(b in current and s in current for b, s, _ in site.arms)}
    for cls, ids in (("terra-current", current), ("terra-new", new)):
        keys = {plan.key_of[i] for i in ids if i in plan.key_of}
        for key in keys | (on_path if cls == "terra-current" else set()):
            marks.setdefault(key, []).append(cls)
    for e in plan.edges:
        if e.case >= 0 and "terra-case" not in marks.get(e.dst, []):
            marks.setdefault(e.dst, []).append("terra-case")
    return marks


def _edge(e: ViewEdge, marks: dict[str, list[str]],
          ports: dict[str, tuple[str, str]]) -> tuple[str, str, dict[str, str]]:
    """The DOT edge of ``e`` (an open region is entered at its first op, left at its last)."""
    classes = ["terra-edge"]
    attrs: dict[str, str] = {}
    if e.case >= 0:
        color = CASE_COLORS[e.case % len(CASE_COLORS)]
        classes += ["terra-case", f"terra-case-{e.case}"]
        attrs.update(label=e.label or f"case {e.case}", color=color, fontcolor=color,
                     penwidth="1.6")
    elif e.variant:
        classes.append("terra-variant")
        attrs.update(label=e.label, style="dashed", fontcolor="#868e96")
    on_path = "terra-current" in marks.get(e.src, []) and "terra-current" in marks.get(e.dst, [])
    if on_path:
        classes.append("terra-current")
        attrs.update(color="#e8590c", penwidth="2.2")
    attrs.update(id=f"e_{e.src}_{e.dst}", **{"class": " ".join(classes)})
    return ports.get(e.src, ("", e.src))[1], ports.get(e.dst, (e.dst, ""))[0], attrs


def dot_available() -> bool:
    return shutil.which("dot") is not None


def render_svg(dot_text: str, timeout: float = 120.0) -> str:
    """Lay out ``dot_text`` with Graphviz; the ``<svg>`` element (no XML prolog)."""
    svg = render(dot_text, "svg", timeout).decode()
    return svg[svg.index("<svg"):]


def render(dot_text: str, fmt: str, timeout: float = 120.0) -> bytes:
    """``dot_text`` laid out by Graphviz as ``fmt`` (svg, png)."""
    binary = shutil.which("dot")
    if binary is None:
        raise LayoutUnavailable(f"Graphviz `dot` was not found on PATH; {INSTALL_HINT}")
    try:
        done = subprocess.run(
            [binary, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise LayoutUnavailable(f"Graphviz `dot` took more than {timeout:.0f} s") from None
    if done.returncode != 0:
        raise LayoutUnavailable("Graphviz `dot` failed: " + done.stderr.decode()[-500:])
    return done.stdout
