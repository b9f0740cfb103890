"""The TraceGraph's branch points as the user's program has them. Pure functions of plain data.

A branch point is where iterations took different op paths. What made them differ is one of:

- ``if``: a Python ``if`` the user wrote. Every branch point it caused (one per path that
  reaches it: ops traced one by one, a region's compiled call ...) is one *site*, drawn as one
  case node at the ``if``'s line, its edges labelled ``true``/``false``.
- ``loop``: a Python loop entered or not (0 trips): the loop node shows it.
- ``region``: one statement answered by a region's compiled call and by the ops it replaced,
  or by two versions of a region (other argument specs): the region's variants.
- ``specs``: one statement's ops with other shapes or attributes (a ``for p, g in zip(...)``
  over parameters of different shapes, a smaller last batch): variants, not a user branch.
- ``library``: one statement ran other ops, no Python statement of the user's chose (a branch
  inside Keras: an optimizer building its variables at its first call): variants too.
- ``op``: a divergence the source does not explain (its source is unknown): drawn at the op.

Which statement decided comes from the user frames of the ops on the diverging edges (a
*stack*: ``(file, line)`` pairs, the loop's frame first) and the source of those files
(``statements``). Without stacks, a node's ``location`` is its one-frame stack.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .statements import BRANCHES, Chain, arm, chain_of, decider, end_chain, header, parse_source
from .tracegraph import BranchSite, TraceGraph, TraceNode

Stack = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class _Decision:
    kind: str
    file: str
    line: int
    text: str
    labels: tuple[str, ...]


def branch_sites(g: TraceGraph, sources: Mapping[str, str],
                 stacks: Mapping[int, Stack] | None = None) -> tuple[BranchSite, ...]:
    """One ``BranchSite`` per user statement (or variant point) behind ``g``'s branch points.
    ``sources``: file -> source text; ``stacks``: node id -> its user frames (default: its
    ``location`` as one frame)."""
    stacks = stacks if stacks is not None else {}
    sites: dict[tuple, list] = {}
    for b in g.branch_points:
        succ = g.successors(b)
        found = _decide(g, b, [_stack(g, s, stacks) for s in succ], sources)
        key = (found.kind, found.file, found.line, g.nodes[b].parent)
        if found.kind in ("op", "specs", "library"):
            key += (b,)  # no statement joins them: one site per branch point
        entry = sites.setdefault(key, [found, []])
        entry[1] += [(b, s, label) for s, label in zip(succ, found.labels)]
    return tuple(
        BranchSite(d.kind, f"{os.path.basename(d.file)}:{d.line}" if d.line else "", d.text,
                   tuple(arms))
        for d, arms in sites.values()
    )


def _stack(g: TraceGraph, node_id: int, stacks: Mapping[int, Stack]) -> Stack | None:
    """The user frames of a successor: an op's own; a loop's, its first op's cut at the loop's
    line; None for a region's end."""
    n = g.nodes[node_id]
    if n.kind == "end":
        return None
    if n.kind == "loop":
        inner = _first_op(g, n)
        file, line = _split(n.location)
        frames = _stack(g, inner, stacks) if inner is not None else None
        for k in range(len(frames or ()) - 1, -1, -1):
            if os.path.basename(frames[k][0]) == file:
                return (*frames[:k], (frames[k][0], line))
        return ((file, line),)
    return stacks.get(node_id) or ((_split(n.location)),)


def _first_op(g: TraceGraph, loop: TraceNode) -> int | None:
    node = loop.body[0]
    while True:
        succ = g.successors(node)
        if not succ or g.nodes[succ[0]].kind == "end":
            return None
        node = succ[0]
        if g.nodes[node].kind != "start":
            return node


def _split(location: str) -> tuple[str, int]:
    file, _, line = location.rpartition(":")
    return (file, int(line)) if line.isdigit() else (location, 0)


def _decide(g: TraceGraph, b: int, stacks: list[Stack | None],
            sources: Mapping[str, str]) -> _Decision:
    """What made the paths from branch point ``b`` differ (see the module docstring)."""
    succ = g.successors(b)
    known = [s for s in stacks if s is not None]
    if len(known) == len(stacks) and all(s == known[0] for s in known):
        return _variants(g, succ, known[0])
    best = None
    for other in stacks[1:]:
        found = _pair(stacks[0], other, sources)
        if found is not None and (best is None or found[1].lineno < best[1].lineno):
            best = found
    if best is None:
        return _unexplained(g, succ, stacks, sources)
    file, stmt, chains = best
    text = header(stmt)
    labels = tuple(arm(stmt, c) for c in chains(stacks))
    return _Decision("if" if isinstance(stmt, BRANCHES) else "loop", file, stmt.lineno, text,
                     labels)


def _variants(g: TraceGraph, succ: tuple[int, ...], stack: Stack) -> _Decision:
    """One statement, other ops: a region's call against its ops or another version, or
    other specs. Each edge is labelled by what its successor is."""
    nodes = [g.nodes[s] for s in succ]
    regional = any(g.region_call(n) is not None for n in nodes)
    specs = _differing([tuple(map(str, n.input_specs)) or ("",) for n in nodes])
    if not any(specs):  # the same inputs: the outputs tell them apart, if anything does
        specs = _differing([tuple(f"→ {o}" for o in n.outputs) or ("",) for n in nodes])
    labels = tuple(
        ("compiled" if g.region_call(n) is not None else "op by op") if regional
        else text or n.op_type or n.kind
        for n, text in zip(nodes, specs))
    file, line = stack[-1]
    return _Decision("region" if regional else "specs", file, line, "", labels)


def _unexplained(g: TraceGraph, succ: tuple[int, ...], stacks: list[Stack | None],
                 sources: Mapping[str, str]) -> _Decision:
    """No Python statement chose: with the source at hand, the earliest line's statement ran
    other ops: a region's variants when a way is a region's call (one formed later than
    another), else a branch inside a library (Keras building an optimizer at its first call);
    each way labelled by its first op. Without the source, an unexplained branch point."""
    lines = [s[-1] for s in stacks if s is not None and s[-1][0] in sources]
    if not lines:
        return _Decision("op", "", 0, "", tuple(f"case {k}" for k in range(len(succ))))
    file, line = min(lines, key=lambda fl: fl[1])
    calls = [g.region_call(g.nodes[s]) for s in succ]
    labels = tuple(_way(g, s, stack, call, line) for s, stack, call in zip(succ, stacks, calls))
    kind = "region" if any(calls) else "library"
    return _Decision(kind, file, line, "", labels)


def _way(g: TraceGraph, node_id: int, stack: Stack | None, call, line: int) -> str:
    """A way's label at a line that ran other ops: the region it calls, the op it runs on the
    line, or where it goes on to (``on to line 17``, ``end``)."""
    if call is not None:
        return call.label.split(" · ")[0]
    if stack is None:
        return "end"
    if stack[-1][1] != line:
        return f"on to line {stack[-1][1]}"
    return _op_name(g.nodes[node_id].op_type) or g.nodes[node_id].kind


def _op_name(op_type: str) -> str:
    """An op type as a label; a function call's generated name shortened
    (``__inference_tape_gradient_1130`` -> ``tape_gradient``)."""
    match = re.fullmatch(r"__inference_(.+?)_\d+", op_type)
    return match.group(1) if match else op_type


def _pair(a: Stack | None, b: Stack | None, sources: Mapping[str, str]):
    """``(file, statement, chains)`` of what decided between two successors' stacks, or None;
    ``chains(stacks)`` gives every successor's chain in that statement's file."""
    if a is None and b is None:
        return None
    depth = 0
    if a is not None and b is not None:
        while depth < len(a) and depth < len(b) and a[depth] == b[depth]:
            depth += 1
        if depth == len(a) or depth == len(b) or a[depth][0] != b[depth][0]:
            return None
    file = (a or b)[depth][0]
    tree = parse_source(sources[file]) if file in sources else None
    if tree is None:
        return None

    def chains(stacks: list[Stack | None]) -> list[Chain]:
        prefix = (a or b)[:depth]  # a stack reaching this file by another call has no chain here
        own = [chain_of(tree, s[depth][1]) if s and len(s) > depth and s[:depth] == prefix
               else () for s in stacks]
        ref = next((c for c in own if c), ())
        return [end_chain(ref) if s is None else c for s, c in zip(stacks, own)]

    ca, cb = chains([a, b])
    stmt = decider(ca, cb)
    return None if stmt is None else (file, stmt, chains)


def variant_labels(g: TraceGraph) -> dict[int, str]:
    """Region call node -> a label that tells it from the other versions of its call: when
    versions share a label (``model(x)`` at batch 8 and at batch 16), the label with the
    argument specs that differ, and ``#k`` when even those are equal."""
    groups: dict[str, list[TraceNode]] = {}
    for n in g.nodes:
        call = g.region_call(n)
        if call is not None:
            groups.setdefault(call.label, []).append(n)
    out: dict[int, str] = {}
    for label, nodes in groups.items():
        versions = list(dict.fromkeys((n.op_type, _arg_specs(n)) for n in nodes))
        if len(versions) < 2:
            continue
        texts = _differing([specs for _, specs in versions])
        for n in nodes:
            k = versions.index((n.op_type, _arg_specs(n)))
            repeated = texts.count(texts[k]) > 1
            out[n.id] = f"{label} · {texts[k] or 'no args'}" + (f" #{k + 1}" if repeated else "")
    return out


def _arg_specs(n: TraceNode) -> tuple[str, ...]:
    """The specs of a call's arguments (its variables' handles left out)."""
    return tuple(str(s) for s in n.input_specs if s.dtype != "resource")


def _differing(versions: list[tuple[str, ...]], most: int = 3) -> list[str]:
    """Per version, its specs at the (first ``most``) positions where the versions differ."""
    same_length = len({len(v) for v in versions}) == 1
    width = max(len(v) for v in versions)
    where = [i for i in range(width)
             if not same_length or len({v[i] for v in versions}) > 1][:most]
    return [", ".join(v[i] for i in where if i < len(v)) for v in versions]
