"""When a graph segment is worth compiling, and where its runs go until then.

Compiling a segment costs more than tracing it: TensorFlow instantiates the segment's function and,
again, every function it calls: a region's F and B are inlined into it (``graph_callee``), a
user's ``tf.function`` is instantiated anew for each caller (measured: a 468-op gradient function
cost 40 ms in each new caller, and ~15 ms plus ~0.15 ms per op in all for a new segment here). A
loop over variable lengths or random paths meets many segments, each a handful of times.

Until then a segment runs interpreted: its ops, region calls included, run one by one as eager runs
them, and a function called directly is instantiated once, for every segment that calls it. The
policy is ski rental: a segment is compiled once what its interpreted runs lost against compiled
runs reaches what its compile is estimated to cost, so a loop pays at most about twice the better
of the two, whether its segments recur ten times or ten thousand. A run loses its time outside the
functions its ops call, and per call what calling a function costs the runtime, which a compiled
segment saves by inlining its callees (``CALL_GAIN_S``): a compiled run spends the rest of the
calls' time alike (a segment of a few long calls has little to gain and a big compile). In the
Python thread it loses its wait for the graph too, and of the calls' time, what Python would have
done meanwhile: compiled, the segment runs on the GraphRunner thread while Python goes on until it
next needs the graph (a read, a wait). That overlap is measured when Python next needs the graph,
and paid then (``python_waits``). A step whose loss is read right after its segment gains none
(mlp-small: counting all the calls' time compiled its segments for nothing, 455 -> 312 it/s); one
that goes on to its next step meanwhile does (mlp-python's last segment, 1.2 ms of region calls
then 2 ms of Python: 3.4 -> 2.0 ms iterations once compiled). The estimate is scaled by what
compiles measured on this machine.

When the loop's length is known (its iterable has a ``len``: a list, a range, a finite
``tf.data.Dataset``; ``horizon``), the rental knows how long it lasts (``rental.py``): a segment
worth compiling compiles at its third submission, early in the loop, and one that would not pay
for its compile before the loop ends never does (rnn-varlen, lengths 6, 8, 10, 8: each length's
segments compiled after ~20 runs, mid-loop, where each compile held Python up; a 30-iteration
cell compiles what 30 iterations repay). Without a length, a segment on the loop's steady path
rents ``LOOKAHEAD`` iterations ahead, so a segment of plain ops compiles at once (yolov3, dcgan:
their compiles stay out of the timed iterations) while one that is mostly a region's calls still
does not (resnet50: the same throughput without, and 0.2 s less in all).

Until it is compiled, a segment that is mostly graph compute (its interpreted run takes far longer
than dispatching its ops) runs interpreted on the GraphRunner thread, so Python goes on meanwhile;
so does one whose every op calls a function (user ``tf.function``s, region calls), which
TensorFlow's runtime runs without the GIL. One that is mostly dispatch runs in the Python thread,
once the graph has caught up, where it costs what eager costs without the two threads contending
for the GIL: also one of calls and a few small ops (mlp-small's: moved to the GraphRunner, each
small op's dispatch contended with Python's for the GIL, and its iterations took 1.5x as long).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..capture.functions import function_def, kernel_state
from ..capture.signature import op_info
from .lower import Segment
from .rental import Rental

COMPILE_BASE_S = 0.015  # a new segment's compile and first run, before its ops ...
COMPILE_PER_OP_S = 0.00015  # ... and per op, those of the functions it calls included
DISPATCH_S = 0.00004  # dispatching one op eagerly from Python
# What a function call saves inlined in a compiled segment: 60-70 us alone
# (benchmarks/call_inlining.py), 0.1-0.2 ms a call in rnn-varlen's GraphRunner, 0.2-0.4 ms in
# mlp-small's (its tape G and Adam step: 1.15-1.51 ms a run interpreted, 0.76-0.79 compiled). A
# shorter call's time is all gain
CALL_GAIN_S = 0.0001
GRAPH_BOUND = 50.0  # a run this many times its ops' dispatch is mostly graph compute


@dataclass(kw_only=True)
class Young(Rental):
    """A segment not compiled yet: its plain data and its rent account (its compile estimate is
    before the policy's learned scale)."""

    segment: Segment
    call_ops: int = 0  # ops that call a function
    graph_bound: bool = False
    kernel_state: bool = False  # an op keeps state in its kernel: never compiled
    seconds: float = 0.0  # the mean time of its runs: graph-bound needs it and the last one

    @property
    def calls_only(self) -> bool:
        """Every op calls a function: TensorFlow runs it without the GIL."""
        return 0 < self.call_ops == len(self.segment.ops)


def _call_ops(segment: Segment) -> int:
    return sum(op_info(op.op_type).function for op in segment.ops)


def ops_to_compile(ops) -> int:
    """How many ops compiling ``ops`` (SegmentOps) instantiates: theirs and those of the functions
    they call (instantiated anew for each caller)."""
    n = len(ops)
    for op in ops:
        if op_info(op.op_type).function:
            fdef = function_def(op.op_type)
            n += len(fdef.node_def) if fdef is not None else 0
    return n


def compile_estimate(segment: Segment) -> float:
    """Seconds a compile of ``segment`` (and its first run) is estimated to take here."""
    return COMPILE_BASE_S + COMPILE_PER_OP_S * ops_to_compile(segment.ops)


class CompilePolicy:
    """Per segment key: interpreted until its interpreted runs have cost its compile estimate."""

    max_young = 4096  # young segments kept; forgetting one only delays its compile

    def __init__(self) -> None:
        self._young: dict[tuple, Young] = {}
        self._compiling: dict[tuple, float] = {}  # key -> its estimate, until its first run
        self.scale = 1.0  # measured compile cost / estimate, learned from each compile
        self.compile_seconds = 0.0  # spent compiling segments (and their first runs) so far
        self.horizon: int | None = None  # the iteration the loop ends before; None: not known
        # the last run in the loop's thread: (young, when it ended, its calls' seconds not paid
        # yet), until Python next needs the graph
        self._overlap: tuple[Young, float, float] | None = None

    def young(self, key: tuple, make) -> Young:
        """The young segment of ``key`` (``make()`` builds its Segment the first time)."""
        young = self._young.get(key)
        if young is None:
            if len(self._young) >= self.max_young:
                self._young.clear()
            segment = make()
            young = self._young[key] = Young(
                segment=segment, estimate=compile_estimate(segment), call_ops=_call_ops(segment),
                kernel_state=any(kernel_state(op.op_type) for op in segment.ops))
        return young

    def worth_compiling(self, key: tuple) -> bool:
        """Whether ``key``'s interpreted runs have cost what its compile would (or it was never
        seen young)."""
        young = self._young.get(key)
        if young is None:
            return True
        return young.due(self.horizon, self.scale)

    def ran(self, young: Young, seconds: float, calls: float = 0.0,
            waited: float | None = None, compiling: float = 0.0) -> None:
        """An interpreted run of ``young`` took ``seconds``, ``calls`` of them in the functions
        its ops call; in the loop's thread, after Python ``waited`` for the graph to run what was
        issued before it (None: on the GraphRunner thread, while Python went on), ``compiling``
        of that for compiles."""
        # a compiled run would spend the called functions' time alike (region F and B, user
        # functions): the rest is rent (dispatch, the parallelism one executor finds, and in the
        # loop's thread Python's wait for the graph). A wait for a compile is no rent: a compile
        # happens once, and rent is what later runs lose too (on rnn-varlen each compile's wait
        # was the next young segment's rent, and compiled it: every length's segments in the
        # benchmark's window)
        waited = None if waited is None else max(0.0, waited - compiling)
        inlined = min(calls, CALL_GAIN_S * young.call_ops)  # what compiled calls save
        lost = seconds - calls + inlined + (waited or 0.0)
        young.seconds += (seconds - young.seconds) / (young.runs + 1)
        # one slow run among quick ones is no graph compute (a busy machine), nor are slow
        # first runs (functions instantiated) once a quick one comes
        quick = min(seconds, young.seconds)
        young.graph_bound = (young.calls_only
                             or quick > GRAPH_BOUND * DISPATCH_S * len(young.segment.ops))
        young.paid(lost, seconds - calls + inlined if young.graph_bound else lost)
        if waited is not None:
            self._overlap = (young, time.perf_counter(), calls - inlined)

    def python_waits(self) -> None:
        """Python needs the graph now (a read, a wait): the last run in the loop's thread, had it
        been compiled, would have run its calls while Python went on until now. Pay that."""
        if self._overlap is None:
            return
        young, ended, calls = self._overlap
        self._overlap = None
        young.more(min(calls, time.perf_counter() - ended))

    def segments(self) -> tuple[Segment, ...]:
        """The young segments, oldest first."""
        return tuple(young.segment for young in self._young.values())

    def compiled(self, key: tuple) -> None:
        """``key`` is compiled: forget it as young (its estimate waits for ``learn``)."""
        young = self._young.pop(key, None)
        if young is not None:
            self._compiling[key] = young.estimate

    def learn(self, key: tuple, seconds: float) -> None:
        """``key``'s compile and first run took ``seconds``: scale later estimates to this
        machine (the estimate's constants were measured on one)."""
        self.compile_seconds += seconds
        estimate = self._compiling.pop(key, None)
        if estimate:
            self.scale = min(10.0, max(0.1, 0.5 * self.scale + 0.5 * seconds / estimate))
