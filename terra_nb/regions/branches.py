"""Branch decisions inside a call: boolean scalars its Python read (``tf.cond`` and Keras'
``ops.cond`` decide in Python when eager: LossScaleOptimizer reads whether the gradients are
finite, and whether to grow its scale).

Such a read becomes part of the guard when its value can be computed before the call changes
anything: every op it depends on is pure, or reads a variable no earlier op of the call writes.
``guard_segment`` is then those ops alone, returning the values read; a hit runs it first and
goes on only if every value equals the recorded one (else the call is a guard miss and runs op
by op, before anything changed). Any other read is a Python-visible effect.
"""

from __future__ import annotations

from tensorflow.python.framework import op_def_registry

from ..coexec.lower import Segment, SegmentOp, Wire

_READ = "ReadVariableOp"


def _stateful(op_type: str) -> bool:
    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful


def _first_writes(rec) -> dict[int, int]:
    """Capture key of a handle -> position of the first op that may write it."""
    first: dict[int, int] = {}
    for p, op in enumerate(rec.ops):
        if op.op_type != _READ and _stateful(op.op_type):
            for w in op.inputs:
                if w.kind == "var" and w.index in rec.handles:
                    first.setdefault(w.index, p)
    return first


def _needed(rec) -> set[int]:
    """The ops the branch values depend on."""
    needed: set[int] = set()
    stack = [p for p, _, _ in rec.branches]
    while stack:
        p = stack.pop()
        if p not in needed:
            needed.add(p)
            stack += [w.index for w in rec.ops[p].inputs if w.kind == "op"]
    return needed


def guard_segment(rec) -> Segment | None:
    """The ops computing the branch values of ``rec`` ahead of the call, or None when one of
    them cannot be computed ahead (it depends on a stateful op, or on a variable the call
    writes before reading it)."""
    first = _first_writes(rec)
    needed = sorted(_needed(rec))
    for p in needed:
        op = rec.ops[p]
        if op.op_type == _READ:
            if first.get(op.inputs[0].index, p) < p:
                return None
        elif _stateful(op.op_type):
            return None
    at = {p: i for i, p in enumerate(needed)}
    ops = tuple(
        SegmentOp(i, rec.ops[p].op_type, rec.ops[p].attrs,
                  tuple(Wire("op", at[w.index], w.output) if w.kind == "op" else w
                        for w in rec.ops[p].inputs),
                  rec.ops[p].n_outputs)
        for i, p in enumerate(needed))
    return Segment(ops, rec.args, tuple((at[p], k) for p, k, _ in rec.branches))
