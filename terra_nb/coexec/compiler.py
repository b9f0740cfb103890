"""Background compiles: a segment's function is built and instantiated off the loop's path.

Compiling a segment costs twice. Tracing its ops into a function is Python (``compile_segment``:
16-35 ms for rnn-varlen's segments of a dozen region calls and ops). Its first call instantiates it
in TensorFlow's runtime (inlining the functions it calls, placing and partitioning it, making its
kernels: 15-30 ms more), outside the GIL. Built by the GraphRunner when the segment was next run,
both held up every item queued behind it, and Python with them at its next read or once the
bounded queue filled (rnn-varlen: two compiles stalled an iteration 48 and 72 ms; mlp-functions:
38 ms, its queue full of the next iterations' calls).

The ``Compiler`` builds on its own thread while the segment's runs go on interpreted, op by op,
as before it was due (``GraphRunner._to_interpret``). It also instantiates the function there,
without running it: ``dry_run`` calls it behind an ``If`` whose predicate is false. TensorFlow
lowers that ``If`` to a switch whose taken side is a branch of zeros, inlines the segment's function
into the untaken side and instantiates it all, then runs nothing of it (every op of the segment gets
a dead input: no variable, random state or output changes). Real runs call the same function with
the predicate true, and find it instantiated. The compile's Python still takes the GIL from the
loop's thread in turns; its instantiation and the loop's iterations overlap.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2, node_def_pb2, types_pb2
from tensorflow.core.function.polymorphism import function_type
from tensorflow.python.eager import context, execute
from tensorflow.python.eager.polymorphic_function import atomic_function
from tensorflow.python.framework import tensor_util

from .lower import FunctionCall, Segment, compile_segment, interpretable

# outputs a branch of constants cannot give, and arguments a dry call cannot make up
_NO_ZERO = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT})


def compile_function(segment: Segment, handles: dict[int, Any], xla: bool = False):
    """The compiled function of ``segment`` (a ``FunctionCall``); the segment itself when
    TensorFlow cannot build it as a graph although its ops ran eagerly (an argument whose value
    the graph needs for a static shape, as ``RaggedTensor.to_tensor`` has)."""
    try:
        return FunctionCall(compile_segment(segment, handles, xla))
    except (ValueError, TypeError):
        if not interpretable(segment):
            raise
        return segment


def xla_refused(error: BaseException) -> bool:
    """Whether XLA refused to compile a segment (an op it has no kernel for): nothing ran."""
    text = str(error)
    return "XLA" in text and ("unsupported operations" in text or "No registered" in text)


class GuardedCall(FunctionCall):
    """A compiled segment called through ``If(True, segment, zeros)``: the same values and
    effects, and a predicate false runs nothing (``dry_run``)."""

    def __init__(self, call: FunctionCall, guard: atomic_function.AtomicFunction,
                 zeros: atomic_function.AtomicFunction) -> None:
        self.cf, self.caps, self.n_out, self.attrs = call.cf, call.caps, call.n_out, call.attrs
        self.functions = (guard, zeros)  # registered while this call lives
        self.name = guard.name.decode()
        self.real, self.dry = tf.constant(True), tf.constant(False)

    def __call__(self, *args) -> list:
        return execute.execute(self.name, self.n_out, [self.real, *args, *self.caps], self.attrs,
                               context.context())


def dry_run(call: FunctionCall, segment: Segment) -> FunctionCall:
    """``call`` instantiated by a dry call (see the module's docstring), as a ``GuardedCall``;
    ``call`` itself when an output or argument has no zero (a resource, a variant) or the dry
    call fails (the first real call instantiates it then, and reports any error in order)."""
    fdef = call.cf._inference_function.cached_definition
    ins = [arg.type for arg in fdef.signature.input_arg]
    outs = [arg.type for arg in fdef.signature.output_arg]
    if _NO_ZERO.intersection(outs) or _NO_ZERO.intersection(ins[: len(segment.args)]):
        return call
    name = call.name
    zeros = _register(_function_def(f"{name}_zeros", ins, outs, [
        _node(f"zero{j}", "Const", [], dtype=_type(t), value=_zero(t))
        for j, t in enumerate(outs)], [f"zero{j}:output:0" for j in range(len(outs))]))
    guard = _register(_function_def(f"{name}_guarded", [types_pb2.DT_BOOL, *ins], outs, [
        _node("branch", "If", [f"x{i}" for i in range(len(ins) + 1)],
              Tcond=_type(types_pb2.DT_BOOL), Tin=_types(ins), Tout=_types(outs),
              then_branch=_func(name), else_branch=_func(zeros.name.decode()),
              _lower_using_switch_merge=attr_value_pb2.AttrValue(b=True))],
        [f"branch:output:{j}" for j in range(len(outs))]))
    guarded = GuardedCall(call, guard, zeros)
    dummies = [tf.zeros([0 if d is None else d for d in shape], dtype)
               for dtype, shape in segment.args]
    try:
        execute.execute(guarded.name, guarded.n_out, [guarded.dry, *dummies, *guarded.caps],
                        guarded.attrs, context.context())
    except Exception:  # noqa: BLE001  the real call instantiates it, and says what failed
        return call
    return guarded


class Compiler:
    """One thread that compiles (``compile_function`` then ``dry_run``) the segments asked of it,
    in order; the GraphRunner takes each result when the segment next comes."""

    def __init__(self, handles: dict[int, Any]) -> None:
        self.handles = handles
        self.count = 0  # compiles asked so far
        self._jobs: queue.Queue = queue.Queue()
        self._asked: set[tuple] = set()  # keys asked and not taken yet
        self._done: dict[tuple, tuple[Any, float]] = {}  # key -> (result, seconds it took)
        self.error: BaseException | None = None  # a compile that raised: the segment stays young
        self._thread = threading.Thread(target=self._run, name="terra-compiler", daemon=True)
        self._thread.start()

    def ask(self, key: tuple, segment: Segment) -> None:
        """Compile ``segment`` (once per key until it is taken)."""
        if key not in self._asked:
            self._asked.add(key)
            self.count += 1
            self._jobs.put((key, segment))

    def asked(self, key: tuple) -> bool:
        """Whether ``key``'s compile was asked and not taken yet."""
        return key in self._asked

    def take(self, key: tuple) -> tuple[Any, float] | None:
        """``key``'s finished compile (the function or, not compilable, the segment, and the
        seconds it took), once; None while it is not done."""
        done = self._done.pop(key, None)
        if done is not None:
            self._asked.discard(key)
        return done

    def wait(self) -> None:
        """Block until every asked compile is done."""
        self._jobs.join()

    def close(self) -> None:
        """Stop after the compile in progress; the rest is dropped (idempotent)."""
        if self._thread.is_alive():
            while True:
                try:
                    self._jobs.get_nowait()
                    self._jobs.task_done()
                except queue.Empty:
                    break
            self._jobs.put(None)
            self._thread.join()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            key, segment = job
            start = time.perf_counter()
            try:
                result = compile_function(segment, self.handles)
                if isinstance(result, FunctionCall):
                    result = dry_run(result, segment)
                self._done[key] = (result, time.perf_counter() - start)
            except Exception as error:  # noqa: BLE001  kept: the segment runs op by op meanwhile
                self.error = error
            finally:
                self._jobs.task_done()
        self._jobs.task_done()


def _function_def(name: str, ins: list, outs: list, nodes: list, rets: list):
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    for i, t in enumerate(ins):
        fdef.signature.input_arg.add(name=f"x{i}", type=t)
    for j, (t, ret) in enumerate(zip(outs, rets)):
        fdef.signature.output_arg.add(name=f"y{j}", type=t)
        fdef.ret[f"y{j}"] = ret
    fdef.node_def.extend(nodes)
    return fdef


def _register(fdef) -> atomic_function.AtomicFunction:
    """``fdef`` added to the context, removed when the returned object is dropped."""
    return atomic_function.from_function_def(fdef, function_type.FunctionType([]))


def _node(name: str, op: str, inputs: list[str], **attrs) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef(name=name, op=op, input=inputs)
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    return node


def _type(t: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=t)


def _types(ts: list[int]) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(type=ts))


def _func(name: str) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name))


def _zero(t: int) -> attr_value_pb2.AttrValue:
    dtype = tf.dtypes.as_dtype(t)
    value = b"" if dtype == tf.string else np.zeros((), dtype.as_numpy_dtype)
    return attr_value_pb2.AttrValue(tensor=tensor_util.make_tensor_proto(value, dtype))
