"""The backward function B of a region: TensorFlow's registered gradient functions applied to the
recorded ops in the order eager's tape applies them (tape.h), staged into one ``tf.function``.

``TapeView`` is the tape's view of a region for one set of watched arguments (pywrap_tfe
RecordGradient: an op is taped if the tape was not paused and a trainable-dtype input is taped;
tape.h PrepareBackprop: the taped ops reachable from the outputs, input usage counts, missing
output counts per op). ``backward_body`` replays tape.h ComputeGradient over it.
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf
from tensorflow.python.eager import backprop, record
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import gen_nn_ops, nn_grad
from tensorflow.python.util import _pywrap_util_port

from ..coexec.graph_sums import add_n
from ..coexec.lower import NOINLINE, eager_attrs, fusion_barrier

# tape.h FunctionsAcceptingNoneForIndicesMap: these get None, not zeros, for missing out-grads
ACCEPTS_NONE = {"SoftmaxCrossEntropyWithLogits": {1}, "SparseSoftmaxCrossEntropyWithLogits": {1},
                "FusedBatchNorm": {1, 2, 3, 4}}


def _max_pool_grad(mock, grad):
    """MaxPool's gradient with the pool made again in B: with both in one graph, oneDNN's gradient
    reads the forward's workspace instead of searching every window again (64x30x30x16: 3.2 ->
    0.85 ms; a CNN's B ran its two pools' gradients in 3.5 of its 5.5 ms). Bit-identical to
    eager's kernel where windows do not overlap (where they do, it sums an input's gradients in
    another order), ties after a ReLU included, but not where a window holds a NaN: eager's
    kernel sends the gradient to the NaN, oneDNN's does not. So an input with a NaN takes eager's
    kernel."""
    attr = {k: mock.get_attr(k) for k in
            ("ksize", "strides", "padding", "explicit_paddings", "data_format")}
    x = mock.inputs[0]
    if list(attr["ksize"]) != list(attr["strides"]):
        return nn_grad._MaxPoolGrad(mock, grad)

    def pooled_again():
        return gen_nn_ops.max_pool_grad(x, gen_nn_ops.max_pool(x, **attr), grad, **attr)

    return tf.cond(tf.reduce_any(tf.math.is_nan(x)),
                   lambda: nn_grad._MaxPoolGrad(mock, grad), pooled_again)


# op type -> a gradient function B uses instead of the registered one, where it is faster and
# gives the same bits; only with oneDNN's CPU kernels, whose pairing it is for
GRADIENTS = {"MaxPool": _max_pool_grad} if _pywrap_util_port.IsMklEnabled() else {}


def wire_key(w) -> tuple:
    return ("op", w.index, w.output) if w.kind == "op" else (w.kind, w.index)


def trainable_dtype(dtype: str) -> bool:  # pywrap_tfe IsDtypeTrainable
    if dtype in ("resource", "variant"):
        return True
    dt = tf.as_dtype(dtype)
    return dt.is_floating or dt.is_complex


def _grad_fn(op_type: str):
    try:
        return tf_ops._gradient_registry.lookup(op_type)
    except LookupError:
        return None


EARLY_TERMS, EARLY_BYTES = 4, 128 * 1024 * 1024  # tape.h kMinAggregateCount, kMinAggregateBytes


def _elements(g) -> int:
    """``backprop._num_elements``: a dense gradient's elements, or its slices' values'; 0 for a
    symbol (``tape_open``'s verdict) or a shape not known."""
    values = g.values if isinstance(g, tf.IndexedSlices) else g
    n = values.shape.num_elements() if isinstance(values, tf.Tensor) else None
    return n or 0


def _aggregate(gs):  # backprop._aggregate_grads, in eager's order in a graph too (G)
    return None if not gs else gs[0] if len(gs) == 1 else add_n(gs)


@dataclass
class TapeView:
    on_tape: set
    producer: dict  # taped value key -> op position
    in_set: set  # taped ops reachable from the outputs
    usage: dict  # value key -> uses by ops of in_set
    missing: dict  # op position -> outputs still waiting for their gradient


def tape_view(region, watched_args: tuple, watched: frozenset = frozenset()) -> TapeView:
    """``watched``: value keys of tensors the tape watched (``tape.watch``)."""
    rec = region.rec
    on_tape = {("arg", i) for i in watched_args} | {("var", k) for k in region.trainable}
    on_tape |= watched
    producer = {}
    for p, op in enumerate(rec.ops):
        if not rec.paused[p] and any(wire_key(w) in on_tape and
                                     trainable_dtype(region.dtype(wire_key(w)))
                                     for w in op.inputs):
            for k in range(op.n_outputs):
                on_tape.add(("op", p, k))
                producer[("op", p, k)] = p
    in_set, usage, stack = set(), {}, [wire_key(w) for w in region.outs]
    while stack:
        p = producer.get(stack.pop())
        if p is None or p in in_set:
            continue
        in_set.add(p)
        for k in map(wire_key, rec.ops[p].inputs):
            if k not in usage and k in producer:
                stack.append(k)
            usage[k] = usage.get(k, 0) + 1
    missing = {}
    for k in usage:
        if k in producer:
            missing[producer[k]] = missing.get(producer[k], 0) + 1
    return TapeView(on_tape, producer, in_set, usage, missing)


def reads_twice(region, watched_args: tuple) -> bool:
    """Whether ``region``'s taped ops read a variable or a watched argument twice: its B then
    sums those terms itself, apart from the tape's other terms for that value."""
    return any(n > 1 for k, n in tape_view(region, watched_args).usage.items() if k[0] != "op")


class _Values:
    """Forward values inside B: saved ones, constants, zeros where only a shape is read."""

    def __init__(self, region, saved: dict) -> None:
        self.region, self.saved, self.consts, self._zeros = region, saved, {}, {}

    def zeros(self, shape, dtype: str):
        """Zeros of a spec, one tensor per spec in the function traced: ``tf.zeros`` in a graph
        is ~0.5 ms, and rnn-varlen's G asked 52 (fillers of each cell's B) of a few specs."""
        key = (dtype, tuple(shape))
        if key not in self._zeros:
            self._zeros[key] = tf.zeros(shape, dtype)
        return self._zeros[key]

    def __call__(self, key):
        if key in self.saved:
            return self.saved[key]
        if key[0] == "var":
            if key[1] not in self.consts:  # a handle is captured as it is
                c = self.region.rec.captures[key[1]]
                self.consts[key[1]] = c if isinstance(c, tf.Tensor) else tf.constant(c)
            return self.consts[key[1]]
        dtype, shape = self.region.spec[key]
        return self.zeros(shape, dtype)  # only its shape is used


def fill_out_grads(region, p: int, out_grads: list, value: _Values) -> bool:
    """Zeros in ``out_grads`` where op ``p`` got no gradient, as the tape gives them (tape.h:
    but where the op accepts None); False when no output got one (its inputs get none)."""
    if all(g is None for g in out_grads):
        return False
    accepts_none = ACCEPTS_NONE.get(region.rec.ops[p].op_type, ())
    for k, g in enumerate(out_grads):
        if g is None and k not in accepts_none:
            dtype, shape = region.spec[("op", p, k)]
            out_grads[k] = value.zeros(shape, dtype)
    return True


def _op_grads(region, view: TapeView, p: int, out_grads: list, value) -> list:
    """The gradients of op ``p``'s inputs (None where none), as backprop._gradient_function."""
    op = region.rec.ops[p]
    in_keys = [wire_key(w) for w in op.inputs]
    if not fill_out_grads(region, p, out_grads, value):
        return [None] * len(in_keys)
    fn = _grad_fn(op.op_type)
    if fn is None:
        return [None] * len(in_keys)
    skip = tuple(i for i, k in enumerate(in_keys) if k not in view.on_tape)
    mock = backprop._MockOp(eager_attrs(op.op_type, op.attrs), [value(k) for k in in_keys],
                            [value(("op", p, k)) for k in range(op.n_outputs)], op.op_type, skip)
    fn = GRADIENTS.get(op.op_type, fn)
    bias_add = op.op_type in ("BiasAdd", "BiasAddV1")
    with tf.name_scope("gradient_tape/"):
        # the bias gradient (a BiasAddGrad) reads its out-grad through a fusion barrier
        g = fn(mock, *([fusion_barrier(out_grads[0])] if bias_add else out_grads))
    g = list(g) if isinstance(g, (list, tuple)) else [g]
    if bias_add:  # the input's gradient is the out-grad itself, not the barrier's copy
        g[0] = out_grads[0]
    return g + [None] * (len(in_keys) - len(g))


def propagate(region, view: TapeView, grads: dict, value, aggregate=_aggregate,
              grad_fns=None, keep: frozenset = frozenset()) -> dict:
    """tape.h ComputeGradient over ``view``: ``grads`` holds the out-grads of the outputs (value
    key -> list); returns it with the gradients of every key reached. An op of
    ``region.grad_fns`` (a region's op on a tape), or of ``grad_fns``, takes its gradient
    function from there; ``aggregate`` sums a value's gradients in the order they came
    (``tape_open`` follows that order with symbols); ``keep``: op outputs that are sources,
    whose sum stays in ``grads`` as the tape keeps it when it passes it on."""
    usage, missing, todo = dict(view.usage), dict(view.missing), set(view.in_set)
    special = getattr(region, "grad_fns", {}) if grad_fns is None else grad_fns
    queue = [p for p in view.in_set if p not in missing]  # tape.h InitialStack
    while queue:  # pop the back, ready ops go to the front
        p = queue.pop()
        if p not in todo:
            continue
        todo.discard(p)
        op = region.rec.ops[p]
        out_grads = [aggregate(grads.pop(("op", p, k), None)) for k in range(op.n_outputs)]
        for k, g in enumerate(out_grads):
            if g is not None and ("op", p, k) in keep:
                grads[("op", p, k)] = [g]
        fn = special.get(p, _op_grads)
        in_grads = fn(region, view, p, out_grads, value)
        for k, g in zip(map(wire_key, op.inputs), in_grads):
            if g is not None:
                gs = grads.setdefault(k, [])
                gs.append(g)
                if len(gs) > EARLY_TERMS and len(gs) * _elements(gs[0]) * 4 > EARLY_BYTES:
                    # tape.h sums a large gradient's terms early (to free them)
                    grads[k] = [aggregate(gs)]
            if k in usage:
                usage[k] -= 1
                if usage[k] == 0 and k in view.producer:
                    missing[view.producer[k]] -= 1
                    if missing[view.producer[k]] == 0:
                        queue.insert(0, view.producer[k])
    return grads


def backward_body(region, watched_args: tuple, saved_keys: list):
    """B's Python body: (saved forward values, output gradients) -> gradients of the watched
    arguments, then of the trainable variable handles (zeros where none)."""
    view = tape_view(region, watched_args)
    outs = region.outs

    def body(*flat):
        value = _Values(region, dict(zip(saved_keys, flat[:len(saved_keys)])))
        grads: dict = {}
        for w, g in zip(outs, flat[len(saved_keys):]):
            grads.setdefault(wire_key(w), []).append(g)
        return _result(region, watched_args, propagate(region, view, grads, value), value)

    return body


def _result(region, watched_args: tuple, grads: dict, value: _Values) -> list:
    res = [_aggregate(grads.get(("arg", i))) for i in watched_args]
    res += [_aggregate(grads.get(("var", k))) for k in region.trainable]
    specs = [region.rec.args[i] for i in watched_args] + \
        [(v.dtype.name, tuple(v.shape)) for v in region.t_vars]
    return [value.zeros(s[1], s[0]) if g is None else g for g, s in zip(res, specs)]


def build_backward(region, watched_args: tuple):
    """B for ``watched_args``, traced once with every forward value it might read as an input.
    Returns (B's concrete function, those values' keys, the keys of the ones it really reads,
    its Python body): the caller passes a filler for each value B does not read, so F need not
    keep it; a tape region traces the body into its own function."""
    view = tape_view(region, watched_args)
    ops = region.rec.ops
    keys = sorted({wire_key(w) for p in view.in_set for w in ops[p].inputs if w.kind != "var"}
                  | {("op", p, k) for p in view.in_set for k in range(ops[p].n_outputs)},
                  key=lambda k: (k[0] != "op", k[1:]))  # op outputs first, then args
    specs = [tf.TensorSpec(region.spec[k][1], region.spec[k][0]) for k in keys]
    specs += [tf.TensorSpec(region.spec[wire_key(w)][1], region.spec[wire_key(w)][0])
              for w in region.outs]
    body = backward_body(region, watched_args, keys)
    body.__name__ = region.label + "_backward"
    # not inlined where it is called (a graph segment): it keeps its own config. Built while
    # the user's tape records (a hit's first B): its captures are no op of that tape's
    with record.stop_recording():
        cf = tf.function(body, autograph=False, experimental_attributes=NOINLINE
                         ).get_concrete_function(*specs)
    used = [k for k, ph in zip(keys, cf.graph.inputs) if ph.consumers()]
    return cf, keys, used, body
