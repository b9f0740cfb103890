"""What a graph view draws: TraceGraph nodes grouped into single nodes, collapsed chains and
collapsed loops, with the edges and branch cases between them. Pure functions of frozen data.

A *chain* is a run of at least ``min_chain`` ops on one source line, each with exactly one
predecessor and one successor and no fetch (fetches stay visible: Python stalls there). A loop
node is collapsed into one box by default when its body holds more than ``LOOP_AUTO`` nodes.
A *region* node (one call of a region's compiled function, named by the graph's
``region_calls``) is its own element, collapsed by default; open, it shows the op types the
region runs (``region_ops``). ``toggled`` holds element keys (``c<id>``, ``l<id>``, ``r<id>``)
whose default state the user flipped.

Branch points are drawn as the graph's ``branches`` say (``trace/branches.py``): a user's ``if``
is one *case* element ``u<k>`` (the k-th site) at the ``if``'s line, between the branch points
it caused and their successors, its edges labelled ``true``/``false``; a region's variants and
one line's spec variants are plain edges labelled by what they lead to (``compiled``, ``op by
op``, a spec), never a case. A branch point no site explains is drawn as before: a hexagon with
edges ``case 0``, ``case 1``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..trace.branches import variant_labels
from ..trace.dot import endpoint
from ..trace.tracegraph import BranchSite, TraceGraph, TraceNode

LOOP_AUTO = 30


@dataclass(frozen=True, slots=True)
class Element:
    """One drawn item. ``key`` is its SVG id: ``n<id>`` a node, ``c<id>`` a chain starting at
    node ``<id>``, ``l<id>`` a collapsed loop node (standing for its whole body), ``r<id>`` a
    region call node (``cluster_r<id>`` when open)."""

    key: str
    kind: str  # node | chain | loop | region | case (``u<k>``: stands for no node)
    members: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ViewEdge:
    src: str
    dst: str
    case: int = -1  # >= 0: the case-th way of a branch (a user case's arm, a branch point's)
    label: str = ""  # a case arm's (true, false) or a variant's (compiled, f32[8,4]); "": case k
    variant: bool = False  # one of a statement's variants (a region's, other specs)


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """Elements by key, the element key of every node, edges, and the groups (chains and loops,
    collapsed or open) the user can toggle; ``cases``: case key -> (its site, the visible
    branch points it follows); ``hexagons``: branch points no site explains; ``labels``: the
    labels of region versions that share a call's label."""

    elements: dict[str, Element]
    key_of: dict[int, str]
    edges: tuple[ViewEdge, ...]
    groups: dict[str, dict]
    collapsed_loops: frozenset[int]
    open_regions: frozenset[int] = frozenset()
    cases: dict[str, tuple[BranchSite, tuple[int, ...]]] = field(default_factory=dict)
    hexagons: frozenset[int] = frozenset()
    labels: dict[int, str] = field(default_factory=dict)  # region node -> its variant's label


def as_graph(graph: TraceGraph | str | dict) -> TraceGraph:
    """Accept a TraceGraph, its JSON text, or the parsed JSON."""
    if isinstance(graph, TraceGraph):
        return graph
    if isinstance(graph, dict):
        graph = json.dumps(graph)
    return TraceGraph.from_json(graph)


def descendants(g: TraceGraph) -> dict[int, list[int]]:
    """For every loop node, the ids of all nodes nested inside it (at any depth)."""
    out: dict[int, list[int]] = {n.id: [] for n in g.nodes_of("loop")}
    for n in g.nodes:
        p = n.parent
        while p != -1:
            out[p].append(n.id)
            p = g.nodes[p].parent
    return out


def plan_view(
    g: TraceGraph,
    *,
    min_chain: int = 3,
    collapse_loops: bool | str = "auto",
    toggled: Iterable[str] = (),
) -> ViewPlan:
    """Group the graph's nodes into drawn elements (see the module docstring)."""
    toggled = set(toggled)
    inside = descendants(g)
    collapsed = frozenset(
        lid
        for lid, body in inside.items()
        if _default_loop(collapse_loops, len(body)) != (f"l{lid}" in toggled)
    )
    groups: dict[str, dict] = {
        f"l{lid}": {"kind": "loop", "members": body, "collapsed": lid in collapsed}
        for lid, body in inside.items()
    }
    key_of: dict[int, str] = {}
    elements: dict[str, Element] = {}
    for lid in _outermost(g, collapsed):
        members = (lid, *inside[lid])
        elements[f"l{lid}"] = Element(f"l{lid}", "loop", members)
        key_of.update({m: f"l{lid}" for m in members})
    open_regions = _regions(g, toggled, key_of, elements, groups)
    for chain in linear_chains(g, min_chain):
        if any(m in key_of for m in chain):
            continue
        key = f"c{chain[0]}"
        shut = key not in toggled
        groups[key] = {"kind": "chain", "members": list(chain), "collapsed": shut}
        if shut:
            elements[key] = Element(key, "chain", chain)
            key_of.update({m: key for m in chain})
    for n in g.nodes:
        if n.id not in key_of:
            key_of[n.id] = f"n{n.id}"
            elements[f"n{n.id}"] = Element(f"n{n.id}", "node", (n.id,))
    cases = _cases(g, key_of)
    elements.update({key: Element(key, "case", ()) for key in cases})
    edges = _edges(g, key_of, cases)
    return ViewPlan(elements, key_of, edges, groups, collapsed, open_regions, cases,
                    hexagons(g), variant_labels(g))


def hexagons(g: TraceGraph) -> frozenset[int]:
    """Branch points no branch site explains (all of them in a graph without sites)."""
    explained = {b for site in g.branches if site.kind != "op" for b in site.nodes}
    return frozenset(b for b in g.branch_points if b not in explained)


def _cases(g: TraceGraph, key_of: dict[int, str]) -> dict[str, tuple[BranchSite, tuple]]:
    """Case key ``u<k>`` -> (the k-th site, a user ``if``; its branch points not inside a
    collapsed loop), for the sites with any such branch point."""
    out = {}
    for k, site in enumerate(g.branches):
        shown = tuple(b for b in site.nodes if key_of[b][0] != "l")
        if site.kind == "if" and shown:
            out[f"u{k}"] = (site, shown)
    return out


def _regions(g: TraceGraph, toggled: set[str], key_of: dict[int, str],
             elements: dict[str, Element], groups: dict[str, dict]) -> frozenset[int]:
    """Region call nodes (outside collapsed loops) as ``r<id>`` elements, collapsed unless
    toggled; the ids of the open ones."""
    opened = set()
    for n in g.nodes:
        if n.id in key_of or g.region_call(n) is None:
            continue
        key = f"r{n.id}"
        shut = key not in toggled
        groups[key] = {"kind": "region", "members": [n.id], "collapsed": shut}
        elements[key] = Element(key, "region", (n.id,))
        key_of[n.id] = key
        if not shut:
            opened.add(n.id)
    return frozenset(opened)


def region_ops(g: TraceGraph, node_id: int) -> tuple[str, ...]:
    """The op types the region call at ``node_id`` runs (what an open region shows)."""
    call = g.region_call(g.nodes[node_id])
    return call.ops if call is not None else ()


def _default_loop(policy: bool | str, body_size: int) -> bool:
    if policy == "auto":
        return body_size > LOOP_AUTO
    return bool(policy)


def _outermost(g: TraceGraph, collapsed: frozenset[int]) -> list[int]:
    """Collapsed loops that are not inside another collapsed loop."""
    out = []
    for lid in sorted(collapsed):
        p = g.nodes[lid].parent
        while p != -1 and p not in collapsed:
            p = g.nodes[p].parent
        if p == -1:
            out.append(lid)
    return out


def _chainable(g: TraceGraph, n: TraceNode) -> bool:
    return (
        n.kind == "op"
        and g.region_call(n) is None
        and not n.fetches
        and len(g.predecessors(n.id)) == 1
        and len(g.successors(n.id)) == 1
    )


def linear_chains(g: TraceGraph, min_chain: int) -> list[tuple[int, ...]]:
    """Maximal runs of chainable ops on one source line, at least ``min_chain`` long."""
    if min_chain < 2:
        return []
    taken: set[int] = set()
    chains = []
    for n in g.nodes:
        if n.id in taken or not _chainable(g, n):
            continue
        prev = g.nodes[g.predecessors(n.id)[0]]
        if _chainable(g, prev) and prev.location == n.location:
            continue  # not the head of its run: the head collects it
        run = [n.id]
        while True:
            nxt = g.nodes[g.successors(run[-1])[0]]
            if not (_chainable(g, nxt) and nxt.location == n.location) or nxt.id in taken:
                break
            run.append(nxt.id)
        taken.update(run)
        if len(run) >= min_chain:
            chains.append(tuple(run))
    return chains


def _edges(g: TraceGraph, key_of: dict[int, str],
           cases: dict[str, tuple[BranchSite, tuple]]) -> tuple[ViewEdge, ...]:
    """The drawn edges: through a case element for a user's branch, labelled for variants,
    ``case k`` at a branch point no site explains."""
    ways = {}  # (branch point, successor) -> (case key or "", arm number, label)
    for k, site in enumerate(g.branches):
        key = f"u{k}" if f"u{k}" in cases else ""
        labels = list(dict.fromkeys(label for _, _, label in site.arms))
        for b, s, label in site.arms:
            if site.kind != "op":
                ways[(b, s)] = (key, labels.index(label), label)
    unexplained = hexagons(g)
    seen: dict[tuple[str, str], ViewEdge] = {}
    for a, b in g.edges:
        src, dst = key_of[endpoint(g, a, 1)], key_of[endpoint(g, b, 0)]
        way = ways.get((a, b))
        if way is not None and way[0]:
            ends = [ViewEdge(src, way[0]), ViewEdge(way[0], dst, way[1], way[2])]
        elif way is not None:
            ends = [ViewEdge(src, dst, label=way[2], variant=True)]
        elif a in unexplained:
            ends = [ViewEdge(src, dst, g.successors(a).index(b))]  # drawn ``case k``
        else:
            ends = [ViewEdge(src, dst)]
        for e in ends:
            if e.src != e.dst and (e.src, e.dst) not in seen:
                seen[(e.src, e.dst)] = e
    return tuple(seen.values())


def path_nodes(g: TraceGraph, before: Iterable[int], after: Iterable[int]) -> list[int]:
    """Nodes run between two snapshots of the same loop's graph: those whose ``hits`` grew (or
    that are new), plus the start/end nodes of the regions they are in."""
    before = list(before)
    hit = [
        i for i, h in enumerate(after) if i >= len(before) or h > before[i]
    ]
    regions = {g.nodes[i].parent for i in hit if i < len(g.nodes)}
    ends = [n.id for n in g.nodes if n.kind in ("start", "end") and n.parent in regions]
    if hit:
        ends += [n.id for n in g.nodes if n.kind in ("start", "end") and n.parent == -1]
    return sorted(set(hit) | set(ends))


def new_since(g: TraceGraph, earlier: TraceGraph | None) -> list[int]:
    """Node ids added since ``earlier``, when ``earlier`` is a prefix of ``g`` (a graph of the
    same loop: ids only grow); otherwise, or when ``earlier`` held no op yet (everything would
    be new), nothing is marked new."""
    if earlier is None or len(earlier.nodes) > len(g.nodes) or not earlier.nodes_of("op"):
        return []
    same = all(
        (a.kind, a.op_type, a.location) == (b.kind, b.op_type, b.location)
        for a, b in zip(earlier.nodes, g.nodes)
    )
    return list(range(len(earlier.nodes), len(g.nodes))) if same else []
