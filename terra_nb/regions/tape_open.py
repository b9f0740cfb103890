"""A tape's copy with each region's hit opened up (the region's own ops in place of its one op),
and whether TensorFlow's tape sums the gradients in eager's order.

TensorFlow's tape (tape.h ComputeGradient) sums the gradients a value receives in the order they
come: ops are processed from the target in a queue, and an op goes in once every consumer of its
outputs has given its gradients. A region's hit is one op on the tape, so the gradients its B
gives arrive when that op is processed, summed apart inside B, not when eager's ops (deeper on
the tape) would have given them. A float sum of three terms or more depends on their order: a
model called twice in a step with a weight penalty written out (three gradients per weight, two
from hits and one from plain ops) trained 1 ulp away from eager from its second step.

``OpenedTape`` wires a copy as eager's tape holds it: each hit's recorded ops, their values what
the hit saved for its B, so ``backward.propagate`` over it follows eager's order. ``same_sums``
follows both orders with symbols (no TensorFlow op runs): per source, the tree of additions its
gradient is made of, each addition either way round (a float addition is commutative, not
associative). Where a tree differs, ``replay`` computes the gradients over the opened copy, op by
op, as eager's tape does.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.eager import backprop

from ..coexec.lower import SegmentOp, Wire
from .backward import ACCEPTS_NONE, _aggregate, _grad_fn, propagate, tape_view, wire_key
from .backward import _Values as _BValues
from .tape import REGION_OP, TapeRecording, is_filler


class OpenedTape:
    """A wired copy (``TapeRecording``) with every region's op replaced by the region's ops, read
    by ``backward`` as a region is (``rec``, ``ops``, ``paused``, ``trainable``, ``outs``, ``spec``,
    ``dtype``, ``captures``)."""

    def __init__(self, copy: TapeRecording) -> None:
        self.copy = copy
        self.ops: list[SegmentOp] = []
        self.paused: list[bool] = []
        self.origin: list[tuple] = []  # per op: ("outer", p) the copy's op p, ("inner", p, j)
        self.spec: dict = {k: s for k, s in copy.spec.items() if k[0] == "arg"}
        self.trainable, self.captures = copy.trainable, copy.captures
        self.saved_wires: dict = {}  # (no region's op: every op is its own)
        self._source: dict = {}  # value key -> ("copy", the copy's key) | ("raw", value) | None
        self._moved: dict = {}  # the copy's op output key -> its wire here
        self._consts = 0
        for p, op in enumerate(copy.ops):
            if op.op_type == REGION_OP:
                self._open(p, op)
            else:
                inputs = [self._outer(w) for w in op.inputs]
                q = self._add(("outer", p), op, inputs, copy.paused[p],
                              [("copy", ("op", p, k)) for k in range(op.n_outputs)],
                              [copy.spec[("op", p, k)] for k in range(op.n_outputs)])
                for k in range(op.n_outputs):
                    self._moved[("op", p, k)] = Wire("op", q, k)
        self.outs = [self._outer(w) for w in copy.outs]

    @property
    def rec(self) -> OpenedTape:
        return self

    def key(self, key: tuple | None) -> tuple | None:
        """The key here of the copy's value ``key``."""
        return wire_key(self._moved[key]) if key is not None and key[0] == "op" else key

    def dtype(self, key: tuple) -> str:
        return self.copy.dtype(key) if key[0] == "var" else self.spec[key][0]

    def _outer(self, w: Wire) -> Wire:
        return self._moved[wire_key(w)] if w.kind == "op" else w

    def _add(self, origin: tuple, op: SegmentOp, inputs: list, paused: bool, sources: list,
             specs: list) -> int:
        q = len(self.ops)
        self.ops.append(SegmentOp(q, op.op_type, op.attrs, tuple(inputs), op.n_outputs))
        self.paused.append(paused)
        self.origin.append(origin)
        for k, (source, spec) in enumerate(zip(sources, specs)):
            self._source[("op", q, k)] = source
            self.spec[("op", q, k)] = spec
        return q

    def _open(self, p: int, op: SegmentOp) -> None:
        """The region's ops in place of its op ``p``: its watched arguments and trained
        variables are the op's inputs, its outputs the op's outputs, any other value it reads
        what the hit saved for B (or nothing: B does not read it)."""
        region, watched, keys = self.copy.backwards[p].opens
        saved = {k: self._saved(w) for k, w in zip(keys, self.copy.saved_wires[p])}
        inner = {("arg", i): self._outer(op.inputs[n]) for n, i in enumerate(watched)}
        inner.update({("var", k): self._outer(op.inputs[len(watched) + n])
                      for n, k in enumerate(region.trainable)})
        outs = {wire_key(w): m for m, w in enumerate(region.outs)}
        at: dict[int, int] = {}  # the region's op position -> its position here
        for j, rop in enumerate(region.rec.ops):
            inputs = [self._inner(w, region, inner, saved, at) for w in rop.inputs]
            keys_out = [("op", j, k) for k in range(rop.n_outputs)]
            sources = [("copy", ("op", p, outs[k])) if k in outs else saved.get(k)
                       for k in keys_out]
            at[j] = self._add(("inner", p, j), rop, inputs,
                              region.rec.paused[j] or self.copy.paused[p], sources,
                              [region.spec[k] for k in keys_out])
        for m, w in enumerate(region.outs):
            self._moved[("op", p, m)] = self._inner(w, region, inner, saved, at)

    @staticmethod
    def _saved(w) -> tuple | None:
        """Where a value B is given comes from in the copy (None: a filler, B does not read it)."""
        return ("copy", wire_key(w)) if isinstance(w, Wire) else None

    def _inner(self, w: Wire, region, inner: dict, saved: dict, at: dict) -> Wire:
        if w.kind == "op":
            return Wire("op", at[w.index], w.output)
        key = wire_key(w)
        if key in inner:
            return inner[key]
        # not on the tape: an argument the tape did not watch, a constant, an untrained variable
        n, self._consts = self._consts, self._consts + 1
        if w.kind == "arg":
            self._source[("const", n)], self.spec[("const", n)] = saved.get(key), region.spec[key]
        else:
            value = region.rec.captures[w.index]
            self._source[("const", n)] = ("raw", value)
            self.spec[("const", n)] = (value.dtype.name, tuple(value.shape))
        return Wire("const", n)

    def kept(self, key: tuple) -> bool:
        """Whether this call kept ``key``'s value (not only its spec)."""
        return self._source.get(key, ("copy", key)) is not None

    def value(self, key: tuple, copy=None):
        """The value of ``key`` in the call of ``copy`` (the copy's values: a ``TapeRecording``
        or the ``CopyValues`` of a copy with its key; this one's by default), zeros of its spec
        where nothing kept it (only its shape is read)."""
        source = self._source.get(key, ("copy", key))
        if source is not None and source[0] == "copy":
            x = self.captures[source[1][1]] if source[1][0] == "var" else (
                copy or self.copy).value(source[1])
            source = None if is_filler(x) else ("raw", x)
        if source is None:
            dtype, shape = self.spec[key]
            return tf.zeros(shape, dtype)
        x = source[1]
        return x if isinstance(x, tf.Tensor) else tf.constant(x)


class Bound:
    """An opened copy's values in another call with the same copy key (``rec.value`` as a tape
    region reads it)."""

    def __init__(self, opened: OpenedTape, copy) -> None:
        self.opened, self.copy = opened, copy

    def value(self, key: tuple):
        return self.opened.value(key, self.copy)


class _Values(_BValues):
    """``backward``'s value reader over an opened copy: each value read once (zeros of a spec
    made once, as B's)."""

    def __init__(self, opened: OpenedTape) -> None:
        super().__init__(opened, {})

    def __call__(self, key: tuple):
        if key not in self.saved:
            self.saved[key] = self.region.value(key)
        return self.saved[key]


def _sum(gs):  # the tape's sum (slices concatenated); dense ones as B sums them (graph_sums)
    if gs and all(isinstance(g, tf.Tensor) for g in gs):
        return _aggregate(gs)
    return None if not gs else backprop._aggregate_grads(gs)


def replay(opened: OpenedTape, sources: tuple, seeds: list | None = None,
           watched: frozenset = frozenset()) -> list:
    """The gradients of ``sources`` (the copy's value keys; None: never read) in eager's order,
    op by op: TensorFlow's gradient functions on the values of the copy and of the hits.
    ``seeds``: per target, its output gradient (None: ones, as the tape's); ``watched``: the
    copy's keys of the tensors the tape watched."""
    grads: dict = {}
    for i, w in enumerate(opened.outs):
        seed = None if seeds is None else seeds[i]
        if seed is None:
            dtype, shape = opened.spec[wire_key(w)]
            seed = tf.ones(shape, dtype)
        grads.setdefault(wire_key(w), []).append(tf.convert_to_tensor(seed))
    view = tape_view(opened, (), frozenset(map(opened.key, watched)))
    grads = propagate(opened, view, grads, _Values(opened), aggregate=_sum,
                      keep=_made(sources, opened.key))
    return [None if k is None else _sum(grads.get(opened.key(k))) for k in sources]


def _made(sources: tuple, key) -> frozenset:
    """The keys of the sources made by an op on the tape (a watched intermediate value)."""
    return frozenset(key(k) for k in sources if k is not None and k[0] == "op")


# -- the order of the sums, with symbols ------------------------------------------------------


class _Sums:
    """Gradients as symbols (numbers): one per distinct way of being made, and which of them may
    be ``IndexedSlices`` (a gather's gradient, and what an op passes on from one). Slices made
    dense hold the same values (one ``convert_to_tensor``, as eager's gradient functions make
    them dense): their symbol stands for the same value (``value``), only not sparse."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self.sparse: set[int] = set()
        self._values: dict[int, int] = {}  # a dense symbol of slices -> the slices' symbol

    def sym(self, *parts, sparse: bool = False) -> int:
        made = self._ids.setdefault(parts, len(self._ids))
        if sparse:
            self.sparse.add(made)
        return made

    def value(self, g: int | None) -> int | None:
        return self._values.get(g, g)

    def dense(self, g: int) -> int:
        """``g`` made dense."""
        if g not in self.sparse:
            return g
        made = self.sym("dense", g)
        self._values[made] = self.value(g)
        return made

    def fold(self, gs: list | None) -> int | None:
        """Their sum as the tape makes it (``backprop._aggregate_grads``): one ``add_n`` of them
        in the order they came (two dense terms either way round), or slices concatenated in
        that order if one is sparse."""
        if not gs or len(gs) == 1:
            return gs[0] if gs else None
        values = [self.value(g) for g in gs]
        if any(g in self.sparse for g in gs):
            return self.sym("concat", *values, sparse=True)
        return self.sym("add_n", *(sorted(values) if len(values) == 2 else values))

    def fold_dense(self, gs: list | None) -> int | None:
        """Their sum as B and G make it (``backward._aggregate``): one ``add_n``, slices made
        dense."""
        if not gs or len(gs) == 1:
            return gs[0] if gs else None
        return self.fold([self.dense(g) for g in gs])


# ops whose gradient for their first input is ``IndexedSlices``
GATHERS = frozenset({"GatherV2", "Gather", "ResourceGather"})


class _Every:
    """``propagate``'s gradient functions: ``make(p)`` for every op position."""

    def __init__(self, make) -> None:
        self.make = make

    def get(self, p: int, default=None):
        return self.make(p)


def _symbolic_op(sums: _Sums, origin: tuple):
    """An op's gradient function in symbols: what ``backward._op_grads`` gives, by kind."""

    def fn(region, view, p: int, out_grads: list, value) -> list:
        op = region.rec.ops[p]
        if all(g is None for g in out_grads) or _grad_fn(op.op_type) is None:
            return [None] * len(op.inputs)
        accepts = ACCEPTS_NONE.get(op.op_type, ())
        filled = tuple(sums.sym("zeros", origin, k) if g is None and k not in accepts else g
                       for k, g in enumerate(out_grads))
        made = sums.sym("op", origin, tuple(map(sums.value, filled)))
        passes = any(g in sums.sparse for g in filled)  # may pass slices on: taken as if so
        return [sums.sym("d", made, i, sparse=passes or (i == 0 and op.op_type in GATHERS))
                if wire_key(w) in view.on_tape else None for i, w in enumerate(op.inputs)]

    return fn


def _symbolic_hit(sums: _Sums, copy: TapeRecording, p: int):
    """A region's op on TensorFlow's tape in symbols: zeros for the out-grads it did not get,
    B's own propagation over its ops, zeros for an input B gives nothing (``_result``)."""
    region, watched, _ = copy.backwards[p].opens

    def fn(rec, view, q: int, out_grads: list, value) -> list:
        if all(g is None for g in out_grads):
            return [None] * len(copy.ops[p].inputs)
        grads: dict = {}
        for k, (w, g) in enumerate(zip(region.outs, out_grads)):  # slices made dense first
            g = sums.sym("zeros", ("outer", p), k) if g is None else g
            grads.setdefault(wire_key(w), []).append(sums.dense(g))
        inner = _Every(lambda j: _symbolic_op(sums, ("inner", p, j)))
        propagate(region, tape_view(region, watched), grads, None, sums.fold_dense, inner)
        res = [sums.fold_dense(grads.get(("arg", i))) for i in watched]
        res += [sums.fold_dense(grads.get(("var", k))) for k in region.trainable]
        return [sums.sym("zeros", ("outer", p), "in", i) if g is None else g
                for i, g in enumerate(res)]

    return fn


def same_sums(copy: TapeRecording, opened: OpenedTape, sources: tuple,
              watched: frozenset = frozenset()) -> bool:
    """Whether TensorFlow's tape over ``copy`` (hits as one op each) and eager's (``opened``)
    make each source's gradient of the same additions in the same order (``sources`` and
    ``watched``: the copy's value keys, as ``replay`` takes them)."""
    sums = _Sums()
    out = []
    for rec, key, make in ((copy, lambda k: k, lambda p: _symbolic_hit(sums, copy, p)
                            if copy.ops[p].op_type == REGION_OP
                            else _symbolic_op(sums, ("outer", p))),
                           (opened, opened.key,
                            lambda q: _symbolic_op(sums, opened.origin[q]))):
        grads: dict = {}
        for i, w in enumerate(rec.outs):  # a target's seed: ones or its output gradient
            grads.setdefault(wire_key(w), []).append(sums.sym("seed", i))
        view = tape_view(rec, (), frozenset(map(key, watched)))
        grads = propagate(rec, view, grads, None, sums.fold, _Every(make), _made(sources, key))
        out.append([None if k is None else sums.value(sums.fold(grads.get(key(k))))
                    for k in sources])
    return out[0] == out[1]

