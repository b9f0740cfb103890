"""The PythonRunner: the capture sink that answers ops with placeholders during co-execution.

Per op call (``run_op``): a pure op on real values runs as usual; an op that touches a
placeholder or a variable is looked up by its call signature in the ``SignatureIndex`` (learned in
tracing) and answered with placeholders of the traced shapes, without computing anything; the op
joins the pending segment, which is flushed to the GraphRunner when it grows, when Python needs a
value (a fetch) and at the end of the iteration; a ``tf.function`` call is one such op. An op that
needs real inputs (data-dependent output shapes, a stateful op without a variable) runs eagerly
once the graph has caught up. The graph runs only issued ops; an unknown call is a *divergence*:
the rest runs eagerly, traced."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tensorflow.python.eager import context, execute, record
from tensorflow.python.eager.core import _FallbackException
from tensorflow.python.framework import dtypes

from .. import capture
from ..capture import forward_mode
from ..capture.functions import learn
from ..capture.hooks import FINALISER_OPS
from ..capture.location import LocationTable
from ..capture.placeholder import Placeholder
from ..capture.recorder import TraceRecorder
from ..capture.signature import (
    FAST_FALLBACK,
    ITERATOR_OPS,
    RUN_FOR_REAL,
    Entry,
    SignatureIndex,
    call_signature,
    op_info,
    op_type_of,
)
from ..errors import TerraError
from ..timeline import RunnerSpan
from ..trace.records import TensorRef, Trace
from .call_args import (
    SHAPE_RULES,
    ResizableVariables,
    flat_inputs,
    light_args,
    scan_inputs,
    shaped_outputs,
    tape_inputs,
)
from .control_flow import PathError
from .executor import FLUSH_AT, Executor, IssuedOp, KeptPlaceholders
from .graph_runner import GraphRunner
from .input_pipeline import waits_for_graph
from .interrupts import DeferredInterrupts
from .iterator_release import IteratorRelease
from .pure_memo import PureOpMemo
from .segment_executor import PythonLane, SegmentExecutor
from .shapes import infer_entry, value_shaped


class PythonRunner:
    """Capture sink for coexec and lazy modes (also traces, after a divergence or in warm-up).

    It matches calls and makes placeholders; what runs them is an ``Executor``: the segment plan
    (always there), or for an iteration begun with one, another plan such as the whole program.
    """

    intercepts = True

    def __init__(self, locations: LocationTable, index: SignatureIndex, *, lazy: bool,
                 xla: bool, chunk_ops: int = FLUSH_AT, compile_after: int = 2,
                 handles: dict | None = None, names: dict | None = None,
                 split_cores: bool = True) -> None:
        self.locations = locations
        self.index = index
        self.lazy = lazy
        self.log = TraceRecorder(locations, handles, names)
        self.handles: dict[int, Any] = {}
        self.graph = GraphRunner(
            self.handles, xla=xla, compile_after=compile_after,
            split_cores=split_cores and not lazy,  # lazy mode waits for each run: no overlap
            where=lambda node: locations.locations[index.node_locs[node]]
            if node in index.node_locs else None)
        self.lane = PythonLane()
        self.kept = KeptPlaceholders()
        self.interrupts = DeferredInterrupts()
        # lazy mode is LazyTensor: nothing runs before Python asks for it
        self.segments = SegmentExecutor(self.graph, self.handles, self.lane, self.kept,
                                        self.interrupts, lazy=lazy, chunk_ops=chunk_ops,
                                        prefetch=index.fetched_nodes)
        self.executor: Executor = self.segments  # this iteration's
        self.plans: list[Executor] = [self.segments]  # every executor used so far
        self.iteration = self.fetches = self.ops = 0
        self.divergence: tuple[str, str, str] | None = None  # (reason, op type, location)
        self._context = context.context()
        self.resizable = ResizableVariables()
        self.pure = PureOpMemo()
        self._slow_for_real = False  # the next call is the slow path of an op run for real
        self.released = IteratorRelease()  # iterators the loop drops, destroyed off its thread

    @property
    def state(self) -> str:
        """``coexec`` (ops answered with placeholders) or ``tracing`` (ops run eagerly)."""
        return self.lane.state

    @state.setter
    def state(self, value: str) -> None:
        self.lane.state = value

    @property
    def feeds(self) -> int:
        return self.lane.feeds

    # -- iterations -------------------------------------------------------------------------

    def begin(self, root_frame, iteration: int, coexec: bool,
              plan: Callable[[], Executor] | None = None) -> None:
        """Start an iteration: co-executed (by the executor ``plan()`` begins for it if given,
        else in segments) or traced."""
        self.log.begin(root_frame)
        self.iteration = self.lane.iteration = iteration
        self.state = "coexec" if coexec else "tracing"
        self.executor = self.segments
        if coexec and plan is not None:
            self.executor = plan()
            if self.executor not in self.plans:
                self.plans.append(self.executor)
        self.lane.stall, self.lane.feeds, self.fetches = 0.0, 0, 0
        self.divergence = None
        self.pure.new_iteration()
        self.released.sweep()
        self.path: list[int] = []  # nodes answered with placeholders this iteration

    def take_stall_spans(self) -> list[RunnerSpan]:
        """This iteration's PythonRunner stalls and feed/fetch moments, cleared."""
        spans, self.lane.spans = self.lane.spans, []
        return spans

    def end(self) -> Trace | None:
        """Close the iteration: its trace if any of it was traced, else None."""
        if self.executor.failed is not None:
            self.state = "tracing"  # the rest of it ran eagerly
        if self.state == "coexec":
            try:
                self.executor.end_iteration()
            except PathError as error:
                for ph in getattr(error, "escaping", ()):  # a fetch point from now on
                    self.log.on_fetch(TensorRef(ph))
                self._leave_plan(str(error), "(end of iteration)", "")
        self.executor = self.segments
        self.segments.end_iteration()
        self.ops = self.log.count
        if self.state == "coexec":
            self.log.discard()
            return None
        return self.log.finish(self.iteration)

    def drain(self) -> None:
        """Run every confirmed op and raise a failure Python was not told of yet."""
        for plan in self.plans:
            if plan is self.segments:
                plan.catch_up()  # flushes what is pending too
            else:
                plan.sync()

    def close(self) -> None:
        """Run every confirmed op, stop the graph side, keep live placeholders usable."""
        try:
            # the last plan first: a whole program's run waiting for Python holds the thread
            for plan in reversed(self.plans):
                plan.close()
        finally:
            self.graph.close()
            self.released.close()
            capture.hold_until_collected(self.kept.hand_over())

    # -- the hook ---------------------------------------------------------------------------

    def run_op(self, run, op_name, args, attrs, frame):
        self.interrupts.enter()
        try:
            return self._run_op(run, op_name, args, attrs, frame)
        finally:
            self.interrupts.leave()

    def _run_op(self, run, op_name, args, attrs, frame):
        loc = self.locations.locate(frame)
        if self.state != "coexec" or self._slow_for_real:  # (the slow path of an op run for real)
            self._slow_for_real = False
            return self._trace_op(run, op_name, args, attrs, loc)
        op_type = op_type_of(op_name)
        info = op_info(op_type)
        if info.function:
            learn(op_type, frame)  # its output specs, from the calling frames
        if op_type in ITERATOR_OPS:  # the input pipeline runs in Python: it may read the graph's
            reads = waits_for_graph(op_type, frame)  # writes (input_pipeline.py)
            self.released.keep(op_type, args, frame)
            return (self._run_for_real if reads else self._trace_op)(run, op_name, args, attrs, loc)
        inputs = args if attrs is not None else args[: info.n_inputs]
        flat = flat_inputs(inputs)
        placeholders, resources = scan_inputs(flat)
        if not placeholders and not resources and not info.stateful:
            if self.executor.claims_pure_calls:
                entry = self._claimed_entry(op_name, args, attrs, loc)
                if entry is not None:  # its inputs may be placeholders in other iterations
                    return self._answer(run, entry, op_name, args, attrs, flat, loc)
            return self._pure_op(run, op_name, args, attrs, flat, loc, info.function)
        if op_type in SHAPE_RULES and not resources:
            return self._fold(op_type, op_name, args, attrs, flat, loc)
        host = not info.known or (info.stateful and not resources)
        if host or resources and self.resizable.read_by(flat):
            return self._run_for_real(run, op_name, args, attrs, loc)
        sig = call_signature(op_name, args, attrs, loc)
        entry = self.index.entries.get(sig)
        if entry is None:
            entry = infer_entry(self.index, sig, inputs, attrs, flat)
            if entry is None:
                return self._diverge(run, op_name, args, attrs, loc, self.index.why_unknown(sig))
        if entry is FAST_FALLBACK:
            raise _FallbackException("terra-nb: the slow path handles this call")
        if entry is RUN_FOR_REAL or self._value_shaped(entry, sig):
            return self._run_for_real(run, op_name, args, attrs, loc)
        return self._answer(run, entry, op_name, args, attrs, flat, loc)

    def _pure_op(self, run, op_name, args, attrs, flat: list, loc: int, function: bool):
        """A stateless op on real values (``flat`` its inputs): the outputs of its call on the
        same values before (``PureOpMemo``: an eager op is slow while the graph runs), else it
        runs; if it fails, an op issued before it that failed in the graph is raised first."""
        key = None if function else self.pure.key(op_name, args, attrs, flat,
                                                  self._context.device_name)
        outputs = None if key is None else self.pure.get(key)
        if outputs is None:
            try:
                outputs = self._run_traced(run, op_name, args, attrs, loc)  # (no placeholder)
            except Exception as error:  # as eager would: the first failure in program order
                if not isinstance(error, _FallbackException):
                    self._catch_up("an op failed on real values", op_type_of(op_name), loc)
                raise
            if key is not None:
                self.pure.put(key, outputs)
            return outputs
        self.log.record(op_name, light_args(args), attrs, outputs, loc)
        return outputs

    def _run_for_real(self, run, op_name, args, attrs, loc: int,
                      reason: str = "an op Python must run for real"):
        """Run an op whose real outputs Python must see, once the graph has caught up."""
        self._catch_up(reason, op_type_of(op_name), loc)
        return self._trace_op(run, op_name, args, attrs, loc)

    def _catch_up(self, reason: str, op_type: str, loc: int) -> None:
        """Let the graph run everything issued; a plan that cannot hand over its state
        mid-iteration (the whole program) is left for the rest of the iteration."""
        try:
            self.executor.catch_up()
        except PathError:
            self._leave_plan(reason, op_type, self._where(loc))
        self.segments.catch_up()

    def _value_shaped(self, entry: Entry, sig: tuple) -> bool:
        """Whether ``entry``'s traced output shapes may not hold for another call with ``sig``
        (shape inference cannot prove them static); decided once per entry."""
        known = self.index.value_shaped.get(entry.uid)
        if known is None:
            known = self.index.value_shaped[entry.uid] = value_shaped(entry, sig)
        return known

    def _claimed_entry(self, op_name, args, attrs, loc: int) -> Entry | None:
        """The entry of a pure call on real values that the iteration's executor computes (a
        value carried from an iteration that was traced, say); None if Python computes it."""
        sig = call_signature(op_name, args, attrs, loc)
        entry = self.index.entries.get(sig)
        computed = type(entry) is Entry and self.executor.computes(entry)
        return entry if computed and not self._value_shaped(entry, sig) else None

    def on_fetch(self, tensor) -> None:
        self.fetches += 1
        self.log.on_fetch(tensor)

    def on_fast_fallback(self, op_name, args, frame) -> None:
        # light: a placeholder the log held would look alive, and its value would leave the graph
        self.log.on_fast_fallback(op_name, light_args(args), frame)

    # -- answering with placeholders --------------------------------------------------------

    def _answer(self, run, entry: Entry, op_name, args, attrs, flat: list, loc: int):
        if self.executor.failed is not None:  # Python caught the error of the plan's run
            self.executor, self.state = self.segments, "tracing"
            return self._trace_op(run, op_name, args, attrs, loc)
        if forward_mode.active and forward_mode.recording():  # (JVPs need real values)
            return self._run_for_real(run, op_name, args, attrs, loc, forward_mode.REASON)
        node = entry.node
        for x in flat:  # a loop, not any(): this runs for every op
            if type(x) is np.ndarray:  # the graph reads it later: copy it now
                flat = [x.copy() if type(x) is np.ndarray else x for x in flat]
                break
        device = self._context.device_name or ""  # the user's tf.device scope, if any
        executor = self.executor
        outs = [Placeholder(spec, self, node, k, device, executor)
                for k, spec in enumerate(entry.outputs)]
        try:
            fed = executor.issue(IssuedOp(entry, flat, outs, device, loc, self.log.last_loc))
        except PathError as error:
            self._leave_plan(str(error), entry.op_type, self._where(loc))
            return self._trace_op(run, op_name, args, attrs, loc)
        self.lane.feeds += fed  # after the call: a flush inside it counts feeds too
        self.path.append(node)
        self.log.record(op_name, light_args(args), attrs, list(map(TensorRef, outs)), loc, device)
        # a slow-path call (attrs given: a wrapper's eager fallback) is taped by its caller
        if attrs is None and record.could_possibly_record():
            execute.record_gradient(entry.op_type, tape_inputs(flat, entry), entry.flat_attrs, outs)
        return shaped_outputs(entry, outs)

    def _trace_op(self, run, op_name, args, attrs, loc: int):
        if attrs is None and record.could_possibly_record() and capture.holds_placeholder(args):
            # the fast path would tape the op on the placeholder's value, behind a link eager's
            # tape lacks (which changes the order its gradients are summed in); the slow path
            # tapes it on the placeholder itself
            self.log.attempted(op_name, light_args(args), loc)
            self._slow_for_real = self.state == "coexec"
            raise _FallbackException("terra-nb: the slow path tapes placeholder inputs")
        return self._run_traced(run, op_name, args, attrs, loc)

    def _run_traced(self, run, op_name, args, attrs, loc: int):
        if self.divergence is None:  # the hot path: no context manager per op
            real = capture.real_values(args)
        else:  # after one, inputs are not fetches: its ops are known in the next iteration
            with capture.quiet_reads():
                real = capture.real_values(args)
        try:
            outputs = run(real)
        except _FallbackException:
            self.log.attempted(op_name, light_args(args), loc)
            raise
        self.log.record(op_name, light_args(args), attrs, outputs, loc)
        return outputs

    def _fold(self, op_type: str, op_name, args, attrs, flat: list, loc: int):
        """Shape, Size, Rank of placeholders are known statically: answer with real values, so
        what is computed from shapes (gradient broadcasting, reshapes) stays concrete."""
        pairs = attrs if attrs is not None else args[op_info(op_type).n_inputs :]
        attr = dict(zip(pairs[::2], pairs[1::2]))
        out_type = dtypes.as_dtype(attr.get("out_type", dtypes.int32))
        with capture.bypass():
            outputs = SHAPE_RULES[op_type](flat, out_type)
        self.log.record(op_name, light_args(args), attrs, outputs, loc)
        if attrs is not None or op_type == "ShapeN":
            return outputs
        return outputs[0]

    def _where(self, loc: int) -> str:
        return self.locations.locations[loc].where

    def _diverge(self, run, op_name, args, attrs, loc: int, reason: str):
        """The iteration leaves its plan at this op (``reason``) and runs it eagerly."""
        self._leave_plan(reason, op_type_of(op_name), self._where(loc))
        self.segments.catch_up()
        return self._trace_op(run, op_name, args, attrs, loc)

    def _leave_plan(self, reason: str, op_type: str, where: str) -> None:
        """The iteration leaves its plan: the executor drops what Python did not confirm and gives
        every placeholder its value, and the iteration goes on in tracing."""
        self.divergence = (reason, op_type, where)
        self.state = "tracing"
        executor, self.executor = self.executor, self.segments
        executor.abandon()

    # -- values -----------------------------------------------------------------------------

    def materialise(self, placeholder: Placeholder):
        """A fetch: the real value of ``placeholder``, waiting for the graph if needed."""
        if placeholder.value is None:
            owner = placeholder.owner
            value = owner.materialise(placeholder)
            if value is None and owner is self.executor and self.state == "coexec":
                # not a value the plan gives Python: leaving it replays the iteration's ops
                self._leave_plan("a value the program does not fetch was read", "fetch",
                                 f"node {placeholder.node}")
            if placeholder.value is None:
                raise TerraError(f"the value of node {placeholder.node} was not kept")
        self.fetches += 1
        self.lane.moment("fetch")
        if not capture.reads_quietly():
            self.index.fetched_nodes.add(placeholder.node)  # learned in every mode
            self.log.on_fetch(TensorRef(placeholder))
        return placeholder.value

    def sync(self, op_name=None) -> None:
        """Wait until the graph has run everything submitted (before eager op ``op_name``
        between iterations touches state the graph may still be updating). A graph failure is
        raised here, but not into a variable's finaliser (Python would drop it): it stays for
        the next synchronisation point."""
        deliver = op_name is None or op_type_of(op_name) not in FINALISER_OPS
        for plan in self.plans:  # a plan running this iteration cannot settle before its end
            if plan is self.segments or plan is not self.executor or self.state != "coexec":
                plan.sync(deliver)
