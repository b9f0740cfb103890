"""GraphBuilder: merges traces into a TraceGraph (the only code that mutates graph data).

Merging follows the paper: each op is matched against the successors of the last matched node by
its key (op type, attrs, location, input and output specs). On a mismatch the trace branches off;
a later op that matches an existing node of the same region (that is not an ancestor, which would
close a cycle) merges the branch back there. A loop run is matched to the loop node of the same
loop site, and each of its iterations is merged into the loop's body region.

A merge costs time linear in the trace's ops and the graph's size, however long the trace: the
nodes that reach the current node (its ancestors) are kept as a set that only grows along the
trace's path, found once by a backward walk when first needed; and per key, the candidates known
to be ancestors are skipped for good. (A depth-first search from every candidate made one long
iteration of repeated ops, a ``fit`` traced whole, cost cubic time: 40 s for 2,345 ops.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .records import LoopRun, Source, Trace, TraceOp, segment
from .tracegraph import TraceGraph, TraceNode


class _Ancestry:
    """One merge of a block: the nodes that reach its current node (None until first asked),
    and per (parent, key) how many leading candidates are known to be among them."""

    __slots__ = ("nodes", "skip")

    def __init__(self) -> None:
        self.nodes: set[int] | None = None
        self.skip: dict[tuple, int] = {}


@dataclass(slots=True)
class _Node:
    id: int
    kind: str
    key: tuple = ()
    parent: int = -1
    op: TraceOp | None = None  # first op merged here (type, attrs, specs, location)
    loop: int = -1
    location: str = ""
    body: tuple[int, ...] = ()
    sources: list[set[Source]] = field(default_factory=list)
    fetches: set[int] = field(default_factory=set)
    trip_counts: set[int] = field(default_factory=set)
    hits: int = 0


class GraphBuilder:
    """Accumulates traces. ``merge`` reports whether the trace was already covered."""

    def __init__(self, loop_location: Callable[[int], str] = str) -> None:
        self._nodes: list[_Node] = []
        self._succ: dict[int, list[int]] = {}
        self._pred: dict[int, list[int]] = {}
        self._by_key: dict[tuple, list[int]] = {}
        self._previous: dict[int, int] = {}  # op index of the last trace -> node id
        self._changed = False
        self._graph: TraceGraph | None = None
        self.loop_location = loop_location
        self.start = self._new("start").id
        self.end = self._new("end").id
        self.traces = 0

    def merge(self, trace: Trace) -> bool:
        """Merge one iteration's trace; True when the graph already held all of it."""
        self._changed = False
        mapping: dict[int, int] = {}
        self._merge_block(segment(trace.ops), self.start, self.end, -1, mapping)
        self._previous = mapping
        self.traces += 1
        if self._changed:
            self._graph = None
        return not self._changed

    @property
    def last_mapping(self) -> dict[int, int]:
        """Op index of the last merged trace -> its node id."""
        return self._previous

    def finish(self) -> TraceGraph:
        """The frozen TraceGraph of everything merged so far."""
        if self._graph is None:
            self._graph = TraceGraph(
                nodes=tuple(_freeze(n) for n in self._nodes),
                edges=tuple((a, b) for a in sorted(self._succ) for b in self._succ[a]),
            )
        return self._graph

    # -- merging ----------------------------------------------------------------------------

    def _merge_block(
        self, items, start: int, end: int, parent: int, mapping: dict[int, int]
    ) -> None:
        current = start
        ancestry = _Ancestry()
        for item in items:
            if isinstance(item, TraceOp):
                node = self._step(current, ("op", *item.key), parent, item, ancestry)
            else:
                node = self._step(current, ("loop", item.loop), parent, item, ancestry)
            if ancestry.nodes is not None:  # the node's ancestors reach what follows it
                self._collect_ancestors(node.id, ancestry.nodes)
            if isinstance(item, TraceOp):
                self._absorb_op(node, item, mapping)
            else:
                self._absorb_loop(node, item, mapping)
            current = node.id
        self._link(current, end)

    def _step(self, current: int, key: tuple, parent: int, item, ancestry: _Ancestry) -> _Node:
        for child in self._succ[current]:
            if self._nodes[child].key == key:
                return self._nodes[child]
        found = self._first_not_reaching(current, (parent, key), ancestry)
        node = self._nodes[found] if found is not None else self._new_item(key, parent, item)
        self._link(current, node.id)
        return node

    def _first_not_reaching(self, current: int, pkey: tuple, ancestry: _Ancestry) -> int | None:
        """The oldest node of ``pkey`` that does not reach ``current`` (None: every one does,
        or there is none). A candidate found reaching it reaches every later current node of
        this block, so it is skipped for good."""
        candidates = self._by_key.get(pkey)
        if not candidates:
            return None
        if ancestry.nodes is None:
            ancestry.nodes = set()
            self._collect_ancestors(current, ancestry.nodes)
        ancestors = ancestry.nodes
        i = ancestry.skip.get(pkey, 0)
        while i < len(candidates) and candidates[i] in ancestors:
            i += 1
        ancestry.skip[pkey] = i
        return candidates[i] if i < len(candidates) else None

    def _collect_ancestors(self, node: int, into: set[int]) -> None:
        """Add ``node`` and every node reaching it to ``into``; a node already there has its
        ancestors there too, so the walk stops at it (each node is walked once per block)."""
        stack = [node]
        pred = self._pred
        while stack:
            n = stack.pop()
            if n not in into:
                into.add(n)
                stack.extend(pred[n])

    def _new_item(self, key: tuple, parent: int, item) -> _Node:
        if isinstance(item, LoopRun):
            node = self._new("loop", key, parent, loop=item.loop)
            node.location = self.loop_location(item.loop)
            start, end = self._new("start", parent=node.id), self._new("end", parent=node.id)
            node.body = (start.id, end.id)
        else:
            node = self._new("op", key, parent, op=item, location=item.location)
            node.sources = [set() for _ in item.inputs]
        self._by_key.setdefault((parent, key), []).append(node.id)
        return node

    def _absorb_op(self, node: _Node, op: TraceOp, mapping: dict[int, int]) -> None:
        node.hits += 1
        mapping[op.index] = node.id
        for seen, source in zip(node.sources, op.inputs):
            graph_source = self._graph_source(source, mapping)
            if graph_source not in seen:
                seen.add(graph_source)
                self._changed = True
        if not node.fetches.issuperset(op.fetched):
            node.fetches.update(op.fetched)
            self._changed = True

    def _absorb_loop(self, node: _Node, run: LoopRun, mapping: dict[int, int]) -> None:
        node.hits += 1
        trips = len(run.iterations)
        if trips not in node.trip_counts:
            node.trip_counts.add(trips)
            self._changed = True
        start, end = node.body
        for block in run.iterations:
            self._merge_block(block, start, end, node.id, mapping)

    def _graph_source(self, source: Source, mapping: dict[int, int]) -> Source:
        if source.kind == "op":
            return Source("node", mapping[source.index], source.output)
        if source.kind == "carry":
            node = self._previous.get(source.index)
            if node is None:
                return Source("feed", detail="tensor")
            return Source("carry", node, source.output)
        return source

    # -- structure --------------------------------------------------------------------------

    def _new(self, kind: str, key: tuple = (), parent: int = -1, **fields) -> _Node:
        node = _Node(id=len(self._nodes), kind=kind, key=key, parent=parent, **fields)
        self._nodes.append(node)
        self._succ[node.id] = []
        self._pred[node.id] = []
        self._changed = True
        return node

    def _link(self, a: int, b: int) -> None:
        if b not in self._succ[a]:
            self._succ[a].append(b)
            self._pred[b].append(a)
            self._changed = True


def _freeze(n: _Node) -> TraceNode:
    op = n.op
    return TraceNode(
        id=n.id,
        kind=n.kind,
        op_type=op.op_type if op else "",
        location=n.location,
        loc=op.loc if op else -1,
        attrs=op.attrs if op else (),
        input_specs=op.input_specs if op else (),
        outputs=op.outputs if op else (),
        sources=tuple(tuple(sorted(s, key=_source_order)) for s in n.sources),
        fetches=tuple(sorted(n.fetches)),
        parent=n.parent,
        loop=n.loop,
        body=n.body,
        trip_counts=tuple(sorted(n.trip_counts)),
        hits=n.hits,
        device=op.device if op else "",
    )


def _source_order(s: Source) -> tuple:
    return (s.kind, s.index, s.output, s.detail)
