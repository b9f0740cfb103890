"""One eagerly run call of a framework object, recorded as wired ops (a terra-nb ``Segment``).

``RecordingTee`` is the capture sink of the call: it forwards every callback to the sink that was
current (the engine's tracer or PythonRunner, or none), so the engine sees the call's ops as
always, and keeps a copy. ``Recording`` turns that copy into ``SegmentOp``s: an input is ``op``
(an earlier op's output), ``arg`` (a tensor argument of the call) or ``var`` (a key of
``captures``: a variable handle, or a constant baked by value).

A call whose ops the engine answered with placeholders (co-execution) is recorded alike: a
recording reads the ops' types, attrs, wiring and specs, and the values of constants, which a
placeholder has all of. So a call with new specs (a new sequence length) forms its region while
the loop co-executes, as in traced iterations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context
from tensorflow.python.eager.core import _FallbackException
from tensorflow.python.framework import op_def_registry, ops

from .. import capture
from ..capture import hooks
from ..capture.attrs import complete_attrs, input_dtypes, split_call
from ..capture.recorder import flatten
from ..capture.signature import op_type_of
from ..coexec.call_args import SHAPE_OPS
from ..coexec.lower import SegmentOp, Wire

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "VarIsInitializedOp"})


class RecordingTee:
    """Capture sink of one call: forwards to the sink that was current and records each op (with
    whether the tape was paused: ``tf.stop_gradient`` runs its op under ``stop_recording``)."""

    intercepts = True

    def __init__(self, inner) -> None:
        self.inner = inner
        self.raw: list[tuple] = []  # (op type, args, attrs, outputs, tape paused)
        self.fetched: list = []
        # tensor ids count up from one counter: a tensor whose id is above this one was made
        # during the call
        self.first_id = ops.uid()

    def run_op(self, run, op_name, args, attrs, frame):
        inner = self.inner
        if inner is not None and inner.intercepts:
            outputs = inner.run_op(run, op_name, args, attrs, frame)
        else:
            outputs = self._run(run, op_name, args, attrs, frame)
        self._record(op_name, args, attrs, outputs)
        return outputs

    def _run(self, run, op_name, args, attrs, frame):
        inner = self.inner
        if inner is None:
            hooks.wait_at_barrier(op_name)
        try:
            outputs = run(capture.real_values(args))
        except _FallbackException:
            if inner is not None:
                inner.on_fast_fallback(op_name, args, frame)
            raise
        if inner is not None:
            inner.on_op(op_name, args, attrs, outputs, frame)
        return outputs

    def _record(self, op_name, args, attrs, outputs) -> None:
        self.raw.append((op_type_of(op_name), args, attrs, outputs,
                         pywrap_tfe.TFE_Py_TapeSetIsStopped()))

    def on_fast_fallback(self, op_name, args, frame) -> None:
        if self.inner is not None:
            self.inner.on_fast_fallback(op_name, args, frame)

    def on_op(self, op_name, args, attrs, outputs, frame) -> None:  # not called: intercepts
        raise AssertionError("RecordingTee intercepts; on_op is never called")

    def on_fetch(self, tensor) -> None:
        self.fetched.append(tensor)
        if self.inner is not None:
            self.inner.on_fetch(tensor)

    def on_placeholder_read(self, placeholder) -> None:
        """A read of a placeholder (a co-executed call's branch on a variable): as ``on_fetch``,
        without counting a fetch again in the runner."""
        self.fetched.append(placeholder)
        seen = getattr(self.inner, "on_placeholder_read", None)
        if seen is not None:
            seen(placeholder)


def tf_cached_constants() -> set[int]:
    """The ids of the constants TensorFlow's eager gradients keep for reuse (``Sum``'s gradient
    reshapes by ``ones_rank_cache``'s ``[1] * rank``; ``backprop`` fills by ``zeros_cache``'s
    zeros): each value is fixed by its key and never changes, so a call reading one, made
    before it, is baked in safely (a tape's gradient taken inside the call reads them)."""
    ctx = context.context()
    return {t._id for cache in (ctx.ones_rank_cache(), ctx.zeros_cache())
            for t in cache._data.values()}


class Recording:
    """One call as wired ops; ``key()`` is what two runs must share to form a region."""

    def __init__(self, tee: RecordingTee, arg_tensors: list, result) -> None:
        self.args = tuple((t.dtype.name, tuple(t.shape.as_list())) for t in arg_tensors)
        self.paused = tuple(r[4] for r in tee.raw)
        self.captures: dict = {}
        self.handles: dict = {}
        self.consts: dict = {}
        self.ops: list[SegmentOp] = []
        self.out_specs: dict = {}
        self._made: dict = {}  # tensor id -> (op position, output)
        self._arg_ids = {t._id: i for i, t in enumerate(arg_tensors)}
        self._cap: dict = {}  # handle id -> capture key
        self._shape_derived: set = set()
        self._key: tuple | None = None
        self._first_id = tee.first_id
        self.outside: set[int] = set()  # ids of tensors made before the call, baked by value
        with capture.bypass():
            for p, raw in enumerate(tee.raw):
                self._add_op(p, *raw[:4])
            self._split_reads(tee.fetched, tee.first_id)
        leaves = tf.nest.flatten(result)
        self.out_wires = [self._out_wire(leaf) for leaf in leaves]
        # Keras's sigmoid and softmax leave their logits on the output (``_keras_logits``), and
        # its cross-entropies compute from them: a hit sets them again (leaf index, wire)
        self.logits = [(i, self._out_wire(leaf._keras_logits)) for i, leaf in enumerate(leaves)
                       if isinstance(getattr(leaf, "_keras_logits", None), tf.Tensor)]
        # the result's structure, without keeping its tensors alive
        self.out_struct = tf.nest.pack_sequence_as(
            result, [None if isinstance(leaf, tf.Tensor) else leaf for leaf in leaves])
        self.created_vars = any(op.op_type in VARIABLE_OPS for op in self.ops)
        # set by formation: why its region must not be differentiated (a custom gradient it
        # recorded, value-dependent shapes B would fix), and the positions of the ops whose
        # output shapes Python read
        self.no_backward: str | None = None
        self.shapes_read: set[int] = set()

    def key_of(self, x) -> tuple | None:
        """The value key of tensor ``x``: an op's output or an argument (None: not read)."""
        made = self._made.get(x._id)
        if made is not None:
            return ("op", *made)
        i = self._arg_ids.get(x._id)
        return None if i is None else ("arg", i)

    def positions_of(self, ids: set[int]) -> set[int]:
        """The positions of the ops that made the tensors of ``ids``."""
        return {self._made[i][0] for i in ids if i in self._made}

    def _split_reads(self, fetched: list, first_id: int | None) -> None:
        """Reads of shape-derived values (Keras' Dropout reads its noise shape) are fixed by the
        guard's input specs, and reads of constants the call made from its own Python values
        (``tf.image.resize`` reads its size) are fixed as the region's baked constants are;
        boolean scalars made by the call's ops are its branch decisions (``branches.py``: op
        position, output, value); any other read is an effect."""
        self.reads, self.branches = 0, []  # a count: a recording keeps no tensor alive
        for t in fetched:
            made = self._made.get(t._id)
            if made is not None and made[0] in self._shape_derived:
                continue
            if made is None and first_id is not None and t._id > first_id \
                    and t._id not in self._arg_ids:
                continue  # made in the call by no op: a constant
            if made is not None and t.dtype == tf.bool and t.shape.rank == 0:
                self.branches.append((*made, bool(t.numpy())))
            else:
                self.reads += 1

    def _add_op(self, p: int, op_type: str, call_args, raw_attrs, outputs) -> None:
        inputs, attrs = split_call(op_type, call_args, raw_attrs)
        outputs = flatten(outputs)
        attrs = complete_attrs(op_type, attrs, inputs, outputs)
        wires, from_shapes = [], True  # its value is fixed by the input specs and constants
        for x, dt in zip(inputs, input_dtypes(op_type, dict(attrs), len(inputs))):
            wire, shaped = self._wire(x, dt)
            wires.append(wire)
            from_shapes &= shaped
        op_def = op_def_registry.get(op_type)
        if op_type in SHAPE_OPS or (from_shapes and op_def and not op_def.is_stateful):
            self._shape_derived.add(p)
        self.ops.append(SegmentOp(p, op_type, attrs, tuple(wires), len(outputs)))
        for k, t in enumerate(outputs):
            self._made[t._id] = (p, k)
            self.out_specs[(p, k)] = (t.dtype.name, tuple(t.shape.as_list()))

    def _wire(self, x, dtype) -> tuple[Wire, bool]:
        """The wire of one input, and whether its value is fixed by shapes and constants."""
        tid = getattr(x, "_id", None) if isinstance(x, tf.Tensor) else None
        if tid in self._made:
            p, k = self._made[tid]
            return Wire("op", p, k), p in self._shape_derived
        if tid in self._arg_ids:
            return Wire("arg", self._arg_ids[tid]), False
        if tid is not None and x.dtype == tf.resource:
            if tid not in self._cap:
                key = self._cap[tid] = len(self.captures)
                self.captures[key] = self.handles[key] = x
            return Wire("var", self._cap[tid]), False
        # a constant: an eager tensor made without an op, or a Python value
        if tid is not None and self._first_id is not None and tid < self._first_id \
                and tid not in tf_cached_constants():
            self.outside.add(tid)  # not made by the call: held by its object, or hidden
        value = x.numpy() if tid is not None else np.asarray(x, dtype)
        key = len(self.captures)
        self.captures[key] = self.consts[key] = value
        return Wire("var", key), True

    def _out_wire(self, leaf):
        """A tensor leaf of the result is an op output or an argument; anything else is kept."""
        tid = getattr(leaf, "_id", None) if isinstance(leaf, tf.Tensor) else None
        if tid in self._made:
            return Wire("op", *self._made[tid])
        if tid in self._arg_ids:
            return Wire("arg", self._arg_ids[tid])
        return leaf

    @functools.cached_property
    def spec(self) -> dict:
        """(dtype name, shape) of each value key: ``("op", p, k)`` an op's output, ``("arg", i)``
        an argument (read once wiring is done)."""
        spec = {("op",) + pk: s for pk, s in self.out_specs.items()}
        spec.update({("arg", i): a for i, a in enumerate(self.args)})
        return spec

    def dtype(self, key: tuple) -> str:
        """The dtype name of a value key (``("var", k)``: a handle's, or a constant's)."""
        if key[0] == "var":
            return "resource" if key[1] in self.handles else self.consts[key[1]].dtype.name
        return self.spec[key][0]

    def key(self) -> tuple:
        """What two traced runs must share for the call to form a region (computed once: the
        recording does not change, and formation and its shape family both ask)."""
        if self._key is None:
            self._key = self._make_key()
        return self._key

    def _make_key(self) -> tuple:
        consts = tuple((k, v.dtype.str, v.shape, repr(v.tolist()) if v.dtype == object
                        else v.tobytes()) for k, v in self.consts.items())
        handles = tuple((k, h._id) for k, h in self.handles.items())
        outs = tuple(w if isinstance(w, Wire) else id(w) for w in self.out_wires)
        ops = tuple((o.op_type, o.attrs, o.inputs) for o in self.ops)
        logits = tuple((i, w if isinstance(w, Wire) else id(w)) for i, w in self.logits)
        return ops, self.paused, consts, handles, outs, self.args, tuple(self.branches), logits


def packer(struct) -> Callable[[list], Any]:
    """A function packing a flat list into ``struct``, as ``tf.nest.pack_sequence_as`` does.
    Plain tuples, lists and dicts are packed here: tf.nest checks a runtime ``Protocol`` per
    level (``isinstance`` on a Protocol walks its attributes, 2 ms per step of an unrolled RNN
    whose cell returns ``(h, [h])``); any other nesting goes to tf.nest."""
    build = _plain_pack(struct)
    if build is None:
        return lambda leaves: tf.nest.pack_sequence_as(struct, leaves)
    return lambda leaves: build(iter(leaves))


def _plain_pack(s) -> Callable | None:
    """Pack from an iterator of leaves into ``s``'s shape; None if ``s`` nests anything but
    plain tuples, lists and dicts (a namedtuple, a composite, an attrs class)."""
    kind = type(s)
    if kind is tuple or kind is list:
        parts = [_plain_pack(x) for x in s]
        if any(p is None for p in parts):
            return None
        return lambda it: kind([p(it) for p in parts])
    if kind is dict:
        try:
            ordered = sorted(s)  # tf.nest's order of a dict's leaves
        except TypeError:
            return None
        parts = [_plain_pack(s[k]) for k in ordered]
        if any(p is None for p in parts):
            return None
        return lambda it: _in_order(s, {k: p(it) for k, p in zip(ordered, parts)})
    return None if tf.nest.is_nested(s) else next


def _in_order(like: dict, values: dict) -> dict:
    """``values`` with ``like``'s key order (tf.nest keeps the original insertion order)."""
    return {k: values[k] for k in like}

