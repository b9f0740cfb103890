"""How the whole program meets Python: which TraceGraph nodes Python computes itself, where each
op input of the program can come from, which nodes the program cannot hold, and which values it
keeps for every trip of a loop. Plain analysis of a TraceGraph and its plan (``control_flow.py``);
``program_plan.py`` builds the program from it and ``program_runner.py`` follows it, with the
helpers at the end: which candidate an input took, and the replayed values given to placeholders.
"""

from __future__ import annotations

from typing import Any

from tensorflow.python.framework import op_def_registry

from ..capture.placeholder import Placeholder
from ..capture.signature import ITERATOR_OPS
from ..trace.records import Source
from ..trace.tracegraph import TraceGraph, TraceNode
from .call_args import SHAPE_OPS
from .control_flow import Block, CaseItem, LoopItem, PathError, ProgramError, op_nodes
from .program_constants import Constant

FEED = "feed"  # the candidate of an op input fed from Python (a feed or a carried value)
VARIABLE_OPS = frozenset(
    {"ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"}
)  # what the program keeps local to an iteration until its commit
WRITES = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})




def python_side(graph: TraceGraph) -> frozenset[int]:
    """Op nodes Python computes itself in co-execution, so the program leaves them out: shape
    ops (folded from static shapes), the input pipeline's iterator ops (run for real), and pure
    ops whose inputs are all fed or Python-side."""
    out: set[int] = set()

    def walk(parent: int) -> None:
        for node in graph.region(parent):
            if node.kind == "loop":
                walk(node.id)
            elif node.kind == "op" and _computed_by_python(node, out):
                out.add(node.id)

    walk(-1)
    return frozenset(out)


def _computed_by_python(node: TraceNode, python: set[int]) -> bool:
    if node.op_type in SHAPE_OPS or node.op_type in ITERATOR_OPS:
        return True
    op_def = op_def_registry.get(node.op_type)
    if op_def is None or op_def.is_stateful:
        return False
    return all(
        s.kind == "feed" or s.kind == "node" and s.index in python
        for seen in node.sources for s in seen
    )


def candidates(node: TraceNode, i: int, python: frozenset[int]) -> tuple[Source | str, ...]:
    """What input ``i`` of ``node`` can be: the program's node outputs seen there, then ``FEED``
    if Python ever supplied it (a value, a carried tensor, an output of a Python-side node).
    With more than one, Python tells the program which (a path decision)."""
    if node.input_specs[i].dtype == "resource":
        return ()  # a variable: captured, never chosen
    seen = node.sources[i]
    nodes = tuple(s for s in seen if s.kind == "node" and s.index not in python)
    fed = any(s.kind in ("feed", "carry") or s.kind == "node" and s.index in python for s in seen)
    return nodes + ((FEED,) if fed else ())


def per_trip_values(graph: TraceGraph, block: Block) -> dict[tuple[int, int], int]:
    """(node, output) -> the loop node whose body computes it, for values read after the loop
    (an RNN's backward pass reads every trip's). Such a read names the trip (a path decision)."""
    readers: dict[tuple[int, int], set[int]] = {}
    for n in graph.nodes_of("op"):
        for seen in n.sources:
            for s in seen:
                if s.kind == "node":
                    readers.setdefault((s.index, s.output), set()).add(n.id)
    out: dict[tuple[int, int], int] = {}

    def walk(items: Block) -> None:
        for item in items:
            if type(item) is CaseItem:
                for branch in item.branches:
                    walk(branch)
            elif type(item) is LoopItem:
                walk(item.body)
                inside = set(op_nodes(item.body))
                for n in inside:
                    for k in range(len(graph.nodes[n].outputs)):
                        if readers.get((n, k), set()) - inside:
                            if (n, k) in out and out[(n, k)] != item.node:
                                raise ProgramError(
                                    f"node {n}: a value of a nested loop is read after the "
                                    f"loop around it"
                                )
                            out[(n, k)] = item.node

    walk(block)
    return out


def all_items(block: Block):
    """Every item of ``block``, nested ones included (cut branches too)."""
    for item in block:
        yield item
        if type(item) is CaseItem:
            for branch in item.branches:
                yield from all_items(branch)
        elif type(item) is LoopItem:
            yield from all_items(item.body)


def unfit(graph: TraceGraph, handles: dict[str, Any], python: frozenset[int]) -> dict[int, str]:
    """The op nodes the program cannot hold, and why: ops with effects that cannot wait for the
    commit (making a variable, stateful random ops, prints), function calls, and variable ops
    that do not name one known variable."""
    out = {}
    for node in graph.nodes_of("op"):
        if node.id in python:
            continue
        where = f"node {node.id} ({node.op_type} at {node.location})"
        if node.op_type in VARIABLE_OPS:
            key = variable_key(node)
            if key not in handles:
                out[node.id] = f"{where} uses a variable made in the loop or several variables"
        else:
            op_def = op_def_registry.get(node.op_type)
            if op_def is None or op_def.is_stateful:
                out[node.id] = f"{where} has effects the program cannot hold back to the commit"
    return out


def variable_key(node: TraceNode) -> str:
    """The key of the variable a variable op uses ("" when it is not always the same one).
    A handle made by an op (a variable made in the first iteration) is on a cut path."""
    keys = [s.detail for s in node.sources[0] if s.kind == "var"]
    return keys[0] if len(keys) == 1 else ""


# -- at run time: the whole program's executor (program_runner.py) --------------------------


def unvalued(records: list) -> list[tuple[int, int, Placeholder]]:
    """(op position, output, placeholder) of the issued ops' outputs Python still holds that
    have no value yet."""
    return [(position, k, ph) for position, (_, _, refs) in enumerate(records)
            for k, ref in enumerate(refs) if (ph := ref()) is not None and ph.value is None]


def give_values(targets: list, values: list) -> None:
    """The replayed values into their placeholders (no longer waited for in a fetch queue)."""
    for (_, _, ph), value in zip(targets, values):
        ph.replay(value)


def fed_index(options: tuple) -> int | None:
    for i, o in enumerate(options):
        if o == FEED or type(o) is Constant:
            return i
    return None


def index_of(options: tuple, node: int, output: int) -> int:
    for i, s in enumerate(options):
        if type(s) is Source and s.index == node and s.output == output:
            return i
    raise PathError(f"an input comes from node {node}, which the program never feeds there")
