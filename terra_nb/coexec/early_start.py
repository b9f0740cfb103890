"""Starting the graph early: a segment is flushed right after Python issues a long function call
(a region's forward F, a tape's gradient G), so the executor runs the call while Python goes on
issuing the rest of the iteration.

A step that Python reads only at its end (Keras's ``fit``: ``has_value()`` of the step's
``Optional``, then its logs) is otherwise one segment flushed at that read: the graph sits idle
while Python issues the step, and Python then waits for all of it, so the step takes Python's
time plus the graph's (the fit benchmark's CNN on 2 cores: 4.2 ms of Python, then a 7.2 ms
segment, serial).

Which calls are long is learned from the runs op by op that come before a segment is compiled
(``run_segment`` stamps each call): a call whose least run (the first instantiates its function)
took ``LONG_CALL_S`` or more. The flush points depend only on what was learned, so a steady
loop's segments keep the same keys (compiled once each). A short call is not worth it: each flush
is one more call issued, which a loop of small calls (mlp-small) would pay every iteration for
nothing. Only terra-nb's own functions start early (a region's F and B, a tape's G: the calls
that stand for Python the loop would have run); a segment of a user's long ``tf.function``
calls is graph compute that the compile policy already handles as such.
"""

from __future__ import annotations

from ..capture.functions import confirmed
from ..capture.signature import op_info
from .lower import Segment

LONG_CALL_S = 0.001  # a call this long starts the graph early (its least run op by op)
_RUNS = 2  # runs of a call before its least time counts (the first instantiates it)


class LongCalls:
    """The function calls (op types) worth flushing after: learned from stamped runs."""

    def __init__(self) -> None:
        self.names: set[str] = set()  # read by the segment plan for every issued op
        self._least: dict[str, tuple[float, int]] = {}  # op type -> (least seconds, runs)

    def ran(self, segment: Segment, calls: list[float] | None) -> None:
        """``segment``'s function calls took ``calls`` seconds each, in order (None: not
        stamped)."""
        if not calls:
            return
        called = [op.op_type for op in segment.ops if op_info(op.op_type).function]
        for name, seconds in zip(called, calls):
            if not confirmed(name):  # a user's tf.function: see the module docstring
                continue
            least, runs = self._least.get(name, (seconds, 0))
            least, runs = min(least, seconds), runs + 1
            self._least[name] = (least, runs)
            if runs >= _RUNS and least >= LONG_CALL_S:
                self.names.add(name)
            else:
                self.names.discard(name)
