"""One iteration's trace: ordered op records with the lineage of every input.

Plain data, no TensorFlow: a ``Trace`` is what the recorder made of one iteration, and
``segment`` folds its flat op list into loop runs using the loop information of each op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Dtype name and shape of a value (``None`` for an unknown dimension or rank)."""

    dtype: str
    shape: tuple[int | None, ...] | None

    def __str__(self) -> str:
        short = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "bool"}
        dims = (
            "?"
            if self.shape is None
            else ",".join("?" if d is None else str(d) for d in self.shape)
        )
        return f"{short.get(self.dtype, self.dtype)}[{dims}]"


@dataclass(frozen=True, slots=True)
class Source:
    """Where an op input came from.

    ``op``: output ``output`` of op ``index`` of this iteration; ``carry``: of op ``index`` of the
    previous iteration; ``var``: a variable (``detail`` is its key); ``feed``: a value Python made
    (``detail`` is ``python``, ``numpy`` or ``tensor`` for an eager tensor made outside the ops).
    """

    kind: str
    index: int = -1
    output: int = 0
    detail: str = ""

    def __str__(self) -> str:
        if self.kind == "op":
            return f"%{self.index}" + (f".{self.output}" if self.output else "")
        if self.kind == "carry":
            return f"prev%{self.index}" + (f".{self.output}" if self.output else "")
        return f"{self.kind}:{self.detail}"


class TensorRef:
    """Stands for a tensor in the iteration log without keeping it (or its value) alive."""

    __slots__ = ("_id", "dtype", "shape")

    def __init__(self, tensor) -> None:
        self._id = tensor._id
        self.dtype = tensor.dtype
        self.shape = tensor.shape


@dataclass(frozen=True, slots=True)
class TraceOp:
    """One executed op. ``loops`` are the user loops around it (outermost first); ``new_iteration``
    is the loop that began a new iteration at this op, if any."""

    index: int
    op_type: str
    attrs: tuple[tuple[str, Any], ...]
    loc: int
    location: str
    inputs: tuple[Source, ...]
    input_specs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    fetched: tuple[int, ...] = ()
    loops: tuple[int, ...] = ()
    new_iteration: int | None = None
    device: str = ""  # the tf.device scope it ran in ("": none)

    @property
    def key(self) -> tuple:
        """What must be equal for two executions to be the same TraceGraph node."""
        return (self.op_type, self.attrs, self.loc, self.input_specs, self.outputs, self.device)

    def __str__(self) -> str:
        outs = ",".join(str(s) for s in self.outputs) or "()"
        args = " ".join(str(s) for s in self.inputs)
        fetch = "  fetch" if self.fetched else ""
        return f"%{self.index}:{outs} = {self.op_type} {args}  @{self.location}{fetch}"


@dataclass(frozen=True, slots=True)
class LoopRun:
    """One run of a user loop inside an iteration: the ops of each of its iterations."""

    loop: int
    iterations: tuple[Block, ...]


Block = tuple[TraceOp | LoopRun, ...]


@dataclass(frozen=True, slots=True)
class Trace:
    """The ops of one Terra iteration, in execution order."""

    iteration: int
    ops: tuple[TraceOp, ...]

    def __repr__(self) -> str:
        lines = [f"Trace(iteration={self.iteration}, {len(self.ops)} ops)"]
        lines += [f"  {op}" for op in self.ops]
        return "\n".join(lines)

    @property
    def feeds(self) -> int:
        return sum(s.kind == "feed" for op in self.ops for s in op.inputs)

    @property
    def fetches(self) -> int:
        return sum(len(op.fetched) for op in self.ops)


def segment(ops: tuple[TraceOp, ...]) -> Block:
    """Fold a flat op list into nested loop runs.

    Each op names the user loops around it and whether it began a new iteration of one; a stack of
    open loop runs follows those names (leaving, entering and iterating loops).
    """
    top: list = []
    stack: list[tuple[int, list[list]]] = []  # (loop id, iterations of the open run)
    for op in ops:
        kept = 0
        while kept < len(stack) and kept < len(op.loops) and stack[kept][0] == op.loops[kept]:
            kept += 1
        iterated = op.new_iteration
        if iterated is not None and iterated in op.loops[:kept]:
            kept = op.loops.index(iterated) + 1
            del stack[kept:]
            stack[-1][1].append([])
        else:
            del stack[kept:]
        for loop in op.loops[len(stack) :]:
            iterations: list[list] = [[]]
            (stack[-1][1][-1] if stack else top).append((loop, iterations))
            stack.append((loop, iterations))
        (stack[-1][1][-1] if stack else top).append(op)
    return _freeze(top)


def _freeze(items: list) -> Block:
    out = []
    for item in items:
        if isinstance(item, TraceOp):
            out.append(item)
        else:
            loop, iterations = item
            out.append(LoopRun(loop, tuple(_freeze(it) for it in iterations)))
    return tuple(out)
