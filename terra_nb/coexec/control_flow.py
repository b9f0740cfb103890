"""Structured control flow of a TraceGraph, and the walk that names the path Python takes.

``plan(graph)`` turns the DAG of each region into a tree of plain items: ``OpItem`` (one node),
``CaseItem`` (a branch point: one block per successor, up to the point where every path meets
again, its immediate post-dominator) and ``LoopItem`` (a loop node: its body as a block, and the
trip count when every trace took the same one, which is then unrolled). Paths that cross between
branches before they meet are duplicated into each branch (tail duplication), so any DAG of
branches that merge back becomes nested cases. The generated program (``program_plan.py``) follows
this tree, and so does ``PathWalker``: given the nodes of Python's ops one by one, it emits the
decisions the program reads at each case (the branch index: Case Select) and each trip of a
loop that is not unrolled (1 = another trip, 0 = done: Loop Cond), and a final 1 (commit).

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import TerraError
from ..trace.tracegraph import TraceGraph, TraceNode

END = -1  # the node Python "reaches" when the iteration ends
_BODY_END = -2  # stands for the end of a loop trip while its follow set is unknown
COMMIT = 1  # the last decision of an iteration: the program may commit its variable writes


class ProgramError(TerraError):
    """The TraceGraph cannot become one program; the message names the node and why."""


class PathError(TerraError):
    """Python took a path the program does not hold (a divergence)."""


@dataclass(frozen=True, slots=True)
class OpItem:
    node: int


@dataclass(frozen=True, slots=True)
class CaseItem:
    """A branch point: ``branches[i]`` runs when Python's next op is in ``entries[i]``. A branch
    with a ``cut`` reason holds an op the program cannot run (made a variable, say, in the first
    iteration): Python taking it is a divergence."""

    at: int
    branches: tuple[Block, ...]
    cut: tuple[str | None, ...]
    entries: tuple[frozenset[int], ...] = ()
    direct: tuple[frozenset[int], ...] = ()  # the entries that are ops of the branch itself


@dataclass(frozen=True, slots=True)
class LoopItem:
    """A loop node: ``unrolled`` trips of ``body`` if set, else a while loop on Loop Cond.
    A trip starts when Python's next op is in ``entry``; ``after`` are the ops after the loop."""

    node: int
    body: Block
    unrolled: int | None
    loop: int = -1  # the user loop (``LocationTable`` loop id)
    entry: frozenset[int] = frozenset()
    after: frozenset[int] = frozenset()


Item = OpItem | CaseItem | LoopItem
Block = tuple[Item, ...]


def plan(graph: TraceGraph, unfit: dict[int, str] | None = None,
         skip: frozenset[int] = frozenset()) -> Block:
    """The structured control flow of ``graph``'s top region (start node 0 to end node 1).
    ``unfit`` names nodes the program cannot hold (and why): the branches holding them are cut;
    one on every path raises ``ProgramError``. ``skip``: op nodes left to Python."""
    unfit = unfit or {}
    block = _Planner(graph, unfit, skip).chain(0, 1)
    node = _first_unfit(block, unfit)
    if node is not None:
        raise ProgramError(unfit[node])
    return _annotate(block, frozenset({END}), same_op(graph))


def same_op(graph: TraceGraph) -> dict[int, int]:
    """Node -> the first node that is the same op (type, attrs, location, specs): Python's call
    names one of them, and only the place in the path tells which one it is."""
    first: dict[tuple, int] = {}
    out = {END: END, _BODY_END: _BODY_END}
    for n in graph.nodes_of("op"):
        out[n.id] = first.setdefault((n.op_type, n.attrs, n.loc, n.input_specs, n.outputs), n.id)
    return out


def op_nodes(block: Block) -> Iterator[int]:
    """The op nodes of ``block`` in order, loop bodies and branches included, cut ones not."""
    for item in block:
        if type(item) is OpItem:
            yield item.node
        elif type(item) is CaseItem:
            for branch, cut in zip(item.branches, item.cut):
                if not cut:
                    yield from op_nodes(branch)
        else:
            yield from op_nodes(item.body)


def _first_unfit(block: Block, unfit: dict[int, str]) -> int | None:
    """The first unfit node of ``block`` outside cut branches."""
    return next((n for n in op_nodes(block) if n in unfit), None)


def describe(block: Block, graph: TraceGraph, indent: str = "",
             inputs: Callable[[TraceNode], str] | None = None) -> str:
    """The plan as indented text: one line per op, ``case``/``loop`` headers. ``inputs(node)``
    says where its inputs come from (default: which are fed)."""
    inputs = inputs or _fed
    lines = []
    for item in block:
        if type(item) is OpItem:
            node = graph.nodes[item.node]
            outs = ",".join(str(s) for s in node.outputs) or "()"
            fetch = "  -> fetch" if node.fetches else ""
            lines.append(f"{indent}n{node.id}: {outs} = {node.op_type}{inputs(node)}{fetch}")
        elif type(item) is CaseItem:
            lines.append(f"{indent}case after n{item.at} (Case Select):")
            for i, (branch, cut) in enumerate(zip(item.branches, item.cut)):
                if cut:
                    lines.append(f"{indent}  branch {i}: not in the program ({cut})")
                    continue
                lines.append(f"{indent}  branch {i}:")
                lines.append(describe(branch, graph, indent + "    ", inputs)
                             or f"{indent}    (no ops)")
        else:
            how = f"unrolled x{item.unrolled}" if item.unrolled else "while (Loop Cond)"
            lines.append(f"{indent}loop n{item.node} {how}:")
            lines.append(describe(item.body, graph, indent + "  ", inputs))
    return "\n".join(line for line in lines if line)


def _fed(node: TraceNode) -> str:
    return f"  <- feed {list(node.feeds)}" if node.feeds else ""


class _Planner:
    def __init__(self, graph: TraceGraph, unfit: dict[int, str], skip: frozenset[int]) -> None:
        self.graph = graph
        self.unfit = unfit
        self.skip = skip
        self.ipdom: dict[int, int] = {}
        for parent in {-1} | {n.id for n in graph.nodes_of("loop")}:
            self._post_dominators(parent)

    def _post_dominators(self, parent: int) -> None:
        """Immediate post-dominators of a region's nodes (Cooper, Harvey, Kennedy on a DAG)."""
        order = [n.id for n in self.graph.region(parent)]
        position = {n: i for i, n in enumerate(order)}
        for n in reversed(order):
            succ = self.graph.successors(n)
            if not succ:
                continue
            dom = succ[0]
            for s in succ[1:]:
                a, b = dom, s
                while a != b:
                    if position[a] < position[b]:
                        a = self.ipdom[a]
                    else:
                        b = self.ipdom[b]
                dom = a
            self.ipdom[n] = dom

    def chain(self, first: int, stop: int) -> Block:
        """The items from node ``first`` up to (without) ``stop``."""
        items: list[Item] = []
        n = first
        while n != stop:
            node = self.graph.nodes[n]
            if node.kind == "op" and n not in self.skip:
                items.append(OpItem(n))
            elif node.kind == "loop":
                items.append(self._loop(n))
            elif node.kind == "end":
                break
            succ = self.graph.successors(n)
            if len(succ) == 1:
                n = succ[0]
                continue
            at, merge = n, self.ipdom[n]
            branches = tuple(self.chain(s, merge) for s in succ)
            n = merge
            if not any(branches):  # the paths differ only in ops Python runs itself
                continue
            cut = []
            for b in branches:
                node = _first_unfit(b, self.unfit)
                cut.append(None if node is None else self.unfit[node])
            items.append(CaseItem(at, branches, tuple(cut)))
        return tuple(items)

    def _loop(self, n: int) -> LoopItem:
        node = self.graph.nodes[n]
        start, end = node.body
        trips = node.trip_counts
        unrolled = trips[0] if len(trips) == 1 else None
        return LoopItem(n, self.chain(start, end), unrolled, node.loop)


def _annotate(block: Block, follow: frozenset[int], same: dict[int, int]) -> Block:
    """Fill in which ops (as ``same`` ids) start each branch and each loop trip, given the ops
    that may follow ``block``; raise ``ProgramError`` where the next op would not tell the paths
    apart. An op that can start a branch or follow it (an ``if`` in a loop body: the same trip,
    or the next) is told apart by whether a new trip began there (``PathWalker.step``)."""
    out: list[Item] = []
    nxt = follow
    for item in reversed(block):
        if type(item) is OpItem:
            nxt = frozenset({same[item.node]})
        elif type(item) is CaseItem:
            branches = tuple(_annotate(b, nxt, same) for b in item.branches)
            entries = tuple(_firsts(b, nxt, same) for b in branches)
            direct = tuple(_firsts(b, frozenset(), same) for b in branches)
            _check_disjoint(direct, f"the branches after node {item.at}")
            _check_disjoint(tuple(e - d for e, d, b in zip(entries, direct, branches) if b),
                            f"the branches after node {item.at}")
            item = CaseItem(item.at, branches, item.cut, entries, direct)
            nxt = frozenset().union(*entries)
        else:
            probe = _annotate(item.body, frozenset({_BODY_END}), same)
            entry = _firsts(probe, frozenset({_BODY_END}), same)
            if _BODY_END in entry:
                raise ProgramError(f"loop node {item.node} has a trip that may run no op")
            body = _annotate(item.body, entry | nxt, same)
            item = LoopItem(item.node, body, item.unrolled, item.loop, entry, nxt)
            nxt = entry
        out.append(item)
    return tuple(reversed(out))


def _firsts(block: Block, follow: frozenset[int], same: dict[int, int]) -> frozenset[int]:
    """The ops that can come first in an annotated ``block`` followed by ``follow``."""
    if not block:
        return follow
    first = block[0]
    if type(first) is OpItem:
        return frozenset({same[first.node]})
    if type(first) is CaseItem:
        return frozenset().union(*first.entries)
    return first.entry


def _check_disjoint(sets: tuple[frozenset[int], ...], what: str) -> None:
    seen: set[int] = set()
    for s in sets:
        if seen & s:
            raise ProgramError(f"{what} can start with the same op (node {min(seen & s)})")
        seen |= s


class PathWalker:
    """Follows Python's ops through a plan: ``step(node)`` returns the program's node for that
    op (``node`` or the same op elsewhere) and the decisions the program reads before it runs;
    ``finish()`` those read at the end of the iteration. Raises ``PathError`` at an op the plan
    does not hold next. ``same`` is ``same_op`` of the TraceGraph."""

    def __init__(self, block: Block, same: dict[int, int]) -> None:
        self._same = same
        self._node = END  # as a same_op id
        self._matched = END
        self._out: list[int] = []
        self.trips: list[list[int]] = []  # [loop node, trip] of the loops open at the last op
        self._open: list[int] = []  # the user loop ids of those loops
        self._boundary: int | None = None  # the user loop that began a new trip at this op
        self._loops: tuple[int, ...] = ()  # the user loops around this op
        self._walk = self._top(block)
        next(self._walk)

    def step(self, node: int, boundary: int | None = None,
             loops: tuple[int, ...] = ()) -> tuple[int, list[int]]:
        """``boundary``: the user loop that began a new iteration at this op (if any);
        ``loops``: the user loops around it (``LocationTable``), as tracing saw them."""
        self._node, self._out = self._same.get(node, node), []
        self._boundary, self._loops = boundary, loops
        self._walk.send(None)
        return self._matched, self._out

    def finish(self) -> list[int]:
        self._node, self._out = END, []
        try:
            self._walk.send(None)
        except StopIteration:
            return self._out
        raise PathError("the iteration ended inside the program")  # unreachable by design

    def _top(self, block: Block) -> Iterator[None]:
        yield  # primed: wait for the first op
        yield from self._block(block)
        if self._node != END:
            raise PathError(f"node {self._node} came after the last op of the program")
        self._out.append(COMMIT)

    def _block(self, block: Block) -> Iterator[None]:
        for item in block:
            if type(item) is OpItem:
                if self._node != self._same[item.node]:
                    raise PathError(f"node {self._node} where the program has node {item.node}")
                self._matched = item.node
                yield
            elif type(item) is CaseItem:
                branch = self._branch_of(item)
                if item.cut[branch]:
                    raise PathError(item.cut[branch])
                self._out.append(branch)
                yield from self._block(item.branches[branch])
            else:
                yield from self._loop(item)

    def _loop(self, item: LoopItem) -> Iterator[None]:
        trips = 0
        open_loop = [item.node, 0]
        self.trips.append(open_loop)
        self._open.append(item.loop)
        while self._node in item.entry and (trips == 0 or self._node not in item.after
                                            or self._boundary == item.loop):
            if item.unrolled is None:
                self._out.append(1)
            elif trips == item.unrolled:
                raise PathError(f"loop node {item.node} ran more than {item.unrolled} trips")
            open_loop[1] = trips
            yield from self._block(item.body)
            trips += 1
        self.trips.pop()
        self._open.pop()
        if item.unrolled is None:
            self._out.append(0)
        elif trips != item.unrolled:
            raise PathError(f"loop node {item.node} ran {trips} trips, not {item.unrolled}")


    def _branch_of(self, item: CaseItem) -> int:
        """The branch the next op is in: the one it starts, or the one it follows when it
        begins a new trip of (or lies outside) the loop around the case."""
        node = self._node
        starts = [i for i, d in enumerate(item.direct) if node in d]
        follows = [i for i, (e, d) in enumerate(zip(item.entries, item.direct))
                   if node in e and node not in d]
        if starts and (not follows or not self._beyond_trip()):
            return starts[0]
        if follows:
            return follows[0]
        raise PathError(f"node {node} starts no branch after node {item.at}")

    def _beyond_trip(self) -> bool:
        """Whether this op begins a new trip of the innermost open loop, or lies outside it."""
        if not self._open:
            return False
        return self._boundary in self._open or self._open[-1] not in self._loops
