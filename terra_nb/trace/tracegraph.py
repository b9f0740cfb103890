"""The TraceGraph: the merged traces of many iterations, as plain, printable, inert data.

A DAG from a ``start`` node to an ``end`` node. ``op`` nodes are executed ops; a node with several
successors is a *branch point* (iterations took different paths there); a node with several
predecessors is where branches merge back. A ``loop`` node stands for a user loop: its body is a
region of its own (``body`` = its start and end nodes, whose ``parent`` is the loop node), merged
over every iteration of the loop, with the trip counts seen.

Edges are node ids. Nothing here imports TensorFlow; ``GraphBuilder`` (``merge.py``) makes graphs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..errors import GraphError
from .records import Source, TensorSpec

NODE_KINDS = ("start", "end", "op", "loop")
REGION_KINDS = ("forward", "backward", "guard")
CALL_CHARS = 16  # a longer call expression is labelled by its callee: loss_fn(…)


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One node. ``sources`` holds, per input, every source seen (``node``/``carry``: node ids)."""

    id: int
    kind: str
    op_type: str = ""
    location: str = ""
    loc: int = -1
    attrs: tuple[tuple[str, Any], ...] = ()
    input_specs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    sources: tuple[tuple[Source, ...], ...] = ()
    fetches: tuple[int, ...] = ()
    parent: int = -1
    loop: int = -1
    body: tuple[int, ...] = ()
    trip_counts: tuple[int, ...] = ()
    hits: int = 0
    device: str = ""  # the tf.device scope its op ran in ("": none)

    @property
    def key(self) -> tuple:
        """The key merging matched this node by: a loop's user loop, an op's ``TraceOp.key``."""
        if self.kind == "loop":
            return ("loop", self.loop)
        return (self.kind, self.op_type, self.attrs, self.loc, self.input_specs, self.outputs,
                self.device)

    @property
    def feeds(self) -> tuple[int, ...]:
        """Inputs that Python supplied in some iteration (Input Feeding points)."""
        return tuple(
            i for i, seen in enumerate(self.sources) if any(s.kind == "feed" for s in seen)
        )


@dataclass(frozen=True, slots=True)
class RegionCall:
    """A region's compiled function (DESIGN 5b), called as ONE op whose type is its name
    (``op_type``, e.g. ``__inference_region_Sequential_call_forward_12``). ``name``: the call it
    answers (``Sequential.__call__``); ``kind``: forward, backward (on the gradient tape) or guard
    (its branch check); ``source``: the user's ``file:line  text``; ``call``: the call expression
    there (``model(x)``), or ""; ``ops``: the op types it runs (forward: recorded when the call
    ran eagerly; backward and guard: its function's ops, constants and identities left out)."""

    op_type: str
    name: str
    kind: str
    source: str = ""
    call: str = ""
    ops: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """What a person reads: ``model(x): Sequential · 9 ops``, ``∇ Sequential · 6 ops``,
        ``Adam.apply_gradients · 120 ops``, ``guard Sequential · 3 ops``."""
        cls, _, method = self.name.partition(".")
        if self.kind == "backward":
            head = f"∇ {cls}"
        elif self.kind == "guard":
            head = f"guard {cls}"
        elif method != "__call__":
            head = self.name
        else:
            call = self.call
            if len(call) > CALL_CHARS and "(" in call:
                call = call[:call.index("(")] + "(…)"
            head = f"{call}: {cls}" if call else cls
        return f"{head} · {len(self.ops)} op{'s' * (len(self.ops) != 1)}"

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "source": self.source, "call": self.call,
                "ops": list(self.ops), "label": self.label}


@dataclass(frozen=True, slots=True)
class BranchSite:
    """What the user's program did at some branch points (``branches.py`` says how it is
    found): ``kind`` if (a Python ``if``: one case node), loop (entered or not), region (a
    region's variants), specs (one line's ops with other specs), library (one line ran other
    ops: a library's own branch) or op (unexplained: its source is unknown);
    ``location``: the statement's ``file:line`` (variants: the line's); ``text``: its first
    line; ``arms``: ``(branch point, successor, label)`` per diverging edge."""

    kind: str
    location: str
    text: str
    arms: tuple[tuple[int, int, str], ...]

    @property
    def nodes(self) -> tuple[int, ...]:
        """The branch points it stands for, in order."""
        return tuple(dict.fromkeys(b for b, _, _ in self.arms))

    def to_dict(self) -> dict:
        """Its JSON form (``TraceGraph.from_json`` reads it back)."""
        return {"kind": self.kind, "location": self.location, "text": self.text,
                "arms": [list(a) for a in self.arms]}


@dataclass(frozen=True)  # no slots: the adjacency maps below are cached on the instance
class TraceGraph:
    """Nodes (indexed by id) and edges ``(src, dst)``. Node 0 is start, node 1 is end.
    ``branches``: what the user's program did at the branch points; ``variables``: variable
    key (a ``var`` source's detail) -> its Keras or TensorFlow name."""

    nodes: tuple[TraceNode, ...]
    edges: tuple[tuple[int, int], ...]
    region_calls: tuple[RegionCall, ...] = ()  # the region function ops among the nodes
    branches: tuple[BranchSite, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()

    # -- queries ----------------------------------------------------------------------------

    @cached_property
    def _succ(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for a, b in self.edges:
            out[a].append(b)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def _pred(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for a, b in self.edges:
            out[b].append(a)
        return {k: tuple(v) for k, v in out.items()}

    def successors(self, node: int) -> tuple[int, ...]:
        return self._succ[node]

    def predecessors(self, node: int) -> tuple[int, ...]:
        return self._pred[node]

    @property
    def branch_points(self) -> tuple[int, ...]:
        """Nodes after which iterations took different paths."""
        return tuple(n.id for n in self.nodes if len(self._succ[n.id]) > 1)

    @property
    def merge_points(self) -> tuple[int, ...]:
        """Nodes where different paths join again."""
        return tuple(n.id for n in self.nodes if len(self._pred[n.id]) > 1)

    @cached_property
    def _calls(self) -> dict[str, RegionCall]:
        return {c.op_type: c for c in self.region_calls}

    def region_call(self, n: TraceNode) -> RegionCall | None:
        """The region function node ``n`` calls, or None (an ordinary op, or a node)."""
        return self._calls.get(n.op_type) if n.kind == "op" else None

    def nodes_of(self, kind: str) -> tuple[TraceNode, ...]:
        return tuple(n for n in self.nodes if n.kind == kind)

    def region(self, parent: int) -> tuple[TraceNode, ...]:
        """The nodes directly inside loop node ``parent`` (-1: top level), topologically sorted."""
        inside = [n.id for n in self.nodes if n.parent == parent]
        order, seen = [], set()
        pending = {i: sum(p in inside for p in self._pred[i]) for i in inside}
        ready = [i for i in inside if pending[i] == 0]
        while ready:
            i = ready.pop(0)
            order.append(i)
            seen.add(i)
            for j in self._succ[i]:
                if j in pending:
                    pending[j] -= 1
                    if pending[j] == 0:
                        ready.append(j)
        return tuple(self.nodes[i] for i in order)

    # -- export -----------------------------------------------------------------------------

    @property
    def user_branches(self) -> tuple[BranchSite, ...]:
        """The branch sites drawn as case nodes: the user's ``if``s (and unexplained ones)."""
        return tuple(b for b in self.branches if b.kind in ("if", "op"))

    def variable_name(self, key: str) -> str:
        """The Keras or TensorFlow name of variable ``key``, or the key."""
        return dict(self.variables).get(key, key)

    def to_json(self) -> str:
        """Nodes, edges, branch points and sites, variable names and the labels of region
        variants as JSON (the format the views read)."""
        from .branches import variant_labels

        return json.dumps(
            {
                "version": 1,
                "nodes": [_node_json(n) for n in self.nodes],
                "edges": [list(e) for e in self.edges],
                "branch_points": list(self.branch_points),
                "region_calls": {c.op_type: c.to_dict() for c in self.region_calls},
                "branches": [b.to_dict() for b in self.branches],
                "variables": dict(self.variables),
                "variant_labels": {str(k): v for k, v in variant_labels(self).items()},
            }
        )

    @classmethod
    def from_json(cls, text: str) -> TraceGraph:
        data = json.loads(text)
        return cls(
            nodes=tuple(_node_from_json(d) for d in data["nodes"]),
            edges=tuple((a, b) for a, b in data["edges"]),
            region_calls=tuple(
                RegionCall(op, d["name"], d["kind"], d["source"], d["call"], tuple(d["ops"]))
                for op, d in data.get("region_calls", {}).items()
            ),
            branches=tuple(
                BranchSite(d["kind"], d["location"], d["text"], tuple(map(tuple, d["arms"])))
                for d in data.get("branches", ())
            ),
            variables=tuple(sorted(data.get("variables", {}).items())),
        )

    def to_dot(self) -> str:
        """Graphviz DOT: loop nodes as clusters, branch points, feed and fetch points marked."""
        from .dot import to_dot

        return to_dot(self)

    def __repr__(self) -> str:
        from .dot import to_text

        return to_text(self)


def _spec_json(s: TensorSpec) -> list:
    return [s.dtype, None if s.shape is None else list(s.shape)]


def _spec_from(d: list) -> TensorSpec:
    return TensorSpec(d[0], None if d[1] is None else tuple(d[1]))


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _node_json(n: TraceNode) -> dict:
    return {
        "id": n.id,
        "kind": n.kind,
        "op_type": n.op_type,
        "location": n.location,
        "loc": n.loc,
        "attrs": [[k, v] for k, v in n.attrs],
        "input_specs": [_spec_json(s) for s in n.input_specs],
        "outputs": [_spec_json(s) for s in n.outputs],
        "sources": [[[s.kind, s.index, s.output, s.detail] for s in seen] for seen in n.sources],
        "feeds": list(n.feeds),
        "fetches": list(n.fetches),
        "parent": n.parent,
        "loop": n.loop,
        "body": list(n.body),
        "trip_counts": list(n.trip_counts),
        "hits": n.hits,
        "device": n.device,
    }


def _node_from_json(d: dict) -> TraceNode:
    return TraceNode(
        id=d["id"],
        kind=d["kind"],
        op_type=d["op_type"],
        location=d["location"],
        loc=d["loc"],
        attrs=tuple((k, _tuples(v)) for k, v in d["attrs"]),
        input_specs=tuple(_spec_from(s) for s in d["input_specs"]),
        outputs=tuple(_spec_from(s) for s in d["outputs"]),
        sources=tuple(tuple(Source(*s) for s in seen) for seen in d["sources"]),
        fetches=tuple(d["fetches"]),
        parent=d["parent"],
        loop=d["loop"],
        body=tuple(d["body"]),
        trip_counts=tuple(d["trip_counts"]),
        hits=d["hits"],
        device=d.get("device", ""),
    )


def check_graph(g: TraceGraph) -> None:
    """Raise ``GraphError`` naming the first node that breaks the TraceGraph's invariants."""
    ids = {n.id for n in g.nodes}
    for i, n in enumerate(g.nodes):
        if n.id != i:
            raise GraphError(f"node at position {i} has id {n.id}; ids must equal positions")
        if n.kind not in NODE_KINDS:
            raise GraphError(f"node {n.id} has unknown kind {n.kind!r}")
        if n.parent != -1 and (n.parent not in ids or g.nodes[n.parent].kind != "loop"):
            raise GraphError(f"node {n.id} has parent {n.parent}, which is not a loop node")
        for seen in n.sources:
            for s in seen:
                if s.kind in ("node", "carry") and s.index not in ids:
                    raise GraphError(f"node {n.id} reads from node {s.index}, which does not exist")
    for a, b in g.edges:
        if a not in ids or b not in ids:
            raise GraphError(f"edge {a}->{b} names a node that does not exist")
        if g.nodes[a].parent != g.nodes[b].parent:
            raise GraphError(f"edge {a}->{b} crosses a loop boundary")
    for c in g.region_calls:
        if c.kind not in REGION_KINDS:
            raise GraphError(f"region call {c.op_type} has unknown kind {c.kind!r}")
    edges = set(g.edges)
    for site in g.branches:
        for b, s, _ in site.arms:
            if (b, s) not in edges:
                raise GraphError(f"branch site {site.location or site.kind} names edge {b}->{s}, "
                                 f"which does not exist")
    for n in g.nodes:
        _check_region_ends(g, n)
    for n in g.nodes_of("loop"):
        if len(n.body) != 2 or any(g.nodes[b].parent != n.id for b in n.body):
            raise GraphError(f"loop node {n.id} has no body start/end inside it")
    _check_acyclic(g)


def _check_region_ends(g: TraceGraph, n: TraceNode) -> None:
    if n.kind == "start" and g.predecessors(n.id):
        raise GraphError(f"start node {n.id} has predecessors")
    if n.kind == "end" and g.successors(n.id):
        raise GraphError(f"end node {n.id} has successors")
    if n.kind in ("op", "loop") and not (g.predecessors(n.id) and g.successors(n.id)):
        raise GraphError(f"node {n.id} ({n.op_type or n.kind}) is not on a path from start to end")


def _check_acyclic(g: TraceGraph) -> None:
    state: dict[int, int] = {}
    for root in (n.id for n in g.nodes if n.kind == "start"):
        stack = [(root, iter(g.successors(root)))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise GraphError(f"cycle through node {nxt}")
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(g.successors(nxt))))
