"""The segment plan: the ops Python issued, flushed to the GraphRunner as straight-line segments
(issued into TensorFlow's asynchronous executor at once: Python goes on while they run).

Issued ops wait in the pending list; a flush sends them as one ``WorkItem`` when the list grows to
``chunk_ops``, when Python issues an op whose value it read in an earlier iteration or a call
learned to be long (the graph computes it while Python goes on: early_start.py), when Python
needs a value, and at the end of the iteration.
The graph only ever runs ops Python has already issued, so nothing unconfirmed takes effect, and
a divergence needs no undo: the graph catches up and the iteration goes on in tracing.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tensorflow.python.framework import dtypes, ops

from ..capture.placeholder import Placeholder
from ..errors import TerraError
from ..timeline import RunnerSpan
from .executor import IssuedOp, KeptPlaceholders
from .graph_runner import GraphRunner, WorkItem
from .interrupts import DeferredInterrupts
from .lower import Wire

_EAGER = ops.EagerTensor
_RESOURCE_ENUM = dtypes.resource.as_datatype_enum


class PythonLane:
    """The PythonRunner's lane of the timeline: its stalls (waiting for the graph) and its feed
    and fetch moments, in the current iteration and phase."""

    def __init__(self) -> None:
        self.iteration = 0
        self.state = "tracing"  # the PythonRunner's: "coexec" or "tracing"
        self.stall = 0.0  # seconds waited in this iteration
        self.feeds = 0  # op inputs fed from Python in this iteration
        self.spans: list[RunnerSpan] = []

    @property
    def phase(self) -> str:
        return "coexec" if self.state == "coexec" else "fallback"

    def stalled(self, start: float) -> None:
        end = time.perf_counter()
        self.stall += end - start
        if end - start > 2e-5:  # a queue put that did not block is no stall worth drawing
            self.spans.append(RunnerSpan("python", "stall", self.iteration, self.phase, start, end))

    def moment(self, kind: str) -> None:
        now = time.perf_counter()
        self.spans.append(RunnerSpan("python", kind, self.iteration, self.phase, now, now))


class SegmentExecutor:
    """Runs issued ops as segments in a ``GraphRunner`` (the ``Executor`` of the segment plan)."""

    claims_pure_calls = False

    def __init__(self, graph: GraphRunner, handles: dict[int, Any], lane: PythonLane,
                 kept: KeptPlaceholders, interrupts: DeferredInterrupts, *, lazy: bool,
                 chunk_ops: int, prefetch: set[int] | frozenset[int]) -> None:
        self.graph = graph
        self.interrupts = interrupts  # a Ctrl-C waits until a flush is whole
        self.handles = handles
        self.lane = lane
        self.kept = kept
        self.lazy = lazy
        # lazy mode is LazyTensor: the graph runs only when Python needs a value, in one piece
        self.chunk_ops = 1 << 30 if lazy else chunk_ops
        self.prefetch = frozenset() if lazy else prefetch
        self.long_calls = set() if lazy else graph.long_calls.names  # early_start.py
        self.failed: BaseException | None = None  # a segment's failure reaches Python directly
        self._pending: list[IssuedOp] = []

    def computes(self, entry) -> bool:
        return False

    def issue(self, op: IssuedOp) -> int:
        self._pending.append(op)
        if len(self._pending) >= self.chunk_ops or op.node in self.prefetch \
                or op.entry.op_type in self.long_calls:
            self.flush()  # the graph computes it while Python goes on
        return 0  # its feeds are counted when its segment is built

    def catch_up(self) -> None:
        self.flush()
        self.wait_idle()

    def end_iteration(self) -> None:
        self.flush()
        if self.lazy:
            self.wait_idle()

    def abandon(self) -> None:
        self.catch_up()  # nothing unconfirmed ever ran: the graph only catches up

    def sync(self, deliver: bool = True) -> None:
        if self.graph.busy:
            self.wait_idle(deliver)

    def close(self) -> None:
        try:
            self.catch_up()
        finally:
            self.graph.close()

    # -- flushing ---------------------------------------------------------------------------

    def flush(self, upto: int | None = None) -> None:
        """Send the first ``upto`` (default: all) pending ops to the GraphRunner as one segment
        (returns at once; in lazy mode, once the graph has run it)."""
        if not self._pending:
            return
        self.interrupts.enter()  # never half-submitted: placeholders would wait forever
        try:
            head = self._pending[:upto] if upto is not None else self._pending
            self._pending = self._pending[len(head) :]
            self._submit(head)
        finally:
            self.interrupts.leave()

    def _submit(self, head: list[IssuedOp]) -> None:
        ops_key, entries, args, outs, fed = _build(head, self.handles)
        self.lane.feeds += fed
        head.clear()
        # A placeholder only this executor refers to (the ``outs`` tuple, the loop variable and
        # getrefcount's argument) can never be used again: its value need not leave the graph.
        kept = [(p, k, ph) for p, k, ph in outs if sys.getrefcount(ph) > 3]
        key = (ops_key, tuple((p, k) for p, k, _ in kept))
        item = WorkItem(key, entries, args, [ph for _, _, ph in kept], self.lane.iteration,
                        self.lane.state)
        for _, _, ph in kept:
            ph.bind(item)
        self.kept.add([ph for _, _, ph in kept])
        if fed:
            self.lane.moment("feed")  # values from Python enter the graph with this segment
        start = time.perf_counter()
        self.graph.submit(item)
        if self.lazy:
            self.graph.wait_for(item)
        self.lane.stalled(start)

    # -- values -----------------------------------------------------------------------------

    def materialise(self, placeholder: Placeholder):
        """A fetch: the real value of ``placeholder``, waiting for the graph if needed."""
        if placeholder.value is None:
            if placeholder.item is None:
                # Split at the op that makes the value: Python waits for that part only, and the
                # ops issued after it run while Python goes on.
                self.flush(self._position(placeholder) + 1)
            self.flush()  # queued now, the graph goes on to them without waiting for Python
            item = placeholder.item
            if item is None:
                if placeholder.value is not None:  # lazy: run at once, its item settled and pruned
                    return placeholder.value
                raise TerraError(f"the value of node {placeholder.node} was not kept")
            start = time.perf_counter()
            self.graph.wait_for(item)
            self.lane.stalled(start)
            if item.error is not None:
                self.graph.deliver(item.error)
            if self.lazy:
                self.wait_idle()
        return placeholder.value

    def _position(self, placeholder: Placeholder) -> int:
        for position, op in enumerate(self._pending):
            if any(o is placeholder for o in op.outputs):
                return position
        return len(self._pending) - 1

    def wait_idle(self, deliver: bool = True) -> None:
        start = time.perf_counter()
        try:
            self.graph.wait_idle(deliver)
        finally:
            self.lane.stalled(start)


def _build(head: list[IssuedOp], handles: dict[int, Any]) -> tuple[tuple, list, list, list, int]:
    """The ops' key (entry uid, input wiring and device per op), entries, arguments, outputs,
    and the number of op inputs fed from Python (as a trace counts feeds)."""
    ops_key, entries, args, produced, outs, fed = [], [], [], {}, [], 0
    arg_of: dict[int, int] = {}
    for position, op in enumerate(head):
        wiring = []
        for x in op.inputs:
            if type(x) is Placeholder and id(x) in produced:
                wiring.append(produced[id(x)])
            elif type(x) is _EAGER and x._datatype_enum() == _RESOURCE_ENUM:
                handles[x._id] = x
                wiring.append(Wire("var", x._id))
            elif type(x) is Placeholder or type(x) is _EAGER:  # one argument per tensor
                fed += type(x) is _EAGER
                index = arg_of.get(id(x))
                if index is None:
                    index = arg_of[id(x)] = len(args)
                    args.append(x)
                wiring.append(Wire("arg", index))
            else:  # a Python value: its dtype is this input's (the same 1 may be int or float)
                fed += 1
                wiring.append(Wire("arg", len(args)))
                args.append(x)
        ops_key.append((op.entry.uid, tuple(wiring), op.device))
        entries.append(op.entry)
        for k, ph in enumerate(op.outputs):
            produced[id(ph)] = Wire("op", position, k)
            outs.append((position, k, ph))
    return tuple(ops_key), entries, args, outs, fed
