"""Merging one long trace costs time linear in its ops.

A ``fit`` traced as one iteration repeats the same few ops (same keys, no user loop around
them) thousands of times. Each repeated op is a candidate for merging back into every earlier
node of its key; finding that all of them are its ancestors by a search from each made the
merge cubic (40 s for 2,345 ops). Counted in lines run, not timed.
"""

from __future__ import annotations

from pathlib import Path

from work_count import assert_linear, lines_run

import terra_nb.trace.merge as merge_module
from terra_nb.trace.merge import GraphBuilder
from terra_nb.trace.records import Source, TensorSpec, Trace, TraceOp

F = (TensorSpec("float32", (2,)),)
STEP = ("MatMul", "Add", "Relu", "Sum", "AssignSub")  # one step's op types


def op(index: int, op_type: str, loc: int, shape: int = 2) -> TraceOp:
    inputs = (Source("op", index - 1),) if index else (Source("feed", detail="numpy"),)
    spec = (TensorSpec("float32", (shape,)),)
    return TraceOp(index=index, op_type=op_type, attrs=(("T", "float32"),), loc=loc,
                   location=f"prog.py:{loc}", inputs=inputs, input_specs=spec, outputs=spec)


def repeated(steps: int, odd_shape_every: int = 0) -> Trace:
    """``steps`` repetitions of one step's ops at the same locations, in one iteration; with
    ``odd_shape_every``, every such step's first op has another shape (a branch off)."""
    ops = []
    for s in range(steps):
        for k, op_type in enumerate(STEP):
            odd = odd_shape_every and s % odd_shape_every == 0 and k == 0
            ops.append(op(len(ops), op_type, k, shape=3 if odd else 2))
    return Trace(iteration=0, ops=tuple(ops))


MERGE_FILES = {str(Path(merge_module.__file__))}


def _merge_lines(traces) -> callable:
    def count_at(steps: int, budget: int | None) -> int:
        builder = GraphBuilder()
        for make in traces[:-1]:
            builder.merge(make(steps))
        return lines_run(lambda: builder.merge(traces[-1](steps)), MERGE_FILES, budget)
    return count_at


def test_a_long_first_trace_merges_in_linear_time():
    assert_linear(_merge_lines([repeated]), n=30)


def test_a_long_trace_branching_off_a_long_graph_merges_in_linear_time():
    """The second trace leaves the graph at every third step and merges back: each merge back
    asks which of the step's earlier nodes do not reach the branch (a search over the graph
    each time, before)."""
    assert_linear(_merge_lines([repeated, lambda n: repeated(n, odd_shape_every=3)]), n=30)


def test_the_graph_is_what_it_was():
    """Repeated ops of one iteration stay a chain (each earlier node of the key reaches the
    current one); a branch off merges back into the oldest node that does not reach it."""
    builder = GraphBuilder()
    builder.merge(repeated(3))
    g = builder.finish()
    assert len(g.nodes) == 2 + 15 and len(g.edges) == 16
    covered = builder.merge(repeated(3))
    assert covered
    builder.merge(repeated(3, odd_shape_every=2))  # steps 0 and 2 start with a new shape
    g = builder.finish()
    ops = [n for n in g.nodes if n.kind == "op"]
    # step 2's odd MatMul is new (step 0's reaches it); each merges back into its step's Add
    assert len(ops) == 15 + 2
    adds = [n.id for n in ops if n.op_type == "Add"]
    odd = [n.id for n in ops if n.outputs[0].shape == (3,)]
    assert [b for a in odd for x, b in g.edges if x == a] == [adds[0], adds[2]]
