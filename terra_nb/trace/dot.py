"""Printing a TraceGraph: a jaxpr-like text listing and Graphviz DOT (built with the ``graphviz``
package, imported only when DOT is built). Pure functions of the data.

Display names (``%3``) are positions in the printed order, assigned here and never stored.
"""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .records import Source
from .tracegraph import TraceGraph, TraceNode

if TYPE_CHECKING:
    import graphviz


def _names(g: TraceGraph) -> dict[int, str]:
    order: list[int] = []

    def walk(parent: int) -> None:
        for n in g.region(parent):
            order.append(n.id)
            if n.kind == "loop":
                walk(n.id)

    walk(-1)
    return {node_id: f"%{i}" for i, node_id in enumerate(order)}


def _source_text(g: TraceGraph, s: Source, names: dict[int, str]) -> str:
    if s.kind == "node":
        return names[s.index] + (f".{s.output}" if s.output else "")
    if s.kind == "carry":
        return "prev" + names[s.index] + (f".{s.output}" if s.output else "")
    if s.kind == "var":
        return f"var:{g.variable_name(s.detail)}"
    return f"{s.kind}:{s.detail}"


def _inputs_text(g: TraceGraph, n: TraceNode, names: dict[int, str]) -> str:
    parts = []
    for seen in n.sources:
        texts = [_source_text(g, s, names) for s in seen]
        parts.append(texts[0] if len(texts) == 1 else "{" + "|".join(texts) + "}")
    return " ".join(parts)


def to_text(g: TraceGraph, listing: Listing | None = None) -> str:
    """One line per node, loops indented, successors after ``->``, like a jaxpr. With a
    ``listing`` (what a person reads, e.g. ``%terra graph`` in a terminal): locations named
    as the front end names them (``In [3]:6``), branch successors by their way (``true:%n``
    after a Python ``if``, named with its line; ``compiled:%n`` for a region's variants;
    ``case k:%n`` when nothing says), the source line after each op and a legend."""
    names = _names(g)
    loops = len(g.nodes_of("loop"))
    lines = [
        f"TraceGraph({len(g.nodes)} nodes, {loops} loops, {len(g.branch_points)} branch points)"
    ]
    where = listing.where if listing else (lambda loc: loc)
    ways = _ways(g, where) if listing else {}
    said = [""]  # the source line shown last: ops of one line share it

    def walk(parent: int, indent: str) -> None:
        for n in g.region(parent):
            labels, why = ways.get(n.id, ((), ""))
            succ = [(f"{labels[i]}:" if labels else "") + names[s]
                    for i, s in enumerate(g.successors(n.id))]
            tail = f" -> {' '.join(succ)}{why}" if succ else ""
            if n.kind == "loop":
                trips = ",".join(map(str, n.trip_counts))
                lines.append(f"{indent}{names[n.id]} = loop @{where(n.location)} "
                              f"trips={{{trips}}}{tail}")
                walk(n.id, indent + "    ")
            elif n.kind == "op":
                outs = ",".join(str(s) for s in n.outputs) or "()"
                fetch = " fetch" if n.fetches else ""
                lines.append(
                    f"{indent}{names[n.id]}:{outs} = {op_text(g, n)} {_inputs_text(g, n, names)}"
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
        lines.append(LEGEND + (REGION_LEGEND if g.region_calls else ""))
    return "\n".join(lines)


def _ways(g: TraceGraph, where: Callable[[str], str]) -> dict[int, tuple[list[str], str]]:
    """Branch point -> the label of each successor, and what chose (a Python ``if`` with its
    line, a region's or a line's variants); ``case k`` where no branch site says."""
    out = {b: ([f"case {i}" for i in range(len(g.successors(b)))], "") for b in g.branch_points}
    for site in g.branches:
        if site.kind == "op":
            continue
        why = (f"  ({site.text} @{where(site.location)})" if site.text
               else f"  ({site.kind} variants @{where(site.location)})")
        for b, s, label in site.arms:
            out[b][0][g.successors(b).index(s)] = label
            out[b] = (out[b][0], why)
    return out


LEGEND = (
    "  feed:KIND an input Python feeds · fetch: Python reads this output ·"
    " var:NAME a variable\n  {a|b} inputs seen on different paths · prev%n the previous loop"
    " trip's value · true:%n false:%n the ways of a Python if (its line after them) ·"
    " compiled:%n op by op:%n a region's variants · case k:%n a branch nothing explains ·"
    " # the source line"
)
REGION_LEGEND = "\n  region[...] a call of a region's compiled function (terra.regions lists them)"


def op_text(g: TraceGraph, n: TraceNode) -> str:
    """An op node's name in a listing: its op type, or for a region's function call
    ``region[model(x): Sequential · 9 ops]`` instead of the function's generated name."""
    call = g.region_call(n)
    return f"region[{call.label}]" if call is not None else n.op_type


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
        """``<file>:6`` (and anything after it, such as a fallback's source text) with the file
        named as the front end names it: ``In [3]:6``. File names hold no ``:``."""
        name, sep, rest = location.partition(":")
        return f"{self.cells[name]}{sep}{rest}" if sep and name in self.cells else location


@dataclass(frozen=True)
class DotItem:
    """What stands for one TraceGraph node in a drawing: the DOT node ``name`` with ``attrs``;
    with ``cluster``, a loop drawn open: subgraph ``name`` (``attrs`` its own) holding its body,
    and ``inner`` nodes ``(name, attrs)`` that stand for no TraceGraph node (an open region's
    op types); each of ``rows`` names inner nodes kept on one rank, left to right; ``extra``
    nodes ``(name, attrs)`` are drawn next to it, in its region (a user's case node after its
    branch point)."""

    name: str
    attrs: dict[str, str]
    cluster: bool = False
    inner: tuple[tuple[str, dict[str, str]], ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    extra: tuple[tuple[str, dict[str, str]], ...] = ()


def plain_item(g: TraceGraph, n: TraceNode) -> DotItem:
    """The export's item for ``n``: loops as clusters labelled with their trip counts, branch
    points as hexagons, feed inputs marked ▶ before the name, fetched outputs ▶ after it."""
    if n.kind == "loop":
        attrs = {"id": f"loop{n.id}", "class": "terra-loop", "label": dot_label(loop_text(n))}
        return DotItem(f"cluster_{n.id}", attrs, cluster=True)
    classes = [f"terra-{n.kind}"]
    if n.kind == "op":
        title = ("▶ " if n.feeds else "") + op_text(g, n) + (" ▶" if n.fetches else "")
        label = dot_label(title, n.location) if n.location else dot_label(title)
        shape, style = "box", "rounded,bold" if n.fetches else "rounded"
        if n.feeds:
            classes.append("terra-feed")
        if n.fetches:
            classes.append("terra-fetch")
    else:
        label = dot_label(n.kind)
        shape, style = ("circle" if n.kind == "start" else "doublecircle"), "solid"
    if len(g.successors(n.id)) > 1:
        classes.append("terra-branch")
        shape = "hexagon" if n.kind == "op" else "diamond"
    attrs = {"label": label, "id": f"n{n.id}", "shape": shape, "style": style}
    return DotItem(f"n{n.id}", {**attrs, "class": " ".join(classes)})


def plain_edges(g: TraceGraph) -> list[tuple[str, str, dict[str, str]]]:
    """The export's edges: ``(tail, head, attrs)``, loops entered and left through their body."""
    return [(f"n{endpoint(g, a, 1)}", f"n{endpoint(g, b, 0)}", {}) for a, b in g.edges]


@dataclass(frozen=True)
class DotStyle:
    """The options of ``to_dot``: what a drawing changes in the plain export. ``item(g, n)`` is
    the item standing for node ``n``, or None when another item draws it (a collapsed chain's
    later ops, a collapsed loop's body); ``edges(g)`` lists ``(tail, head, attrs)``; ``graph``,
    ``node`` and ``edge`` are the default attributes."""

    item: Callable[[TraceGraph, TraceNode], DotItem | None] = plain_item
    edges: Callable[[TraceGraph], Iterable[tuple[str, str, dict[str, str]]]] = plain_edges
    graph: dict[str, str] = field(default_factory=lambda: {"rankdir": "TB"})
    node: dict[str, str] = field(default_factory=lambda: {"fontname": "Helvetica",
                                                          "fontsize": "10"})
    edge: dict[str, str] = field(default_factory=dict)


def to_digraph(g: TraceGraph, style: DotStyle | None = None) -> graphviz.Digraph:
    """``g`` as a ``graphviz.Digraph``: every node as ``style`` draws it (the plain export by
    default), loops as clusters, SVG ids ``n<id>`` and classes ``terra-*``. The one DOT builder:
    the graph views pass their styling as ``style``."""
    gv = _graphviz()
    style = style or DotStyle()
    dot = gv.Digraph("TraceGraph", graph_attr=style.graph, node_attr=style.node,
                     edge_attr=style.edge)
    _add_region(dot, g, -1, style)
    for tail, head, attrs in style.edges(g):
        dot.edge(tail, head, **attrs)
    return dot


def to_dot(g: TraceGraph, style: DotStyle | None = None) -> str:
    """The DOT text of ``to_digraph(g, style)``."""
    return to_digraph(g, style).source


def _add_region(dot: graphviz.Digraph, g: TraceGraph, parent: int, style: DotStyle) -> None:
    for n in g.region(parent):
        item = style.item(g, n)
        if item is None:
            continue
        if item.cluster:
            with dot.subgraph(name=item.name) as sub:
                sub.attr("graph", **item.attrs)
                _add_region(sub, g, n.id, style)
                for name, attrs in item.inner:
                    sub.node(name, **attrs)
                for row in item.rows:
                    with sub.subgraph() as same:
                        same.attr(rank="same")
                        for a, b in zip(row, row[1:]):
                            same.edge(a, b, style="invis")
        else:
            dot.node(item.name, **item.attrs)
        for name, attrs in item.extra:
            dot.node(name, **attrs)


def dot_label(*lines: str) -> str:
    """Text for a DOT attribute: backslashes and ``<...>`` literal (never an HTML-like label),
    ``lines`` joined by DOT's ``\\n`` line break."""
    gv = _graphviz()
    return gv.nohtml("\\n".join(gv.escape(s.replace("\n", " ")) for s in lines))


def loop_text(n: TraceNode) -> str:
    """A loop node's caption: where it is and its trip counts."""
    return f"loop @{n.location} trips {','.join(map(str, n.trip_counts)) or '-'}"


def endpoint(g: TraceGraph, node_id: int, side: int) -> int:
    """Edges to a loop enter its body start (side 0); edges from it leave its body end (1)."""
    n = g.nodes[node_id]
    while n.kind == "loop":
        n = g.nodes[n.body[side]]
    return n.id


def _graphviz():
    """The ``graphviz`` package, imported when DOT is first built (the data layer needs none)."""
    try:
        import graphviz
    except ImportError as err:
        raise ImportError("building DOT needs the graphviz package: pip install graphviz") from err
    return graphviz


def source_lines(g: TraceGraph, known: dict[str, str] | None = None) -> dict[str, str]:
    """The user source line of every ``file:line`` location in ``g`` that can be found (in
    ``linecache``, which holds notebook cells, or under the loaded modules and the working
    directory). ``known`` lines are reused, not looked up again."""
    out = dict(known or {})
    wanted = ({n.location for n in g.nodes if n.location}
              | {b.location for b in g.branches if b.location}) - out.keys()
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
