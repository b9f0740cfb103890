"""The PythonRunner: the capture sink that answers ops with placeholders during co-execution.

Per op call (``run_op``): a pure op on real values runs as usual; an op that touches a
placeholder or a variable is looked up by its call signature in the ``SignatureIndex`` (learned in
tracing) and answered with placeholders of the traced shapes, without computing anything; the op
joins the pending segment, which is flushed to the GraphRunner when it grows, when Python needs a
value (a fetch) and at the end of the iteration. An op that needs real inputs (a function call, an
op with data-dependent output shapes, a stateful op without a variable) runs eagerly once the
graph has caught up.

The graph only ever runs ops Python has already issued, so nothing unconfirmed can take effect. A
call the index does not know is a *divergence*: the pending ops are flushed, the graph catches up,
and the rest of the iteration runs eagerly and is traced (fallback). The iteration log keeps every
op of the iteration, so a fallback iteration's trace is complete.
"""

from __future__ import annotations

import linecache
import sys
import time
import weakref
from typing import Any

import numpy as np
from tensorflow.python.eager import context, execute, record
from tensorflow.python.eager.core import _FallbackException
from tensorflow.python.framework import constant_op, dtypes, ops
from tensorflow.python.ops import resource_variable_ops

from .. import capture
from ..capture.attrs import with_list_lengths
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
from .control_flow import PathError
from .graph_runner import GraphRunner, WorkItem
from .handover import hand_over
from .interrupts import DeferredInterrupts
from .program_plan import Program
from .program_runner import WholeProgram
from .program_wiring import SHAPE_OPS
from .shapes import UNKNOWN, infer_outputs, input_specs, value_shaped

_EAGER = ops.EagerTensor
_RESOURCE_ENUM = dtypes.resource.as_datatype_enum
_FINALISER_OPS = frozenset({"DestroyResourceOp"})  # run by ``__del__``, where errors are lost


def _static(x) -> list[int]:
    return x.shape.as_list()


SHAPE_RULES = {
    "Shape": lambda flat, t: [constant_op.constant(_static(flat[0]), dtype=t)],
    "ShapeN": lambda flat, t: [constant_op.constant(_static(x), dtype=t) for x in flat],
    "Size": lambda flat, t: [constant_op.constant(int(np.prod(_static(flat[0]))), dtype=t)],
    "Rank": lambda flat, t: [constant_op.constant(len(_static(flat[0])), dtype=dtypes.int32)],
}  # index value: the fast path refused this call in tracing
assert SHAPE_RULES.keys() == SHAPE_OPS  # the whole program leaves these ops to Python


class PythonRunner:
    """Capture sink for coexec and lazy modes (also traces, after a divergence or in warm-up)."""

    intercepts = True

    def __init__(self, locations: LocationTable, index: SignatureIndex, *, lazy: bool,
                 xla: bool, chunk_ops: int = 512, compile_after: int = 2,
                 handles: dict | None = None) -> None:
        self.locations = locations
        self.index = index
        self.lazy = lazy
        # lazy mode is LazyTensor: the graph runs only when Python needs a value, in one piece
        self.chunk_ops = 1 << 30 if lazy else chunk_ops
        self.log = TraceRecorder(locations, handles)
        self.handles: dict[int, Any] = {}
        self.graph = GraphRunner(
            self.handles, xla=xla, compile_after=compile_after,
            describe=lambda node: index.node_locations.get(node, "?"),
        )
        self.state = "tracing"
        self.iteration = 0
        self.stall = 0.0
        self.fetches = 0
        self.feeds = 0
        self.ops = 0
        self._stall_spans: list[RunnerSpan] = []
        self.divergence: tuple[str, str, str] | None = None  # (reason, op type, location)
        self._pending: list[tuple[Entry, list, list[Placeholder], str]] = []
        self._context = context.context()
        self._kept: list[weakref.ref] = []  # placeholders whose values left the graph
        self._kept_limit = 4096
        self._resizable: dict[int, bool] = {}  # variable handle id -> shape not fully defined
        self.interrupts = DeferredInterrupts()
        # lazy mode is LazyTensor: nothing runs before Python asks for it
        self._prefetch: set[int] | frozenset[int] = frozenset() if lazy else index.fetched_nodes
        self.whole: WholeProgram | None = None  # Terra(program="whole"): the runtime of it
        self._whole_on = False  # this iteration runs in the whole program

    # -- iterations -------------------------------------------------------------------------

    def begin(self, root_frame, iteration: int, coexec: bool,
              program: Program | None = None) -> None:
        """Start an iteration: co-executed (in ``program`` if given, else in segments) or
        traced."""
        self.log.begin(root_frame)
        self.iteration = iteration
        self.state = "coexec" if coexec else "tracing"
        self._whole_on = coexec and program is not None
        if self._whole_on:
            if self.whole is None:
                self.whole = WholeProgram(self.handles, self.index.fetched_nodes)
            self.whole.begin(program, iteration)
        self.stall = 0.0
        self.fetches = 0
        self.feeds = 0
        self.divergence = None
        self.path: list[int] = []  # nodes answered with placeholders this iteration

    def take_stall_spans(self) -> list[RunnerSpan]:
        """This iteration's PythonRunner stalls (waiting for the graph) and feed/fetch moments,
        and clear them."""
        spans, self._stall_spans = self._stall_spans, []
        return spans

    def _stalled(self, start: float) -> None:
        end = time.perf_counter()
        self.stall += end - start
        if end - start > 2e-5:  # a queue put that did not block is no stall worth drawing
            phase = "coexec" if self.state == "coexec" else "fallback"
            span = RunnerSpan("python", "stall", self.iteration, phase, start, end)
            self._stall_spans.append(span)

    def end(self) -> Trace | None:
        """Close the iteration: its trace if any of it was traced, else None."""
        if self._whole_on and self.whole.failed is not None:
            self._whole_on, self.state = False, "tracing"  # the rest of it ran eagerly
        if self._whole_on and self.state == "coexec":
            escaping = self.whole.escaping()
            for ph in escaping:  # a fetch point from now on
                self.log.on_fetch(TensorRef(ph))
            try:
                if escaping:
                    raise PathError(f"a value of node {escaping[0].node} outlives the iteration")
                self.whole.end()
            except PathError as error:
                self._leave_program(str(error), "(end of iteration)", "")
        self._whole_on = False
        self.flush()
        if self.lazy:
            self._wait_idle()
        self.ops = self.log.count
        if self.state == "coexec":
            self.log.discard()
            return None
        return self.log.finish(self.iteration)

    def drain(self) -> None:
        """Run every confirmed op and raise a failure Python was not told of yet."""
        self.flush()
        self._wait_idle()
        if self.whole is not None:
            self.whole.settle()

    def close(self) -> None:
        """Run every confirmed op, stop the GraphRunner, keep live placeholders usable."""
        try:
            self.flush()
            self._wait_idle()
            if self.whole is not None:
                self.whole.close()
        finally:
            self.graph.close()
            alive = [ph for ref in self._kept if (ph := ref()) is not None]
            self._kept = []
            capture.hold_until_collected(hand_over(alive))

    # -- the hook ---------------------------------------------------------------------------

    def run_op(self, run, op_name, args, attrs, frame):
        self.interrupts.enter()
        try:
            return self._run_op(run, op_name, args, attrs, frame)
        finally:
            self.interrupts.leave()

    def _run_op(self, run, op_name, args, attrs, frame):
        loc = self.locations.locate(frame)
        if self.state != "coexec":
            return self._trace_op(run, op_name, args, attrs, loc)
        op_type = op_type_of(op_name)
        info = op_info(op_type)
        if op_type in ITERATOR_OPS:  # the input pipeline: no graph work touches an iterator
            return self._trace_op(run, op_name, args, attrs, loc)
        inputs = args if attrs is not None else args[: info.n_inputs]
        flat = _flat(inputs)
        placeholders, resources = _scan(flat)
        if not placeholders and not resources and not info.stateful:
            if self._whole_on:
                entry = self._program_entry(op_name, args, attrs, loc)
                if entry is not None:  # its inputs may be placeholders in other iterations
                    return self._answer(run, entry, op_name, args, attrs, flat, loc)
            return self._trace_op(run, op_name, args, attrs, loc)  # pure, on real values
        if op_type in SHAPE_RULES and not resources:
            return self._fold(op_type, op_name, args, attrs, flat, loc)
        host = not info.known or (info.stateful and not resources)
        if host or resources and self._reads_resizable_variable(flat):
            return self._run_for_real(run, op_name, args, attrs, loc)
        sig = call_signature(op_name, args, attrs, loc)
        entry = self.index.entries.get(sig)
        if entry is None:
            entry = self._infer(sig, inputs, attrs, flat)
            if entry is None:
                return self._diverge(run, op_name, args, attrs, loc, sig)
        if entry is FAST_FALLBACK:
            raise _FallbackException("terra-nb: the slow path handles this call")
        if entry is RUN_FOR_REAL or self._value_shaped(entry, sig):
            return self._run_for_real(run, op_name, args, attrs, loc)
        return self._answer(run, entry, op_name, args, attrs, flat, loc)

    def _run_for_real(self, run, op_name, args, attrs, loc: int):
        """Run an op whose real outputs Python must see (a function call, a stateful op without
        a variable, output shapes that depend on input values), once the graph has caught up."""
        if self._whole_on:  # the program cannot hand over its state mid-iteration
            self._leave_program("an op Python must run for real", op_type_of(op_name),
                                self._where(loc))
        self.flush()
        self._wait_idle()
        return self._trace_op(run, op_name, args, attrs, loc)

    def _value_shaped(self, entry: Entry, sig: tuple) -> bool:
        """Whether ``entry``'s traced output shapes may not hold for another call with ``sig``
        (shape inference cannot prove them static); decided once per entry."""
        known = self.index.value_shaped.get(entry.uid)
        if known is None:
            known = self.index.value_shaped[entry.uid] = value_shaped(entry, sig)
        return known

    def _program_entry(self, op_name, args, attrs, loc: int) -> Entry | None:
        """The entry of a pure call on real values whose node the whole program computes (a
        value carried from an iteration that was traced, say); None if Python computes it."""
        sig = call_signature(op_name, args, attrs, loc)
        entry = self.index.entries.get(sig)
        if type(entry) is not Entry or entry.node in self.whole.program.python_side:
            return None
        return None if self._value_shaped(entry, sig) else entry

    def _infer(self, sig: tuple, inputs, attrs, flat: list) -> Entry | str | None:
        """An answer to a call that differs from a known one only in input shapes, shape-defining
        values or the length of a list of equal inputs, with output shapes from inference."""
        sibling = self.index.sibling(sig)
        if sibling is None:
            return None
        if sibling is FAST_FALLBACK:
            return self.index.add(sig, sibling)
        op_attrs, specs = sibling.attrs, input_specs(flat, sibling.inputs)
        if len(flat) != len(sibling.inputs):  # a list of another length
            op_attrs = None if attrs is not None else with_list_lengths(
                sibling.op_type, op_attrs, inputs)
        if op_attrs is None or specs is None:
            return None
        outputs = infer_outputs(sibling, op_attrs, specs, sig)
        if outputs is UNKNOWN:  # a known call whose output shapes are data: it runs for real
            return self.index.add(sig, RUN_FOR_REAL)
        if outputs is None or [d for d, _ in outputs] != [s[0].name for s in sibling.outputs]:
            return None
        return self.index.add(sig, sibling, op_attrs, specs, outputs)

    def _reads_resizable_variable(self, flat: list) -> bool:
        """Whether an input is a variable whose shape may change (``shape=[None, ...]``): what
        reads it gets the shape the variable has when it runs, so it must run for real."""
        for x in flat:
            if type(x) is _EAGER and x._datatype_enum() == _RESOURCE_ENUM:
                resizable = self._resizable.get(x._id)
                if resizable is None:
                    resizable = self._resizable[x._id] = _resizable(x)
                if resizable:
                    return True
        return False

    def on_fetch(self, tensor) -> None:
        self.fetches += 1
        self.log.on_fetch(tensor)

    def on_fast_fallback(self, op_name, args, frame) -> None:
        # light: a placeholder the log held would look alive, and its value would leave the graph
        self.log.on_fast_fallback(op_name, _light(args), frame)

    # -- answering with placeholders --------------------------------------------------------

    def _answer(self, run, entry: Entry, op_name, args, attrs, flat: list, loc: int):
        if self._whole_on and self.whole.failed is not None:  # Python caught the error
            self._whole_on, self.state = False, "tracing"
            return self._trace_op(run, op_name, args, attrs, loc)
        node = entry.node
        for x in flat:  # a loop, not any(): this runs for every op
            if type(x) is np.ndarray:  # the graph reads it later: copy it now
                flat = [x.copy() if type(x) is np.ndarray else x for x in flat]
                break
        device = self._context.device_name or ""  # the user's tf.device scope, if any
        outs = [Placeholder(spec, self, node, k, device) for k, spec in enumerate(entry.outputs)]
        if self._whole_on:
            prev = self.log.last_loc  # where a new trip begins tells paths apart
            boundary = None if prev is None else self.locations.boundary(prev, loc)
            loops = self.locations.locations[loc].loops
            try:
                self.feeds += self.whole.issue(entry, flat, outs, boundary, loops)
            except PathError as error:
                self._leave_program(str(error), entry.op_type, self._where(loc))
                return self._trace_op(run, op_name, args, attrs, loc)
            self._keep(outs)  # any of them may outlive the loop
        else:
            self._pending.append((entry, flat, outs, device))
        self.path.append(node)
        self.log.record(op_name, _light(args), attrs, [TensorRef(o) for o in outs], loc)
        if record.could_possibly_record():
            execute.record_gradient(entry.op_type, _tensors(flat, entry), entry.flat_attrs, outs)
        if not self._whole_on and (len(self._pending) >= self.chunk_ops or node in self._prefetch):
            self.flush()  # a value Python read before: the graph computes it while Python goes on
        return _shaped(entry, outs)

    def _trace_op(self, run, op_name, args, attrs, loc: int):
        real = capture.real_values(args)
        try:
            outputs = run(real)
        except _FallbackException:
            self.log.attempted(op_name, _light(args), loc)
            raise
        self.log.record(op_name, _light(args), attrs, outputs, loc)
        return outputs

    def _fold(self, op_type: str, op_name, args, attrs, flat: list, loc: int):
        """Shape, Size, Rank of placeholders are known statically: answer with real values, so
        what is computed from shapes (gradient broadcasting, reshapes) stays concrete."""
        pairs = attrs if attrs is not None else args[op_info(op_type).n_inputs :]
        attr = dict(zip(pairs[::2], pairs[1::2]))
        out_type = dtypes.as_dtype(attr.get("out_type", dtypes.int32))
        with capture.bypass():
            outputs = SHAPE_RULES[op_type](flat, out_type)
        self.log.record(op_name, _light(args), attrs, outputs, loc)
        if attrs is not None or op_type == "ShapeN":
            return outputs
        return outputs[0]

    def _where(self, loc: int) -> str:
        """A location's text and its user source line, for ``explain()``."""
        location = self.locations.locations[loc]
        file, line, _ = location.user_frames[-1] if location.user_frames else ("", 0, "")
        source = linecache.getline(file, line).strip() if file else ""
        return f"{location.text}  {source}"

    def _diverge(self, run, op_name, args, attrs, loc: int, sig: tuple):
        op_type = op_type_of(op_name)
        self.divergence = (self.index.why_unknown(sig), op_type, self._where(loc))
        if self._whole_on:
            self._leave_program(*self.divergence)
        self.flush()
        self._wait_idle()
        self.state = "tracing"
        return self._trace_op(run, op_name, args, attrs, loc)

    def _leave_program(self, reason: str, op_type: str, where: str) -> None:
        """The iteration leaves the whole program: its run is dropped, the ops Python issued
        are replayed eagerly (placeholders get values), and it goes on in tracing."""
        self.divergence = (reason, op_type, where)
        self._whole_on = False
        self.state = "tracing"
        self.whole.abandon()

    # -- talking to the GraphRunner ---------------------------------------------------------

    def flush(self, upto: int | None = None) -> None:
        """Send the first ``upto`` (default: all) pending ops to the GraphRunner as one segment
        (returns at once; in lazy mode, once the graph has run it)."""
        self.interrupts.enter()
        try:
            if self._pending:
                head = self._pending[:upto] if upto is not None else self._pending
                self._pending = self._pending[len(head) :]
                self._submit(head)
        finally:
            self.interrupts.leave()

    def _submit(self, head: list) -> None:
        ops_key, entries, args, outs, fed = self._build(head)
        self.feeds += fed
        head.clear()
        # A placeholder only this runner refers to (the ``outs`` tuple, the loop variable and
        # getrefcount's argument) can never be used again: its value need not leave the graph.
        kept = [(p, k, ph) for p, k, ph in outs if sys.getrefcount(ph) > 3]
        key = (ops_key, tuple((p, k) for p, k, _ in kept))
        item = WorkItem(key, entries, args, [ph for _, _, ph in kept], self.iteration, self.state)
        for _, _, ph in kept:
            ph.item = item
        self._keep([ph for _, _, ph in kept])
        if fed:
            self._moment("feed")  # values from Python enter the graph with this segment
        start = time.perf_counter()
        self.graph.submit(item)
        if self.lazy:
            item.done.wait()
        self._stalled(start)

    def _keep(self, placeholders: list[Placeholder]) -> None:
        """Remember placeholders that may outlive the loop (handed over when it closes)."""
        self._kept.extend(weakref.ref(ph) for ph in placeholders)
        if len(self._kept) > self._kept_limit:  # amortised: the limit doubles with what lives
            alive = [ph for ref in self._kept if (ph := ref()) is not None]
            for ph in alive:  # settled: the work item is no longer needed (only its error was)
                item = ph.item
                if ph.value is not None and item is not None and item.done.is_set() \
                        and item.error is None:
                    ph.item = None
            self._kept = [weakref.ref(ph) for ph in alive]
            self._kept_limit = max(4096, 2 * len(alive))

    def _build(self, head: list) -> tuple[tuple, list, list, list, int]:
        """The ops' key (entry uid and input wiring per op), entries, arguments, outputs, and the
        number of op inputs fed from Python (as a trace counts feeds).
        Wiring: ("op", position, output) | ("arg", index, 0) | ("var", handle id, 0)."""
        ops_key, entries, args, produced, outs, fed = [], [], [], {}, [], 0
        arg_of: dict[int, int] = {}
        for position, (entry, flat, op_outs, device) in enumerate(head):
            wiring = []
            for x in flat:
                if type(x) is Placeholder and id(x) in produced:
                    wiring.append(produced[id(x)])
                elif type(x) is _EAGER and x._datatype_enum() == _RESOURCE_ENUM:
                    self.handles[x._id] = x
                    wiring.append(("var", x._id, 0))
                elif type(x) is Placeholder or type(x) is _EAGER:  # one argument per tensor
                    fed += type(x) is _EAGER
                    index = arg_of.get(id(x))
                    if index is None:
                        index = arg_of[id(x)] = len(args)
                        args.append(x)
                    wiring.append(("arg", index, 0))
                else:  # a Python value: its dtype is this input's (the same 1 may be int or float)
                    fed += 1
                    wiring.append(("arg", len(args), 0))
                    args.append(x)
            ops_key.append((entry.uid, tuple(wiring), device))
            entries.append(entry)
            for k, ph in enumerate(op_outs):
                produced[id(ph)] = ("op", position, k)
                outs.append((position, k, ph))
        return tuple(ops_key), entries, args, outs, fed

    def materialise(self, placeholder: Placeholder):
        """A fetch: the real value of ``placeholder``, waiting for the graph if needed."""
        if placeholder.value is None and self.whole is not None and placeholder.item is None:
            self._materialise_whole(placeholder)
        if placeholder.value is None:
            if placeholder.item is None:
                # Split at the op that makes the value: Python waits for that part only, and the
                # ops issued after it run while Python goes on.
                self.flush(self._position(placeholder) + 1)
            self.flush()  # queued now, the graph goes on to them without waiting for Python
            item = placeholder.item
            if item is None:
                raise TerraError(f"the value of node {placeholder.node} was not kept")
            start = time.perf_counter()
            item.done.wait()
            self._stalled(start)
            if item.error is not None:
                self.graph.deliver(item.error)
            if self.lazy:
                self._wait_idle()
        self.fetches += 1
        self.index.fetched_nodes.add(placeholder.node)  # learned in every mode; used by coexec
        self._moment("fetch")
        self.log.on_fetch(TensorRef(placeholder))
        return placeholder.value

    def _materialise_whole(self, placeholder: Placeholder) -> None:
        start = time.perf_counter()
        try:
            value = self.whole.materialise(placeholder)
        finally:
            self._stalled(start)
        if value is None and self._whole_on:  # not a fetch point: the program keeps it
            self._leave_program("a value the program does not fetch was read", "fetch",
                                f"node {placeholder.node}")

    def _moment(self, kind: str) -> None:
        """A feed or fetch moment on the PythonRunner's lane of the timeline."""
        now = time.perf_counter()
        phase = "coexec" if self.state == "coexec" else "fallback"
        self._stall_spans.append(RunnerSpan("python", kind, self.iteration, phase, now, now))

    def _position(self, placeholder: Placeholder) -> int:
        for position, (_, _, outs, _) in enumerate(self._pending):
            if any(o is placeholder for o in outs):
                return position
        return len(self._pending) - 1

    def sync(self, op_name=None) -> None:
        """Wait until the graph has run everything submitted (before eager op ``op_name``
        between iterations touches state the graph may still be updating). A graph failure is
        raised here, but not into a variable's finaliser (Python would drop it): it stays for
        the next synchronisation point."""
        deliver = op_name is None or op_type_of(op_name) not in _FINALISER_OPS
        if self.graph.busy:
            self._wait_idle(deliver)
        if self.whole is not None and not self._whole_on:
            self.whole.settle(deliver)

    def _wait_idle(self, deliver: bool = True) -> None:
        start = time.perf_counter()
        try:
            self.graph.wait_idle(deliver)
        finally:
            self._stalled(start)


def _shaped(entry: Entry, outs: list):
    """The op's outputs in the structure its wrapper returns."""
    if entry.structure == "single":
        return outs[0]
    return None if entry.structure == "none" else list(outs)  # the caller may change it


def _resizable(handle) -> bool:
    data = resource_variable_ops.get_eager_safe_handle_data(handle)
    if not data.is_set or not data.shape_and_type:
        return True  # nothing declared: assume it may change
    shape = data.shape_and_type[0].shape
    return shape.unknown_rank or any(d.size < 0 for d in shape.dim)


def _flat(inputs) -> list:
    out = []
    for x in inputs:
        if type(x) is list or type(x) is tuple:
            out.extend(x)
        else:
            out.append(x)
    return out


def _scan(flat: list) -> tuple[bool, bool]:
    placeholders = resources = False
    for x in flat:
        t = type(x)
        if t is Placeholder:
            placeholders = True
        elif t is _EAGER and x._datatype_enum() == _RESOURCE_ENUM:
            resources = True
    return placeholders, resources


def _light(args):
    """``args`` with placeholders replaced by TensorRefs (the log must not keep them alive)."""
    for a in args:  # a loop, not any(): this runs for every op
        t = type(a)
        if t is Placeholder or t is list or t is tuple:
            break
    else:
        return args
    out = []
    for a in args:
        if type(a) is Placeholder:
            a = TensorRef(a)
        elif type(a) in (list, tuple):
            a = type(a)(TensorRef(x) if type(x) is Placeholder else x for x in a)
        out.append(a)
    return tuple(out)


def _tensors(flat: list, entry: Entry) -> list:
    """Inputs for the tape: Python values converted to tensors of the op's input dtype."""
    out = []
    for x, (dtype, _) in zip(flat, entry.inputs):
        if type(x) is Placeholder or isinstance(x, _EAGER):
            out.append(x)
        else:
            with capture.bypass():
                out.append(constant_op.constant(x, dtype=dtype))
    return out
