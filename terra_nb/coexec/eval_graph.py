"""Reference interpreter: one path of a TraceGraph, run op by op eagerly.

``eval_graph`` is the executable definition of what a TraceGraph means, and the oracle that
plans and lowerings are tested against. It runs the ops of one path as eager TensorFlow does,
from each node's recorded op type and attrs, with the values the caller supplies for what came
from outside the iteration.

**Path.** The full walk through the graph, as node ids: it starts at the start node ``0`` and
ends at the end node ``1``, and each node is a successor (an edge) of the one before, except
around loops: a loop node is followed by its body's start node, and its body's end node by the
start node again (another trip) or by a successor of the loop node (the loop is left). So a loop
``L`` with body ``(s, e)`` run twice reads ``L, s, ..., e, s, ..., e`` and then goes on after
``L``. Any trip count of one or more is a path (the whole program also runs trip counts it never
saw). Positions in this list name the runs of ops: ``Terra.last_path``, which lists op nodes only,
is not this form; ``iteration_path`` gives the walk of a recorded iteration.

**Inputs.** Input ``i`` of the op at position ``p`` (node ``n``) takes, in this order:

1. ``feeds[(p, i)]``: a value from outside the iteration's ops (a Python or numpy value, an eager
   tensor, a value carried from the previous iteration, a variable). Allowed only where ``n``
   recorded a source that is not an op output (kind ``feed``, ``carry`` or ``var``); converted to
   the input's recorded dtype. An input only ever fed from Python must be in ``feeds``.
2. ``reads[(p, i)] = (q, k)``: output ``k`` of the op at position ``q < p``; ``n`` must have read
   output ``k`` of node ``path[q]`` there in some iteration.
3. Otherwise the one candidate among the sources ``n`` recorded there: an op output (``node``,
   if that node ran before ``p``: the output of its latest run), a variable (``var``, if
   ``variables[detail]`` is given: a ``tf.Variable`` or resource handle) or a carried value
   (``carry``, if ``carried[(node, output)]`` is given: what that node gave in the last traced
   iteration). Several candidates, or a node whose latest run was inside a loop of several trips
   that ``p`` is outside of (which trip's value is meant: the graph does not say), are ambiguous:
   ``reads`` or ``feeds`` must choose.

Anything else raises ``TerraError`` naming the position, the node and what to pass. Ops run with
``generator.run_segment`` (the engine's own op-by-op execution) on the path made one straight-line
``Segment`` (``path_segment``), outside gradient tapes; the caller keeps terra-nb's capture hooks
out of it (``capture.bypass()``) when calling inside a Terra iteration. Ops run on the default
device: the TraceGraph does not record device scopes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import record

from ..errors import TerraError
from ..trace.records import Block, Source, Trace, TraceOp, segment
from ..trace.tracegraph import TraceGraph, TraceNode
from .lower import Segment, SegmentOp, interpretable, run_segment

Key = tuple[int, int]  # (path position, input index)
Read = tuple[int, int]  # (path position of an earlier op, output index)
START, END = 0, 1  # the top region's start and end nodes


def eval_graph(
    graph: TraceGraph,
    path: Sequence[int],
    feeds: Mapping[Key, Any],
    variables: Mapping[str, Any] | None = None,
    carried: Mapping[tuple[int, int], Any] | None = None,
    reads: Mapping[Key, Read] | None = None,
) -> dict[int, list[tf.Tensor]]:
    """Run the ops of ``path`` eagerly (see the module docstring for the arguments); returns the
    outputs of every op on it by path position. Variables are read and written in place."""
    built, args, handles = path_segment(graph, path, feeds, variables, carried, reads)
    with record.stop_recording():
        values = run_segment(built.segment, args, handles)
    out: dict[int, list[tf.Tensor]] = {p: [] for p in built.positions}
    for (s, _), value in zip(built.segment.returns, values):
        out[built.positions[s]].append(value)
    return out


@dataclass(frozen=True, slots=True)
class PathSegment:
    """A path as one straight-line ``Segment`` returning every output; ``positions[s]`` is the
    path position of the segment's op ``s``."""

    segment: Segment
    positions: tuple[int, ...]


def path_segment(
    graph: TraceGraph,
    path: Sequence[int],
    feeds: Mapping[Key, Any],
    variables: Mapping[str, Any] | None = None,
    carried: Mapping[tuple[int, int], Any] | None = None,
    reads: Mapping[Key, Read] | None = None,
) -> tuple[PathSegment, list, dict[int, Any]]:
    """What ``eval_graph`` runs: the path's ops as one ``Segment`` (a ``PathSegment``), its
    arguments (the fed and carried values) and the variable handles its ``var`` inputs name.
    ``compile_segment(segment.segment, handles)(*args)`` runs the same ops as one graph."""
    path = list(path)
    contexts, loops = _walk(graph, path)
    wiring = _Wiring(graph, path, contexts, loops, feeds, variables or {}, carried or {},
                     reads or {})
    return wiring.build()


# -- the walk ---------------------------------------------------------------------------------


def _walk(graph: TraceGraph, path: list[int]) -> tuple[list[tuple], dict[int, tuple[int, int]]]:
    """Check that ``path`` is a path of ``graph``. Returns, per position, the loop runs around it
    as ``(run, trip)`` pairs, and per run its loop node and number of trips."""
    if not path or path[0] != START:
        first = path[0] if path else "nothing"
        raise TerraError(f"a path starts at the start node {START}, this one starts at {first}")
    contexts: list[tuple] = [()]
    loops: dict[int, tuple[int, int]] = {}  # run -> (loop node, trips)
    open_runs: list[int] = []
    for p in range(1, len(path)):
        a, b = path[p - 1], path[p]
        if not 0 <= b < len(graph.nodes):
            raise TerraError(f"path position {p}: node {b} is not a node of the graph")
        allowed = _following(graph, a)
        if b not in allowed:
            raise TerraError(
                f"path position {p}: {_name(graph, b)} does not follow {_name(graph, a)}; "
                f"after it come {', '.join(map(str, allowed)) or 'no nodes: the path ends'}"
            )
        _enter_or_leave(graph, a, b, open_runs, loops)
        contexts.append(tuple((run, loops[run][1]) for run in open_runs))
    if path[-1] != END:
        raise TerraError(f"the path ends at {_name(graph, path[-1])}; a path ends at the end "
                         f"node {END}")
    return contexts, loops


def _following(graph: TraceGraph, a: int) -> tuple[int, ...]:
    """The nodes that may follow node ``a`` on a path."""
    node = graph.nodes[a]
    if node.kind == "loop":
        return (node.body[0],)
    if node.kind == "end" and node.parent != -1:
        loop = graph.nodes[node.parent]
        return (loop.body[0], *graph.successors(loop.id))
    return graph.successors(a)


def _enter_or_leave(graph: TraceGraph, a: int, b: int, open_runs: list[int],
                    loops: dict[int, tuple[int, int]]) -> None:
    """Follow the step ``a -> b`` into a loop, into its next trip, or out of it."""
    node = graph.nodes[a]
    if node.kind == "loop":
        open_runs.append(len(loops))
        loops[len(loops)] = (a, 1)
    elif node.kind == "end" and node.parent != -1:
        run = open_runs[-1]
        if b == graph.nodes[node.parent].body[0]:
            loops[run] = (node.parent, loops[run][1] + 1)
        else:
            open_runs.pop()


def _name(graph: TraceGraph, n: int) -> str:
    """Node ``n`` for messages: its op and source line, or its kind and loop."""
    node = graph.nodes[n]
    if node.kind == "op":
        return f"node {n} ({node.op_type} at {node.location})"
    where = "" if node.parent == -1 else f" of loop node {node.parent}'s body"
    return f"node {n} ({node.kind}{where})"


# -- wiring the path's ops --------------------------------------------------------------------


class _Wiring:
    """Resolves every input of the path's ops (module docstring) into segment wiring."""

    def __init__(self, graph, path, contexts, loops, feeds, variables, carried, reads) -> None:
        self.graph: TraceGraph = graph
        self.path: list[int] = path
        self.contexts: list[tuple] = contexts
        self.loops: dict[int, tuple[int, int]] = loops
        self.feeds, self.variables, self.carried, self.reads = feeds, variables, carried, reads
        self.args: list = []
        self.specs: list[tuple] = []
        self.handles: dict[int, Any] = {}
        self.handle_of: dict[str, int] = {}  # variable key -> handle index
        self.latest: dict[int, int] = {}  # node -> position of its latest run so far
        self.segment_of: dict[int, int] = {}  # path position -> segment op

    def build(self) -> tuple[PathSegment, list, dict[int, Any]]:
        """The path's ops, wired in path order, with their arguments and handles."""
        self._check_keys()
        ops, positions = [], []
        for p, n in enumerate(self.path):
            node = self.graph.nodes[n]
            if node.kind != "op":
                continue
            wiring = tuple(self.input(p, node, i) for i in range(len(node.sources)))
            op = SegmentOp(n, node.op_type, node.attrs, wiring, len(node.outputs))
            if not interpretable(Segment((op,), (), ())):
                raise TerraError(f"path position {p}: {_name(self.graph, n)} cannot run op by "
                                 f"op (a function call, or an op with a lowering rule)")
            self.segment_of[p] = len(ops)
            self.latest[n] = p
            ops.append(op)
            positions.append(p)
        returns = tuple((s, k) for s, op in enumerate(ops) for k in range(op.n_outputs))
        segment = Segment(tuple(ops), tuple(self.specs), returns)
        return PathSegment(segment, tuple(positions)), self.args, self.handles

    def _check_keys(self) -> None:
        """Every key of ``feeds`` and ``reads`` names an input of an op on the path."""
        for what, keys in (("feeds", self.feeds), ("reads", self.reads)):
            for p, i in keys:
                n = self.path[p] if 0 <= p < len(self.path) else None
                node = None if n is None else self.graph.nodes[n]
                if node is None or node.kind != "op" or not 0 <= i < len(node.sources):
                    raise TerraError(f"{what}[{(p, i)}]: keys are (path position, input index) of "
                                     f"an op on the path; position {p} holds "
                                     f"{'nothing' if n is None else _name(self.graph, n)}")

    def input(self, p: int, node: TraceNode, i: int) -> tuple[str, int, int]:
        """The wiring of input ``i`` of ``node``, run at path position ``p``."""
        seen = node.sources[i]
        if (p, i) in self.feeds:
            if all(s.kind == "node" for s in seen):
                raise TerraError(f"feeds[{(p, i)}]: {self._input(p, i)} always read an op's "
                                 f"output ({_sources(seen)}); nothing feeds it")
            return self._arg(self.feeds[(p, i)], node, i)
        if (p, i) in self.reads:
            return self._read(p, node, i, *self.reads[(p, i)])
        options = [s for s in seen if s.kind == "node" and s.index in self.latest
                   or s.kind == "var" and s.detail in self.variables
                   or s.kind == "carry" and (s.index, s.output) in self.carried]
        if len(options) > 1:
            raise TerraError(f"{self._input(p, i)} read {_sources(options)} in different "
                             f"iterations; pass reads[{(p, i)}] or feeds[{(p, i)}] to choose")
        if not options:
            raise TerraError(self._missing(p, node, i))
        source = options[0]
        if source.kind == "var":
            return self._variable(source.detail)
        if source.kind == "carry":
            return self._arg(self.carried[(source.index, source.output)], node, i)
        return self._latest(p, i, source)

    def _missing(self, p: int, node: TraceNode, i: int) -> str:
        """Why input ``i`` at ``p`` has no value, and what to pass."""
        seen = node.sources[i]
        fed = any(s.kind == "feed" for s in seen)
        wants = [f"feeds[{(p, i)}]"] if fed else []
        wants += [f"variables[{s.detail!r}]" for s in seen if s.kind == "var"]
        wants += [f"carried[{(s.index, s.output)}]" for s in seen if s.kind == "carry"]
        unrun = [f"node {s.index}" for s in seen if s.kind == "node"]
        return (f"missing {'feed' if fed else 'value'}: {self._input(p, i)} has no value; "
                f"pass {' or '.join(wants) or f'feeds[{(p, i)}]'}"
                + (f" (it also read {', '.join(unrun)}, not run before it on this path)"
                   if unrun else ""))

    def _read(self, p: int, node: TraceNode, i: int, q: int, k: int) -> tuple[str, int, int]:
        """Wiring for ``reads[(p, i)] = (q, k)``, checked against the graph."""
        if not 0 <= q < p or self.graph.nodes[self.path[q]].kind != "op":
            raise TerraError(f"reads[{(p, i)}] = {(q, k)}: position {q} is not an op before "
                             f"position {p}")
        if Source("node", self.path[q], k) not in node.sources[i]:
            raise TerraError(
                f"reads[{(p, i)}] = {(q, k)}: {self._input(p, i)} never read output {k} of "
                f"{_name(self.graph, self.path[q])}; it read {_sources(node.sources[i])}"
            )
        return ("op", self.segment_of[q], k)

    def _latest(self, p: int, i: int, source: Source) -> tuple[str, int, int]:
        """Output ``source.output`` of the latest run of node ``source.index`` before ``p``."""
        q = self.latest[source.index]
        inside = {run for run, _ in self.contexts[p]}
        for run, _ in self.contexts[q]:
            loop, trips = self.loops[run]
            if run not in inside and trips > 1:
                raise TerraError(
                    f"{self._input(p, i)} reads {_name(self.graph, source.index)}, which ran in "
                    f"each of {trips} trips of loop node {loop}: the graph does not say which "
                    f"trip's value; pass reads[{(p, i)}] = (position, {source.output})"
                )
        return ("op", self.segment_of[q], source.output)

    def _arg(self, value: Any, node: TraceNode, i: int) -> tuple[str, int, int]:
        """A value from outside as a segment argument, of the input's recorded dtype."""
        spec = node.input_specs[i]
        if spec.dtype == "resource":
            value = getattr(value, "handle", value)
        elif not tf.is_tensor(value):
            value = tf.convert_to_tensor(value, spec.dtype)
        self.args.append(value)
        self.specs.append((spec.dtype, spec.shape))
        return ("arg", len(self.args) - 1, 0)

    def _variable(self, key: str) -> tuple[str, int, int]:
        """The handle of ``variables[key]`` (one handle index per variable)."""
        index = self.handle_of.get(key)
        if index is None:
            index = self.handle_of[key] = len(self.handle_of)
            self.handles[index] = getattr(self.variables[key], "handle", self.variables[key])
        return ("var", index, 0)

    def _input(self, p: int, i: int) -> str:
        return f"input {i} of {_name(self.graph, self.path[p])} at path position {p}"


def _sources(sources) -> str:
    """Recorded sources for messages."""
    text = {"node": "node {} output {}", "carry": "node {} output {} of the previous iteration"}
    return ", ".join(text.get(s.kind, "{2} {3}").format(s.index, s.output, s.kind, s.detail)
                     for s in sources)


# -- recorded iterations ----------------------------------------------------------------------


@dataclass(frozen=True)
class IterationPath:
    """The walk of one recorded iteration through a TraceGraph it was merged into.

    ``positions[j]``: the path position of the trace's op ``j``. ``reads``: every input that read
    an op output, as ``eval_graph`` takes it (the iteration's exact data flow). ``fed``: the
    inputs Python fed (``feeds`` keys); ``carried``: inputs read from the previous iteration, as
    (position, input) -> (op index in the previous trace, output) (supply them in ``feeds``)."""

    path: tuple[int, ...]
    positions: tuple[int, ...]
    reads: Mapping[Key, Read]
    fed: tuple[Key, ...]
    carried: Mapping[Key, tuple[int, int]]


def iteration_path(graph: TraceGraph, trace: Trace) -> IterationPath:
    """The path ``trace`` took through ``graph`` (which must have merged it), found as merging
    found it: each op (or loop run) is the successor with its key."""
    path: list[int] = []
    positions: dict[int, int] = {}
    _trace_block(graph, segment(trace.ops), START, END, path, positions)
    reads: dict[Key, Read] = {}
    fed: list[Key] = []
    carried: dict[Key, tuple[int, int]] = {}
    for op in trace.ops:
        p = positions[op.index]
        for i, s in enumerate(op.inputs):
            if s.kind == "op":
                reads[(p, i)] = (positions[s.index], s.output)
            elif s.kind == "feed":
                fed.append((p, i))
            elif s.kind == "carry":
                carried[(p, i)] = (s.index, s.output)
    order = tuple(positions[op.index] for op in trace.ops)
    return IterationPath(tuple(path), order, reads, tuple(fed), carried)


def _trace_block(graph: TraceGraph, items: Block, start: int, end: int, path: list[int],
                 positions: dict[int, int]) -> None:
    """Append the walk of ``items`` from region node ``start`` to ``end`` to ``path``."""
    path.append(start)
    current = start
    for item in items:
        current = _successor(graph, current, item)
        path.append(current)
        if isinstance(item, TraceOp):
            positions[item.index] = len(path) - 1
            continue
        for block in item.iterations:
            _trace_block(graph, block, *graph.nodes[current].body, path, positions)
    if end not in graph.successors(current):
        raise TerraError(f"the trace ends after {_name(graph, current)}, which has no edge to "
                         f"node {end}: the trace was not merged into this graph")
    path.append(end)


def _successor(graph: TraceGraph, current: int, item) -> int:
    """The successor of ``current`` with ``item``'s merge key (successors' keys differ)."""
    if isinstance(item, TraceOp):
        key = ("op", *item.key)
        what = f"op {item.index} ({item.op_type} at {item.location})"
    else:
        key, what = ("loop", item.loop), f"a run of user loop {item.loop}"
    for n in graph.successors(current):
        if graph.nodes[n].key == key:
            return n
    raise TerraError(f"{what} matches no successor of {_name(graph, current)}: the trace was not "
                     f"merged into this graph")


def latest_outputs(path: Sequence[int], outputs: Mapping[int, list]) -> dict[tuple[int, int], Any]:
    """(node, output) -> the value of its latest run in ``eval_graph``'s ``outputs``: the
    ``carried`` values of the next iteration (a carry names a node, not which of its runs)."""
    return {(path[p], k): v for p in sorted(outputs) for k, v in enumerate(outputs[p])}
