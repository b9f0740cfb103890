"""When a graph segment is worth compiling (until then its ops are issued one by one).

Compiling a segment costs more than tracing it: TensorFlow instantiates the segment's function and,
again, every function it calls: a region's F and B are inlined into it (``graph_callee``), a
user's ``tf.function`` is instantiated anew for each caller (measured: a 468-op gradient function
cost 40 ms in each new caller, and ~15 ms plus ~0.15 ms per op in all for a new segment here). A
loop over variable lengths or random paths meets many segments, each a handful of times.

Until then a segment runs interpreted: its ops, region calls included, are issued one by one into
the executor, as eager runs them, and a function called directly is instantiated once, for every
segment that calls it. The policy is ski rental: a segment is compiled once what its interpreted
runs lost against compiled runs reaches what its compile is estimated to cost, so a loop pays at
most about twice the better of the two, whether its segments recur ten times or ten thousand. A
run's time is what the executor's timestamps say: from when it could start (issued, and the run
before it done) to its end stamp, which holds Python's issuing of its ops when that is the slower
of the two, never an issue time alone (a call returns at once, and a rent of issue times
compiled none of a GRU loop's 70 segments). A run loses its time outside the functions its ops
call, and per call what calling a function costs the runtime, which a compiled segment saves by
inlining its callees (``CALL_GAIN_S``): a compiled run spends the rest of the calls' time alike (a
segment of a few long calls has little to gain and a big compile). The calls' time is stamped
around them in a young segment's first runs and every fourth after (a stamp costs Python a
dispatch), and taken as the same share of the runs in between. A run's rent counts ``SPIKE``
times the segment's least at most (a run cut short by another process costs a compiled run as
much). The estimate is scaled by what compiles measured on this machine.

When the loop's length is known (its iterable has a ``len``: a list, a range, a finite
``tf.data.Dataset``; ``horizon``), the rental knows how long it lasts (``rental.py``): a segment
worth compiling compiles at its third submission, early in the loop, and one that would not pay
for its compile before the loop ends never does (rnn-varlen, lengths 6, 8, 10, 8: each length's
segments compiled after ~20 runs, mid-loop, where each compile held Python up; a 30-iteration
cell compiles what 30 iterations repay). Without a length, a segment on the loop's steady path
rents ``LOOKAHEAD`` iterations ahead, so a segment of plain ops compiles at once (yolov3, dcgan:
their compiles stay out of the timed iterations) while one that is mostly a region's calls still
does not (resnet50: the same throughput without, and 0.2 s less in all).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..capture.functions import function_def, kernel_state
from ..capture.signature import op_info
from .lower import Segment, interpretable
from .rental import Rental

COMPILE_BASE_S = 0.015  # a new segment's compile and first run, before its ops ...
COMPILE_PER_OP_S = 0.00015  # ... and per op, those of the functions it calls included
# What a function call saves inlined in a compiled segment: 60-70 us alone
# (benchmarks/call_inlining.py), 0.1-0.2 ms a call in rnn-varlen's GraphRunner, 0.2-0.4 ms in
# mlp-small's (its tape G and Adam step: 1.15-1.51 ms a run interpreted, 0.76-0.79 compiled). A
# shorter call's time is all gain
CALL_GAIN_S = 0.0001
TIMED_RUNS = 4  # a young segment's first runs time their calls, and every this many after
# A run's rent counts this many times its segment's least at most: on a machine the loop shares
# (2 cores, other processes) one run in three of a dozen small ops took 2-10x its usual 0.5 ms,
# which compiled would have taken as well, and compiled a loop of unknown length 3x as early
SPIKE = 2.0


@dataclass(kw_only=True)
class Young(Rental):
    """A segment not compiled yet: its plain data and its rent account (its compile estimate is
    before the policy's learned scale)."""

    segment: Segment
    call_ops: int = 0  # ops that call a function
    call_share: float = 0.0  # of a run's time, in its calls (mean of the runs that timed them)
    timed: int = 0  # runs that timed their calls
    kernel_state: bool = False  # an op keeps state in its kernel: never compiled
    interpretable: bool = True  # ``run_segment`` can run it (else it is compiled at once)

    def times_calls(self) -> bool:
        """Whether the run issued now stamps its calls (``submitted`` counts it already)."""
        return self.call_ops > 0 and (self.submitted <= TIMED_RUNS
                                      or self.submitted % TIMED_RUNS == 0)


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

    def young(self, key: tuple, make) -> Young:
        """The young segment of ``key`` (``make()`` builds its Segment the first time)."""
        young = self._young.get(key)
        if young is None:
            if len(self._young) >= self.max_young:
                self._young.clear()
            segment = make()
            young = self._young[key] = Young(
                segment=segment, estimate=compile_estimate(segment), call_ops=_call_ops(segment),
                kernel_state=any(kernel_state(op.op_type) for op in segment.ops),
                interpretable=interpretable(segment))
        return young

    def worth_compiling(self, key: tuple) -> bool:
        """Whether ``key``'s interpreted runs have cost what its compile would (or it was never
        seen young)."""
        young = self._young.get(key)
        if young is None:
            return True
        return young.due(self.horizon, self.scale)

    def ran(self, young: Young, seconds: float, calls: float | None = None) -> None:
        """An interpreted run of ``young`` took ``seconds`` on the executor, ``calls`` of them in
        the functions its ops call (None: not timed, the share of the runs that were)."""
        if calls is None:
            calls = young.call_share * seconds
        elif seconds > 0:
            young.timed += 1
            young.call_share += (min(1.0, calls / seconds) - young.call_share) / young.timed
        # a compiled run would spend the called functions' time alike (region F and B, user
        # functions): the rest is rent (dispatch, Python's issuing when the executor waited for
        # it, the parallelism one executor finds)
        inlined = min(calls, CALL_GAIN_S * young.call_ops)  # what compiled calls save
        lost = max(0.0, seconds - calls) + inlined
        young.paid(min(lost, SPIKE * young.least) if young.runs else lost)

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
