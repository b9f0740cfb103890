"""Printing a TraceGraph: a jaxpr-like text listing and Graphviz DOT. Pure functions of the data.

Display names (``%3``) are positions in the printed order, assigned here and never stored.
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass, field

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


def to_text(g: TraceGraph, listing: Listing | None = None) -> str:
    """One line per node, loops indented, successors after ``->``, like a jaxpr. With a
    ``listing`` (what a person reads, e.g. ``%terra graph`` in a terminal): locations named
    as the front end names them (``In [3]:6``), branch successors as ``case k:%n``, the
    source line after each op and a legend of the marks."""
    names = _names(g)
    cases = set(g.branch_points) if listing else set()
    loops = len(g.nodes_of("loop"))
    lines = [
        f"TraceGraph({len(g.nodes)} nodes, {loops} loops, {len(g.branch_points)} branch points)"
    ]
    where = listing.where if listing else (lambda loc: loc)
    said = [""]  # the source line shown last: ops of one line share it

    def walk(parent: int, indent: str) -> None:
        for n in g.region(parent):
            succ = [
                (f"case {i}:" if n.id in cases else "") + names[s]
                for i, s in enumerate(g.successors(n.id))
            ]
            tail = f" -> {' '.join(succ)}" if succ else ""
            if n.kind == "loop":
                trips = ",".join(map(str, n.trip_counts))
                lines.append(f"{indent}{names[n.id]} = loop @{where(n.location)} "
                              f"trips={{{trips}}}{tail}")
                walk(n.id, indent + "    ")
            elif n.kind == "op":
                outs = ",".join(str(s) for s in n.outputs) or "()"
                fetch = " fetch" if n.fetches else ""
                lines.append(
                    f"{indent}{names[n.id]}:{outs} = {n.op_type} {_inputs_text(n, names)}"
                    f"  @{where(n.location)}{fetch}{tail}"
                )
                text = listing.sources.get(n.location, "").strip() if listing else ""
                if text and n.location != said[0]:
                    lines.append(f"{indent}      # {text}")
                    said[0] = n.location
            else:
                lines.append(f"{indent}{names[n.id]} = {n.kind}{tail}")

    walk(-1, "  ")
    if listing:
        lines.append(LEGEND)
    return "\n".join(lines)


LEGEND = (
    "  feed:KIND an input Python feeds · fetch: Python reads this output ·"
    " var:NAME a variable\n  {a|b} inputs seen on different paths · prev%n the previous loop"
    " trip's value · case k:%n the k-th branch of a branch point · # the source line"
)


@dataclass(frozen=True)
class Listing:
    """What a readable listing adds: ``sources`` (location -> source line text) and ``cells``
    (file name -> the front end's name for it, e.g. ``In [3]``)."""

    sources: dict[str, str] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, g: TraceGraph) -> Listing:
        """The source lines of ``g``'s locations and the running IPython's cell names."""
        return cls(source_lines(g), cell_names())

    def where(self, location: str) -> str:
        """``<file>:6`` with the file named as the front end names it: ``In [3]:6``."""
        name, sep, line = location.rpartition(":")
        return f"{self.cells[name]}{sep}{line}" if name in self.cells else location


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


def source_lines(g: TraceGraph, known: dict[str, str] | None = None) -> dict[str, str]:
    """The user source line of every ``file:line`` location in ``g`` that can be found (in
    ``linecache``, which holds notebook cells, or under the loaded modules and the working
    directory). ``known`` lines are reused, not looked up again."""
    out = dict(known or {})
    wanted = {n.location for n in g.nodes if n.location} - out.keys()
    if not wanted:
        return out
    paths = _paths_by_name()
    for loc in wanted:
        name, _, line = loc.rpartition(":")
        if not line.isdigit():
            continue
        for path in paths.get(name, [name]):
            text = linecache.getline(path, int(line))
            if text:
                out[loc] = text.rstrip()
                break
    return out


def _paths_by_name() -> dict[str, list[str]]:
    paths: dict[str, list[str]] = {}
    files = list(linecache.cache)
    files += [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
    for f in files:
        if f and not f.startswith("<"):
            paths.setdefault(os.path.basename(f), []).append(f)
    return paths


def cell_names() -> dict[str, str]:
    """The running IPython's name of each cell file (``In [3]``, as its tracebacks say); {}
    outside IPython. IPython keeps the map on its compiler (``format_code_name`` reads it)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    numbers = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
    names = {name: f"In [{number}]" for name, number in numbers.items()}
    # locations name a file by its base name (ipykernel's cells are /tmp/ipykernel_1/123.py)
    return {**{os.path.basename(name): label for name, label in names.items()}, **names}
