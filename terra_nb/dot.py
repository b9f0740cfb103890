"""Printing a TraceGraph: a jaxpr-like text listing and Graphviz DOT. Pure functions of the data.

Display names (``%3``) are positions in the printed order, assigned here and never stored.
"""

from __future__ import annotations

from .trace import Source
from .tracegraph import TraceGraph, TraceNode


def _names(g: TraceGraph) -> dict[int, str]:
    order: list[int] = []

    def walk(parent: int) -> None:
        for n in g.region(parent):
            order.append(n.id)
            if n.kind == "loop":
                walk(n.id)

    walk(-1)
    return {node_id: f"%{i}" for i, node_id in enumerate(order)}


def _source_text(s: Source, names: dict[int, str]) -> str:
    if s.kind == "node":
        return names[s.index] + (f".{s.output}" if s.output else "")
    if s.kind == "carry":
        return "prev" + names[s.index] + (f".{s.output}" if s.output else "")
    return f"{s.kind}:{s.detail}"


def _inputs_text(n: TraceNode, names: dict[int, str]) -> str:
    parts = []
    for seen in n.sources:
        texts = [_source_text(s, names) for s in seen]
        parts.append(texts[0] if len(texts) == 1 else "{" + "|".join(texts) + "}")
    return " ".join(parts)


def to_text(g: TraceGraph) -> str:
    """One line per node, loops indented, successors after ``->``, like a jaxpr."""
    names = _names(g)
    loops = len(g.nodes_of("loop"))
    lines = [
        f"TraceGraph({len(g.nodes)} nodes, {loops} loops, {len(g.branch_points)} branch points)"
    ]

    def walk(parent: int, indent: str) -> None:
        for n in g.region(parent):
            succ = " ".join(names[s] for s in g.successors(n.id))
            tail = f" -> {succ}" if succ else ""
            if n.kind == "loop":
                trips = ",".join(map(str, n.trip_counts))
                lines.append(f"{indent}{names[n.id]} = loop @{n.location} trips={{{trips}}}{tail}")
                walk(n.id, indent + "    ")
            elif n.kind == "op":
                outs = ",".join(str(s) for s in n.outputs) or "()"
                fetch = " fetch" if n.fetches else ""
                lines.append(
                    f"{indent}{names[n.id]}:{outs} = {n.op_type} {_inputs_text(n, names)}"
                    f"  @{n.location}{fetch}{tail}"
                )
            else:
                lines.append(f"{indent}{names[n.id]} = {n.kind}{tail}")

    walk(-1, "  ")
    return "\n".join(lines)


def _quote(text: str) -> str:
    """A DOT string: backslashes and quotes escaped, line breaks as DOT's ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _node_dot(n: TraceNode, branch: bool) -> str:
    classes = [f"terra-{n.kind}"]
    if n.kind == "op":
        label = n.op_type + (f"\n{n.location}" if n.location else "")
        shape, style = "box", "rounded"
        if n.feeds:
            classes.append("terra-feed")
            label = "▶ " + label
        if n.fetches:
            classes.append("terra-fetch")
            label = label + " ▶"
            style += ",bold"
    else:
        label = n.kind
        shape, style = ("circle" if n.kind == "start" else "doublecircle"), "solid"
    if branch:
        classes.append("terra-branch")
        shape = "diamond" if n.kind != "op" else "hexagon"
    return (
        f"n{n.id} [id=n{n.id} label={_quote(label)} shape={shape} style={_quote(style)}"
        f" class={_quote(' '.join(classes))}];"
    )


def to_dot(g: TraceGraph) -> str:
    """DOT text: loops as clusters (labelled with trip counts), branch points as hexagons,
    feed inputs marked ▶ before the name, fetched outputs ▶ after it; SVG classes ``terra-*``."""
    branches = set(g.branch_points)
    lines = ["digraph TraceGraph {", "  rankdir=TB;", '  node [fontname="Helvetica" fontsize=10];']

    def emit(parent: int, indent: str) -> None:
        for n in g.region(parent):
            if n.kind == "loop":
                trips = ",".join(map(str, n.trip_counts))
                lines.append(f"{indent}subgraph cluster_{n.id} {{")
                lines.append(f'{indent}  id="loop{n.id}"; class="terra-loop";')
                lines.append(f"{indent}  label={_quote(f'loop @{n.location} trips {trips}')};")
                emit(n.id, indent + "  ")
                lines.append(f"{indent}}}")
            else:
                lines.append(indent + _node_dot(n, n.id in branches))

    emit(-1, "  ")
    for a, b in g.edges:
        lines.append(f"  {_endpoint(g, a, 1)} -> {_endpoint(g, b, 0)};")
    lines.append("}")
    return "\n".join(lines)


def _endpoint(g: TraceGraph, node_id: int, side: int) -> str:
    """Edges to a loop enter its body start; edges from it leave its body end."""
    n = g.nodes[node_id]
    while n.kind == "loop":
        n = g.nodes[n.body[side]]
    return f"n{n.id}"
