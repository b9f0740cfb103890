"""DOT for the graph view, and its layout by the Graphviz ``dot`` binary.

Like ``terra_nb.dot.to_dot`` (same ``n<id>`` ids, ``cluster_<id>`` loops, ``terra-*`` classes),
plus what a view needs: collapsed chains (``c<id>``) and loops (``l<id>``), branch cases as
labelled ``terra-case`` edges, tooltips, colours that survive without CSS, and optionally the
current iteration's path (``terra-current``) and new nodes (``terra-new``) baked in.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable

from ..tracegraph import TraceGraph, TraceNode
from .graph_model import Element, ViewPlan

CASE_COLORS = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599")
INSTALL_HINT = "install Graphviz (apt-get install graphviz / conda install graphviz)"


LEGEND = (
    "▶ op: an input Python feeds · op ▶ (red): an output Python fetches",
    "hexagon: branch point, its edges case 0, case 1 ... · dashed box: ops on one line",
    "purple box: a Python loop inside the iteration (trips: the trip counts seen)",
    "orange: the last iteration's path · yellow: nodes new since the previous picture",
)


class LayoutUnavailable(RuntimeError):
    """The Graphviz ``dot`` binary is missing or failed."""


def dot_string(*lines: str) -> str:
    """A quoted DOT string; ``lines`` are joined by DOT's ``\\n`` line break."""
    parts = [s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") for s in lines]
    return '"' + "\\n".join(parts) + '"'


def _attrs(**attrs: str) -> str:
    return " ".join(f"{k}={dot_string(v)}" for k, v in attrs.items() if v != "")


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
    return "&#10;".join(x.replace("&", "&amp;") for x in lines)


def _node_line(n: TraceNode, branch: bool, extra: list[str]) -> str:
    classes = [f"terra-{n.kind}", *extra]
    if n.kind != "op":
        label = dot_string(n.kind[0].upper())
        shape = "circle" if n.kind == "start" else "doublecircle"
        attrs = {"shape": shape, "width": "0.3", "fixedsize": "true", "style": "filled"}
        attrs.update(fillcolor="#dee2e6", color="#868e96")
    else:
        title = ("▶ " if n.feeds else "") + n.op_type + (" ▶" if n.fetches else "")
        label = dot_string(title, n.location)
        attrs = {"shape": "box", "style": "rounded,filled", "fillcolor": "#f8f9fa"}
        attrs["color"] = "#495057"
        if n.feeds:
            classes.append("terra-feed")
            attrs["fillcolor"] = "#e7f5ff"
        if n.fetches:
            classes.append("terra-fetch")
            attrs.update(color="#c92a2a", style="rounded,filled,bold", fillcolor="#fff5f5")
    if branch:
        classes.append("terra-branch")
        attrs.update(shape="hexagon" if n.kind == "op" else "diamond", fillcolor="#fff3bf")
    attrs.update(id=f"n{n.id}", tooltip=node_tooltip(n), **{"class": " ".join(classes)})
    return f"n{n.id} [label={label} {_attrs(**attrs)}];"


def _chain_line(g: TraceGraph, el: Element, extra: list[str]) -> str:
    ops = [g.nodes[m] for m in el.members]
    feeds = sum(1 for n in ops if n.feeds)
    classes = ["terra-chain", "terra-collapsed", *extra] + (["terra-feed"] if feeds else [])
    head = f"{len(ops)} ops: {ops[0].op_type} … {ops[-1].op_type}"
    label = dot_string(("▶ " if feeds else "") + head, ops[0].location)
    tip = "&#10;".join(f"{n.op_type}: {', '.join(map(spec_text, n.outputs))}" for n in ops[:40])
    attrs = _attrs(
        id=el.key, shape="box", style="rounded,filled,dashed", fillcolor="#f1f3f5",
        color="#495057", tooltip=tip, **{"class": " ".join(classes)},
    )
    return f"{el.key} [label={label} {attrs}];"


def _loop_text(n: TraceNode) -> str:
    return f"loop @{n.location} trips {','.join(map(str, n.trip_counts)) or '-'}"


def _collapsed_loop_line(g: TraceGraph, el: Element, extra: list[str]) -> str:
    n = g.nodes[el.members[0]]
    ops = sum(1 for m in el.members if g.nodes[m].kind == "op")
    label = dot_string(_loop_text(n), f"{ops} ops (collapsed)")
    attrs = _attrs(
        id=el.key, shape="box3d", style="filled", fillcolor="#f3f0ff", color="#7048e8",
        tooltip=f"{_loop_text(n)}: {ops} ops", **{"class": " ".join(["terra-loop", *extra])},
    )
    return f"{el.key} [label={label} {attrs}];"


def view_dot(
    g: TraceGraph,
    plan: ViewPlan,
    *,
    current: Iterable[int] = (),
    new: Iterable[int] = (),
    legend: bool = False,
) -> str:
    """DOT for ``plan``; ``current`` and ``new`` node ids are baked in as classes and colours
    (the live widgets leave them out and toggle the classes in the browser instead); with
    ``legend`` the marks are explained under the graph (a static picture has no legend box)."""
    marks = marks_for(plan, current, new)
    caption = f" label={dot_string(*LEGEND)} labeljust=l labelloc=b" if legend else ""
    lines = [
        "digraph TraceGraph {",
        "  rankdir=TB; nodesep=0.25; ranksep=0.3;",
        f'  graph [fontname="Helvetica" fontsize=10{caption}];',
        '  node [fontname="Helvetica" fontsize=10 height=0.3];',
        '  edge [color="#868e96" arrowsize=0.6 fontname="Helvetica" fontsize=9];',
    ]
    _emit_region(g, plan, -1, "  ", marks, lines)
    _bake(plan, marks, lines)
    lines += ["  " + _edge_line(e, marks) for e in plan.edges]
    lines.append("}")
    return "\n".join(lines)


def marks_for(
    plan: ViewPlan, current: Iterable[int] = (), new: Iterable[int] = ()
) -> dict[str, list[str]]:
    """Extra classes per element key: the current path, new nodes, and branch-case heads."""
    marks: dict[str, list[str]] = {}
    for cls, ids in (("terra-current", current), ("terra-new", new)):
        for key in {plan.key_of[i] for i in ids if i in plan.key_of}:
            marks.setdefault(key, []).append(cls)
    for e in plan.edges:
        if e.case >= 0 and "terra-case" not in marks.get(e.dst, []):
            marks.setdefault(e.dst, []).append("terra-case")
    return marks


def _emit_region(g, plan: ViewPlan, parent: int, indent: str, marks, lines: list[str]) -> None:
    branches = set(g.branch_points)
    for n in g.region(parent):
        el = plan.elements.get(plan.key_of[n.id])
        if el is None or el.members[0] != n.id:
            continue  # drawn by the chain it belongs to
        extra = marks.get(el.key, [])
        if el.kind == "chain":
            lines.append(indent + _chain_line(g, el, extra))
        elif el.kind == "loop":
            lines.append(indent + _collapsed_loop_line(g, el, extra))
        elif n.kind == "loop":
            lines.append(f"{indent}subgraph cluster_{n.id} {{")
            lines.append(indent + "  " + _cluster_attrs(n, extra))
            _emit_region(g, plan, n.id, indent + "  ", marks, lines)
            lines.append(f"{indent}}}")
        else:
            lines.append(indent + _node_line(n, n.id in branches, extra))


def _cluster_attrs(n: TraceNode, marks: list[str]) -> str:
    color = "#e8590c" if "terra-current" in marks else "#7048e8"
    attrs = dict(
        id=f"cluster_{n.id}", label=_loop_text(n), style="rounded,filled", fillcolor="#f8f7ff",
        color=color, penwidth="2" if "terra-current" in marks else "1",
        **{"class": " ".join(["terra-loop", *marks])},
    )
    return " ".join(f"{k}={dot_string(v)};" for k, v in attrs.items())


def _bake(plan: ViewPlan, marks: dict[str, list[str]], lines: list[str]) -> None:
    """Colours for baked-in highlights, so a static SVG shows them without CSS."""
    for key, classes in marks.items():
        style = {}
        if "terra-new" in classes:
            style["fillcolor"] = "#ffec99"
        if "terra-current" in classes:
            style.update(color="#e8590c", penwidth="2.5")
        el = plan.elements.get(key)
        if style and el is not None and not _is_cluster(plan, el):
            lines.append(f"  {key} [{_attrs(**style)}];")


def _is_cluster(plan: ViewPlan, el: Element) -> bool:
    """An open loop node: drawn as a cluster, not as a node."""
    return el.kind == "node" and f"l{el.members[0]}" in plan.groups


def _edge_line(e, marks: dict[str, list[str]]) -> str:
    classes = ["terra-edge"]
    attrs: dict[str, str] = {}
    if e.case >= 0:
        color = CASE_COLORS[e.case % len(CASE_COLORS)]
        classes += ["terra-case", f"terra-case-{e.case}"]
        attrs.update(label=f"case {e.case}", color=color, fontcolor=color, penwidth="1.6")
    on_path = "terra-current" in marks.get(e.src, []) and "terra-current" in marks.get(e.dst, [])
    if on_path:
        classes.append("terra-current")
        attrs.update(color="#e8590c", penwidth="2.2")
    attrs.update(id=f"e_{e.src}_{e.dst}", **{"class": " ".join(classes)})
    return f"{e.src} -> {e.dst} [{_attrs(**attrs)}];"


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
