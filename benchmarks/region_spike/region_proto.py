# ruff: noqa: B023, E501 - a research spike kept as the evidence for issue 14, not product code
"""Research spike (issue 14): a *region* answers a whole Keras call (model, loss, apply_gradients)
with compiled functions built from the ops recorded while the call ran eagerly.

    python benchmarks/region_spike/region_proto.py          # everything; prints a results table
    python benchmarks/region_spike/region_proto.py --quick  # without the speed runs

Its output on the session that wrote it (a heavily shared 2-core machine) is results.txt.

OpLog (terra_nb capture sink) -> Recording (wired ops, a terra-nb Segment) -> Region (forward F =
compile_segment of the recorded ops; backward B = TF's registered gradient functions applied to the
recorded ops in the order eager's tape applies them, staged into a tf.function; the tape sees one op
via record_operation) -> Regions (guard; a call forms a region after two identical, effect-free
traced runs).
"""
from __future__ import annotations

import functools
import gc
import os
import random
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import rewriter_config_pb2  # noqa: E402
from tensorflow.python import pywrap_tfe  # noqa: E402
from tensorflow.python.eager import backprop, context, execute, record  # noqa: E402
from tensorflow.python.framework import op_def_registry  # noqa: E402
from tensorflow.python.framework import ops as tf_ops  # noqa: E402
from tensorflow.python.ops import gen_math_ops  # noqa: E402

from terra_nb import capture  # noqa: E402
from terra_nb.capture.attrs import complete_attrs, input_dtypes, split_call  # noqa: E402
from terra_nb.capture.signature import op_type_of  # noqa: E402
from terra_nb.coexec.lower import Segment, SegmentOp, Wire, compile_segment, eager_attrs  # noqa: E402

EagerTensor = tf_ops.EagerTensor
SHAPE_OPS = {"Shape", "ShapeN", "Size", "Rank"}
# tape.h FunctionsAcceptingNoneForIndicesMap: these get None, not zeros, for missing out-grads
ACCEPTS_NONE = {"SoftmaxCrossEntropyWithLogits": {1}, "SparseSoftmaxCrossEntropyWithLogits": {1},
                "FusedBatchNorm": {1, 2, 3, 4}}
_tape_stopped = pywrap_tfe.TFE_Py_TapeSetIsStopped


# == 1. Recording ================================================================================
class OpLog:
    """Capture sink (terra_nb.capture.capturing): every eager op of one call, and value reads."""
    intercepts = False

    def __init__(self):
        self.raw, self.fetched = [], []

    def on_fast_fallback(self, op_name, args, frame):
        pass  # the same op arrives again through the slow path

    def on_op(self, op_name, args, attrs, outputs, frame):
        # tf.stop_gradient runs its op under record.stop_recording(): invisible in the op, but
        # the backward must know the tape skipped it.
        self.raw.append((op_type_of(op_name), args, attrs, outputs, _tape_stopped()))

    def on_fetch(self, tensor):
        self.fetched.append(tensor)


def _flat(v):
    if v is None:
        return []
    return [t for x in v for t in _flat(x)] if isinstance(v, (list, tuple)) else [v]


class Recording:
    """One eager call as wired ops. An input is ``op`` (an earlier op's output), ``arg`` (a tensor
    argument of the call) or ``var`` (a key of ``captures``: a variable handle or a constant)."""

    def __init__(self, log: OpLog, arg_tensors: list, result):
        made, arg_ids = {}, {t._id: i for i, t in enumerate(arg_tensors)}
        self.captures, self.handles, self.consts, cap = {}, {}, {}, {}
        self.ops, self.out_specs, shape_derived = [], {}, set()
        self.args = tuple((t.dtype.name, tuple(t.shape.as_list())) for t in arg_tensors)
        self.paused = tuple(r[4] for r in log.raw)
        with capture.bypass():
            for p, (op_type, call_args, raw_attrs, outputs, _) in enumerate(log.raw):
                inputs, attrs = split_call(op_type, call_args, raw_attrs)
                outputs = _flat(outputs)
                attrs = complete_attrs(op_type, attrs, inputs, outputs)
                wires, from_shapes = [], True  # value fixed by the input specs and constants
                for x, dt in zip(inputs, input_dtypes(op_type, dict(attrs), len(inputs))):
                    tid = x._id if isinstance(x, EagerTensor) else None
                    if tid in made:
                        wires.append(Wire("op", *made[tid]))
                        from_shapes &= made[tid][0] in shape_derived
                    elif tid in arg_ids:
                        wires.append(Wire("arg", arg_ids[tid]))
                        from_shapes = False
                    elif tid is not None and x.dtype == tf.resource:
                        if tid not in cap:
                            cap[tid] = len(self.captures)
                            self.captures[cap[tid]] = self.handles[cap[tid]] = x
                        wires.append(Wire("var", cap[tid]))
                        from_shapes = False
                    else:  # a constant: an eager tensor made without an op, or a Python value
                        value = x.numpy() if tid is not None else np.asarray(x, dt)
                        key = len(self.captures)
                        self.captures[key] = self.consts[key] = value
                        wires.append(Wire("var", key))
                op_def = op_def_registry.get(op_type)
                if op_type in SHAPE_OPS or (from_shapes and op_def and not op_def.is_stateful):
                    shape_derived.add(p)
                self.ops.append(SegmentOp(p, op_type, attrs, tuple(wires), len(outputs)))
                for k, t in enumerate(outputs):
                    made[t._id] = (p, k)
                    self.out_specs[(p, k)] = (t.dtype.name, tuple(t.shape.as_list()))
        self.out_struct, self.out_wires = result, []
        for leaf in tf.nest.flatten(result):  # a tensor leaf is an op output or an argument
            tid = leaf._id if isinstance(leaf, EagerTensor) else None
            self.out_wires.append(Wire("op", *made[tid]) if tid in made else
                                  Wire("arg", arg_ids[tid]) if tid in arg_ids else leaf)
        # Reads of shape-derived values (Keras' Dropout reads its noise shape) are fixed by the
        # guard's input specs; any other read is a Python-visible effect.
        self.reads = [t for t in log.fetched if made.get(t._id, (-1,))[0] not in shape_derived]
        self.created_vars = any(op.op_type in ("VarHandleOp", "VariableV2") for op in self.ops)

    def key(self):
        """What two traced runs must share for the call to form a region."""
        consts = tuple((k, v.dtype.str, v.tobytes()) for k, v in self.consts.items())
        handles = tuple((k, h._id) for k, h in self.handles.items())
        outs = tuple(w if isinstance(w, Wire) else id(w) for w in self.out_wires)
        ops = tuple((o.op_type, o.attrs, o.inputs) for o in self.ops)
        return ops, self.paused, consts, handles, outs


# == 8. Effects ==================================================================================
class _CountingStream:
    def __init__(self, stream):
        self.stream, self.writes = stream, 0

    def write(self, s):
        self.writes += 1
        return self.stream.write(s)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _fingerprint(v):
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    return (id(v), len(v)) if isinstance(v, (list, dict, set)) else id(v)


def _objects(obj):
    """The object and its sublayers."""
    owner = getattr(obj, "__self__", obj)
    layers = list(owner._flatten_layers()) if hasattr(owner, "_flatten_layers") else []
    return layers + ([owner] if owner not in layers else [])


class EffectProbe:
    """Around one traced call: writes to stdout/stderr, changed attributes of the object and its
    sublayers, Python/numpy random state. Value reads and variable creation come from the op log."""

    def __init__(self, obj):
        self.objs = _objects(obj)

    def _state(self):
        return ([{k: _fingerprint(v) for k, v in vars(o).items()} for o in self.objs],
                random.getstate(), np.random.get_state()[1].tobytes())

    def __enter__(self):
        self.before = self._state()
        self.out, self.err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _CountingStream(self.out), _CountingStream(self.err)
        return self

    def __exit__(self, *exc):
        writes = sys.stdout.writes + sys.stderr.writes
        sys.stdout, sys.stderr = self.out, self.err
        (attrs0, *rnd0), (attrs1, *rnd1) = self.before, self._state()
        self.effects = [f"stdout/stderr write ({writes})"] if writes else []
        for o, b, a in zip(self.objs, attrs0, attrs1):
            changed = sorted(k for k in set(a) | set(b) if a.get(k, "?") != b.get(k, "?"))
            if changed:
                self.effects.append(f"attribute changed: {type(o).__name__}.{','.join(changed)}")
        if rnd0 != rnd1:
            self.effects.append("python/numpy random used")


def traced_call(fn, args, kwargs):
    """Run ``fn`` eagerly (any tape records it as usual), recording its ops and effects."""
    arg_tensors = [t for t in tf.nest.flatten((args, kwargs)) if isinstance(t, EagerTensor)]
    log = OpLog()
    with EffectProbe(fn) as probe, capture.capturing(log):
        result = fn(*args, **kwargs)
    rec = Recording(log, arg_tensors, result)
    effects = probe.effects + [f"value read ({len(rec.reads)} tensors)"] * bool(rec.reads) \
        + ["variable created"] * rec.created_vars
    return result, rec, effects


# == 2./3. Forward and backward functions ========================================================
class FastCall:
    """Call a concrete function as one eager op (AtomicFunction.call_flat minus its Python), with
    grappler's arithmetic optimizer off: it re-associates AddN (the 3 gradient terms of a BN input),
    1 ulp off eager."""
    config = None

    def __init__(self, cf):
        if FastCall.config is None:
            config = context.context().config
            config.allow_soft_placement = True
            config.graph_options.rewrite_options.arithmetic_optimization = \
                rewriter_config_pb2.RewriterConfig.OFF
            FastCall.config = config.SerializeToString()
        self.cf, fn = cf, cf._inference_function  # keep cf alive: its function stays registered
        self.name, self.caps = fn.name.decode(), list(cf.captured_inputs)
        self.n_out = len(fn.cached_definition.signature.output_arg)
        self.attrs, self.ctx = ("executor_type", "", "config_proto", FastCall.config), context.context()

    def __call__(self, *args):
        return execute.execute(self.name, self.n_out, [*args, *self.caps], self.attrs, self.ctx)


def _grad_fn(op_type):
    try:
        return tf_ops._gradient_registry.lookup(op_type)
    except LookupError:
        return None


def _wkey(w):
    return ("op", w.index, w.output) if w.kind == "op" else (w.kind, w.index)


def _trainable(dtype):  # pywrap_tfe IsDtypeTrainable
    return dtype in ("resource", "variant") or tf.as_dtype(dtype).is_floating or \
        tf.as_dtype(dtype).is_complex


def _aggregate(gs):  # backprop._aggregate_grads
    return None if not gs else gs[0] if len(gs) == 1 else gen_math_ops.add_n(gs)


class Region:
    """F(args) -> outputs + the forward values B needs. B(saved, out_grads) -> grads of [watched
    args, trainable variable handles]. ``grad_mode``: "record" (record_operation + B), "custom"
    (tf.custom_gradient + B), "native" (F's own tf.function gradient)."""

    def __init__(self, rec: Recording, var_by_handle: dict, grad_mode="record"):
        self.rec, self.grad_mode, self.hits, self.backwards = rec, grad_mode, 0, {}
        self.spec = {("op",) + pk: s for pk, s in rec.out_specs.items()}
        self.spec.update({("arg", i): a for i, a in enumerate(rec.args)})
        self.trainable = {}  # capture key -> tf.Variable
        for key, h in rec.handles.items():
            v = var_by_handle.get(h._id)
            if v is not None and v.trainable:
                self.trainable[key] = getattr(v, "_value", v)  # Keras 3 wraps a tf.Variable
        self.t_handles = [rec.handles[k] for k in self.trainable]
        self.t_vars = list(self.trainable.values())
        self.float_args = tuple(i for i, (dt, _) in enumerate(rec.args) if _trainable(dt))
        self.outs = [w for w in rec.out_wires if isinstance(w, Wire) and w.kind == "op"]
        self.F_plain = self._forward(())  # no tape; and "native"

    def _forward(self, saved):
        returns = tuple((w.index, w.output) for w in self.outs) + tuple(saved)
        cf = compile_segment(Segment(tuple(self.rec.ops), self.rec.args, returns), self.rec.captures)
        return FastCall(cf)

    def _dtype(self, key):
        if key[0] == "var":
            return "resource" if key[1] in self.rec.handles else self.rec.consts[key[1]].dtype.name
        return self.spec[key][0]

    def _prepare(self, watched_args):
        """The tape's view of the region. pywrap_tfe RecordGradient: an op is taped if the tape was
        not paused and a trainable-dtype input is taped. tape.h PrepareBackprop: the taped ops
        reachable from the outputs, input usage counts, missing output counts per op."""
        on_tape = {("arg", i) for i in watched_args} | {("var", k) for k in self.trainable}
        producer = {}
        for p, op in enumerate(self.rec.ops):
            if not self.rec.paused[p] and any(
                    _wkey(w) in on_tape and _trainable(self._dtype(_wkey(w))) for w in op.inputs):
                for k in range(op.n_outputs):
                    on_tape.add(("op", p, k))
                    producer[("op", p, k)] = p
        in_set, usage, stack = set(), {}, [_wkey(w) for w in self.outs]
        while stack:
            p = producer.get(stack.pop())
            if p is None or p in in_set:
                continue
            in_set.add(p)
            for k in map(_wkey, self.rec.ops[p].inputs):
                if k not in usage and k in producer:
                    stack.append(k)
                usage[k] = usage.get(k, 0) + 1
        missing = {}
        for k in usage:
            if k in producer:
                missing[producer[k]] = missing.get(producer[k], 0) + 1
        return on_tape, producer, in_set, usage, missing

    def _backward_body(self, watched_args, saved_keys):
        rec, outs = self.rec, self.outs
        on_tape, producer, in_set, usage0, missing0 = self._prepare(watched_args)

        def body(*flat):
            vals = dict(zip(saved_keys, flat[:len(saved_keys)]))
            grads, consts = {}, {}
            for w, g in zip(outs, flat[len(saved_keys):]):
                grads.setdefault(_wkey(w), []).append(g)

            def value(key):
                if key in vals:
                    return vals[key]
                if key[0] == "var":
                    c = rec.captures[key[1]]
                    return consts.setdefault(key[1], c if isinstance(c, EagerTensor) else
                                             tf.constant(c))
                return tf.zeros(self.spec[key][1], self.spec[key][0])  # only its shape is used

            usage, missing, todo = dict(usage0), dict(missing0), set(in_set)
            queue = [p for p in in_set if p not in missing]  # tape.h InitialStack
            while queue:  # tape.h ComputeGradient: pop the back, ready ops go to the front
                p = queue.pop()
                if p not in todo:
                    continue
                todo.discard(p)
                op = rec.ops[p]
                og = [_aggregate(grads.pop(("op", p, k), None)) for k in range(op.n_outputs)]
                nonzero = any(g is not None for g in og)
                for k, g in enumerate(og):
                    if nonzero and g is None and k not in ACCEPTS_NONE.get(op.op_type, ()):
                        og[k] = tf.zeros(self.spec[("op", p, k)][1], self.spec[("op", p, k)][0])
                in_keys = [_wkey(w) for w in op.inputs]
                in_grads, fn = [None] * len(in_keys), _grad_fn(op.op_type)
                if nonzero and fn is not None:  # backprop._gradient_function, staged
                    skip = tuple(i for i, k in enumerate(in_keys) if k not in on_tape)
                    mock = backprop._MockOp(eager_attrs(op.op_type, op.attrs), list(map(value, in_keys)),
                                            [value(("op", p, k)) for k in range(op.n_outputs)],
                                            op.op_type, skip)
                    with tf.name_scope("gradient_tape/"):
                        g = fn(mock, *og)
                    g = list(g) if isinstance(g, (list, tuple)) else [g]
                    in_grads = g + [None] * (len(in_keys) - len(g))
                for k, g in zip(in_keys, in_grads):
                    if g is not None:
                        grads.setdefault(k, []).append(g)
                    if k in usage:
                        usage[k] -= 1
                        if usage[k] == 0 and k in producer:
                            missing[producer[k]] -= 1
                            if missing[producer[k]] == 0:
                                queue.insert(0, producer[k])
            res = [_aggregate(grads.get(("arg", i))) for i in watched_args]
            res += [_aggregate(grads.get(("var", k))) for k in self.trainable]
            specs = [rec.args[i] for i in watched_args] + \
                [(v.dtype.name, tuple(v.shape)) for v in self.t_vars]
            return [tf.zeros(s[1], s[0]) if g is None else g for g, s in zip(res, specs)]
        return body, in_set

    def _build_backward(self, watched_args):
        """Traced twice: the first trace shows which forward values B really reads."""
        t0 = time.perf_counter()
        _, _, in_set, _, _ = self._prepare(watched_args)
        cand = sorted({_wkey(w) for p in in_set for w in self.rec.ops[p].inputs if w.kind != "var"}
                      | {("op", p, k) for p in in_set for k in range(self.rec.ops[p].n_outputs)},
                      key=lambda k: (k[0] != "op", k[1:]))  # op outputs first, then args
        gy_specs = [tf.TensorSpec(self.spec[_wkey(w)][1], self.spec[_wkey(w)][0]) for w in self.outs]

        def trace(keys):
            specs = [tf.TensorSpec(self.spec[k][1], self.spec[k][0]) for k in keys] + gy_specs
            return tf.function(self._backward_body(watched_args, keys)[0],
                               autograph=False).get_concrete_function(*specs)

        probe = trace(cand)
        used = [k for k, ph in zip(cand, probe.graph.inputs) if ph.consumers()]
        saved_ops = [k[1:] for k in used if k[0] == "op"]
        built = self._forward(saved_ops), FastCall(trace(used)), used, len(saved_ops)
        self.build_s = time.perf_counter() - t0
        return built

    def run(self, arg_tensors):
        """A hit: the Python of the call does not run."""
        self.hits += 1
        watched = ()
        tape_on = record.could_possibly_record() and (self.t_vars or self.float_args)
        if tape_on:
            watched = tuple(i for i in self.float_args
                            if record.should_record_backprop([arg_tensors[i]]))
            for v in self.t_vars:  # as a ReadVariableOp does in eager: the tape watches the var
                pywrap_tfe.TFE_Py_TapeVariableAccessed(v)
            tape_on = bool(watched or self.t_vars)
        if not tape_on:
            flat = self.F_plain(*arg_tensors)
        elif self.grad_mode == "native":
            cf = self.F_plain.cf
            flat = cf._call_flat(list(arg_tensors), list(cf.captured_inputs))
        else:
            if watched not in self.backwards:
                self.backwards[watched] = self._build_backward(watched)
            F, B, used, n_saved = self.backwards[watched]
            flat = F(*arg_tensors)
            outs = flat[:len(self.outs)]
            saved = flat[len(self.outs):len(self.outs) + n_saved] + \
                [arg_tensors[k[1]] for k in used if k[0] == "arg"]
            inputs = [arg_tensors[i] for i in watched] + self.t_handles

            def backward(*gys):
                return B(*saved, *gys)
            if self.grad_mode == "custom":
                flat = tf.custom_gradient(lambda *_: (list(outs), backward))(*inputs)
            else:
                record.record_operation("TerraRegion", outs, inputs, backward)
                flat = outs
        it = iter(flat or ())
        leaves = [next(it) if isinstance(w, Wire) and w.kind == "op" else
                  arg_tensors[w.index] if isinstance(w, Wire) else w for w in self.rec.out_wires]
        return tf.nest.pack_sequence_as(self.rec.out_struct, leaves)


# == 7. Regions: guard, trace, form, hit =========================================================
VAR_EPOCH = [0]  # bumped by every variable creation (in terra-nb: a VarHandleOp seen by the hooks)


def _count_creation(next_creator, **kw):
    VAR_EPOCH[0] += 1
    return next_creator(**kw)


def _specs(value, out, tensors):
    """Guard key of one argument: a tensor by (dtype, shape), a Python scalar by value, any other
    object (variable, layer) by identity; lists and tuples recursively."""
    t = type(value)
    if t is EagerTensor:
        out.append((value.dtype, value._shape_tuple()))
        tensors.append(value)
    elif t is list or t is tuple:
        out.append(len(value))
        for v in value:
            _specs(v, out, tensors)
    else:
        out.append(value if value is None or t in (bool, int, float, str) else id(value))


class Regions:
    def __init__(self, grad_mode="record"):
        self.grad_mode, self.table, self.pending = grad_mode, {}, {}
        self.stats = {"hits": 0, "traced": 0, "misses": 0}
        self.history = []  # (object.method, event)

    @staticmethod
    def guard_key(obj, method, args, kwargs):
        out, tensors = [id(obj), method], []
        for a in args:
            _specs(a, out, tensors)
        for k, v in kwargs.items():
            out.append(k)
            _specs(v, out, tensors)
        return tuple(out), tensors

    @staticmethod
    def state(layers):
        """Trainable flags of the object's layers; no variable created anywhere since."""
        return tuple([la.trainable for la in layers]), VAR_EPOCH[0]

    def call(self, obj, method, *args, **kwargs):
        args = tuple(list(a) if type(a) is zip else a for a in args)  # apply_gradients(zip(..))
        key, tensors = self.guard_key(obj, method, args, kwargs)
        region = self.table.get(key)
        if region is not None:
            if region.obj is obj and region.state == self.state(region.layers):
                self.stats["hits"] += 1
                return region.run(tensors)
            self.stats["misses"] += 1
            del self.table[key]
        return self._trace(key, obj, method, args, kwargs)

    def _trace(self, key, obj, method, args, kwargs):
        self.stats["traced"] += 1
        layers = [o for o in _objects(obj) if hasattr(o, "trainable")]
        state, name = self.state(layers), f"{type(obj).__name__}.{method}"
        result, rec, effects = traced_call(getattr(obj, method), args, kwargs)
        prev = self.pending.pop(key, None)
        if effects:
            self.history.append((name, "refused: " + "; ".join(effects)))
        elif prev is not None and prev.key() == rec.key() and self.state(layers) == state:
            t0 = time.perf_counter()
            index = {v.handle._id: v for v in list(getattr(obj, "variables", [])) + [
                x for x in tf.nest.flatten(args) if hasattr(x, "handle")]}
            region = Region(rec, index, self.grad_mode)
            region.obj, region.layers, region.state = obj, layers, state
            region.form_s = time.perf_counter() - t0
            self.table[key] = region
            self.history.append((name, "formed"))
        else:
            self.pending[key] = rec
            self.history.append((name, "traced"))
        return result


# == Checks ======================================================================================
def build(kind, seed=0):
    keras.utils.set_random_seed(seed)
    L = keras.layers
    layers = {"mlp": [L.Dense(64, activation="relu"), L.Dense(64, activation="relu"), L.Dense(10)],
              "dropout": [L.Dense(64, activation="relu"), L.Dropout(0.3),
                          L.Dense(64, activation="relu"), L.Dense(10)],
              "bn": [L.Dense(64), L.BatchNormalization(), L.ReLU(), L.Dropout(0.2), L.Dense(10)]}
    return (keras.Sequential([keras.Input((32,))] + layers[kind]), keras.optimizers.Adam(1e-3),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def data(n, seed=1):
    rs = np.random.RandomState(seed)
    return [(tf.constant(rs.rand(32, 32).astype("float32")),
             tf.constant(rs.randint(0, 10, 32).astype("int64"))) for _ in range(n)]


def eager_call(obj, method, *args, **kwargs):
    return getattr(obj, method)(*args, **kwargs)


def step(call, model, opt, lossf, x, y):
    """The user's loop body, the same in every mode."""
    with tf.GradientTape() as tape:
        logits = call(model, "__call__", x, training=True)
        loss = call(lossf, "__call__", y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    call(opt, "apply_gradients", zip(grads, model.trainable_variables))
    return float(loss)


def train(kind, mode, steps=30):
    model, opt, lossf = build(kind)
    regions = None if mode == "eager" else Regions(grad_mode=mode)
    call = eager_call if regions is None else regions.call
    with tf.variable_creator_scope(_count_creation):
        losses = [step(call, model, opt, lossf, x, y) for x, y in data(steps)]
    weights = [v.numpy() for v in model.variables] + [v.numpy() for v in opt.variables]
    return weights, losses, regions


def retraced_train(kind, steps=30):
    """The premise: the model call and apply_gradients re-traced as tf.functions."""
    model, opt, lossf = build(kind)
    fmodel = tf.function(lambda x: model(x, training=True))
    fopt = tf.function(lambda g: opt.apply_gradients(zip(g, model.trainable_variables)))
    for i, (x, y) in enumerate(data(steps)):
        with tf.GradientTape() as tape:
            loss = lossf(y, fmodel(x) if i else model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        fopt(grads) if i else opt.apply_gradients(zip(grads, model.trainable_variables))
    return [v.numpy() for v in model.variables] + [v.numpy() for v in opt.variables]


def max_diff(a, b):
    return max(float(np.max(np.abs(u.astype("float64") - v.astype("float64")))) for u, v in zip(a, b))


def speed(kind, n_eager=60, n_fast=300, rounds=3):
    """steps/s, median of ``rounds`` alternating runs; plus a 30-step 'cell' from fresh objects."""
    batches, setups, cell = data(8), {}, {}
    for mode in ("eager", "record", "custom", "native", "wrapped", "tf.function"):
        t0 = time.perf_counter()
        model, opt, lossf = build(kind)
        if mode == "wrapped":  # the reference: each call re-traced as a tf.function
            opt.build(model.trainable_variables)
            wrapped = {"__call__": tf.function(lambda x, training: model(x, training=training)),
                       "loss": tf.function(lambda y, p: lossf(y, p)),
                       "apply_gradients": tf.function(lambda grads: opt.apply_gradients(
                           zip(grads, model.trainable_variables)))}

            def run(i, model=model, opt=opt, lossf=lossf, w=wrapped):
                def call(obj, method, *args, **kw):
                    if obj is lossf:
                        return w["loss"](*args)
                    if obj is opt:
                        return w[method]([g for g, _ in args[0]])
                    return w[method](*args, **kw)
                return step(call, model, opt, lossf, *batches[i % 8])
        elif mode == "tf.function":
            @tf.function
            def whole(x, y, model=model, opt=opt, lossf=lossf):
                with tf.GradientTape() as tape:
                    loss = lossf(y, model(x, training=True))
                g = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(g, model.trainable_variables))
                return loss

            def run(i, whole=whole):
                return float(whole(*batches[i % 8]))
        else:
            call = eager_call if mode == "eager" else Regions(grad_mode=mode).call

            def run(i, call=call, model=model, opt=opt, lossf=lossf):
                return step(call, model, opt, lossf, *batches[i % 8])
        with tf.variable_creator_scope(_count_creation):
            for i in range(30):
                run(i)
        cell[mode] = time.perf_counter() - t0
        setups[mode] = (run, n_eager if mode == "eager" else n_fast)
    res = {m: [] for m in setups}
    gc.collect()
    gc.freeze()  # the setup's objects out of the collector's way: eager makes much garbage
    with tf.variable_creator_scope(_count_creation):
        for _ in range(rounds):
            for mode, (run, n) in setups.items():
                t = time.perf_counter()
                for i in range(n):
                    run(i)
                res[mode].append(n / (time.perf_counter() - t))
    return {m: statistics.median(v) for m, v in res.items()}, cell


def guard_cost(n=20000):
    """µs per call: building the key, the state check, the ids of obj.variables (the variable set
    read from Keras, for comparison), and the whole guard as Regions.call runs it."""
    model, opt, lossf = build("mlp")
    x, y = data(1)[0]
    regions = Regions()
    with tf.variable_creator_scope(_count_creation):
        for _ in range(4):
            step(regions.call, model, opt, lossf, x, y)
    grads = [tf.zeros_like(v) for v in model.trainable_variables]
    out = {}
    for label, obj, meth, args, kw in (
            ("model(x, training=True)", model, "__call__", (x,), {"training": True}),
            ("loss(y, logits)", lossf, "__call__", (y, model(x)), {}),
            ("apply_gradients(zip(...))", opt, "apply_gradients",
             (list(zip(grads, model.trainable_variables)),), {})):
        r = regions.table[regions.guard_key(obj, meth, args, kw)[0]]

        def timed(fn):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            return (time.perf_counter() - t) / n * 1e6
        out[label] = (
            timed(lambda: regions.guard_key(obj, meth, args, kw)),
            timed(lambda: r.state == regions.state(r.layers)),
            timed(lambda: [id(v) for v in obj.variables] if hasattr(obj, "variables") else 0),
            timed(lambda: regions.table.get(regions.guard_key(obj, meth, args, kw)[0]) is r
                  and r.obj is obj and r.state == regions.state(r.layers)))
    return out


class EffectLayer(keras.layers.Layer):
    """A layer whose call has one Python-visible effect."""

    def __init__(self, effect, **kw):
        super().__init__(**kw)
        self.effect, self.calls = effect, 0

    def call(self, x):
        if self.effect == "print":
            print("EffectLayer.call")
        elif self.effect == "counter":
            self.calls += 1
        elif self.effect == "numpy" and hasattr(x, "numpy"):  # Keras also builds symbolically
            _ = float(tf.reduce_sum(x).numpy())
        elif self.effect == "new variable":
            return x * tf.Variable(2.0)  # a new variable on every call, kept nowhere
        return x * 2.0


def effects_demo():
    rows, x = [], data(1)[0][0]
    for effect in ("print", "counter", "numpy", "new variable"):
        keras.utils.set_random_seed(0)
        model, regions = keras.Sequential([keras.layers.Dense(8), EffectLayer(effect)]), Regions()
        for _ in range(4):
            with tf.GradientTape():
                regions.call(model, "__call__", x, training=True)
        rows.append((f"layer with {effect}", len(regions.table), regions.history[-1][1]))
    for kind in ("mlp", "bn"):
        regions = train(kind, "record", steps=4)[2]
        for key, r in regions.table.items():
            name = f"{type(r.obj).__name__}.{key[1]}"
            rows.append((f"{kind}: {name}", 1, " -> ".join(e for n, e in regions.history
                                                          if n == name)))
    return rows


def guard_demo():
    """Guard misses, and proof that a hit runs no Keras Python (Dense.call is not entered)."""
    runs, orig = [0], keras.layers.Dense.call

    @functools.wraps(orig)  # Keras inspects call's signature
    def counting(self, *a, **k):
        runs[0] += 1
        return orig(self, *a, **k)
    keras.layers.Dense.call = counting
    rows = []
    try:
        (model, _, _), (other, _, _) = build("mlp"), build("mlp", seed=1)
        regions, x = Regions(), data(1)[0][0]

        def probe(label, m, xx, **kw):
            before, st = runs[0], dict(regions.stats)
            with tf.GradientTape():
                out = regions.call(m, "__call__", xx, **kw)
            n = runs[0] - before
            rows.append((label, [k for k in st if regions.stats[k] > st[k]], n,
                         max_diff([out.numpy()], [m(xx, **kw).numpy()])))
        for i in range(4):
            probe(f"call {i + 1}", model, x, training=True)
        probe("batch size 16", model, x[:16], training=True)
        probe("training=False", model, x, training=False)
        probe("another model object", other, x, training=True)
        probe("the first model again", model, x, training=True)
        with tf.variable_creator_scope(_count_creation):
            tf.Variable(1.0)  # a variable created anywhere: regions re-validate
        for label in ("after a variable was created", "again", "again"):
            probe(label, model, x, training=True)
        model.layers[0].trainable = False
        probe("layer.trainable = False", model, x, training=True)
    finally:
        keras.layers.Dense.call = orig
    return rows


def main():
    if "--speed" in sys.argv:
        return speed_table()
    if "--retraced-no-arith" in sys.argv:  # a fresh process: the grappler option is global
        tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
        print(f"{max_diff(train('bn', 'eager')[0], retraced_train('bn')):.3g}")
        return
    print(f"TF {tf.__version__}, Keras {keras.__version__}; recording: terra_nb capture hooks")
    print("\n== 1./2. regions (ops recorded; handles; constants; trainable vars; forward values "
          "saved for B; s to form / to build B) ==")
    for kind in ("mlp", "bn"):
        regions = train(kind, "record", steps=4)[2]
        for r in regions.table.values():
            saved = sum(b[3] + sum(k[0] == "arg" for k in b[2]) for b in r.backwards.values())
            build_s = f"{r.build_s:.2f}" if r.backwards else "-"
            print(f"  {kind:4s} {type(r.obj).__name__:30s} ops={len(r.rec.ops):<4d}"
                  f"handles={len(r.rec.handles):<3d}consts={len(r.rec.consts):<3d}"
                  f"trainable={len(r.t_vars):<3d}saved={saved:<3d}form={r.form_s:.2f}s B={build_s}s")

    print("\n== 5. after 30 steps: max |w_region - w_eager| over all model + optimizer variables ==")
    for kind in ("mlp", "dropout", "bn"):
        ref, ref_losses, _ = train(kind, "eager")
        for mode in ("record", "custom", "native"):
            w, losses, regions = train(kind, mode)
            hits = " ".join(f"{type(r.obj).__name__}={r.hits}" for r in regions.table.values())
            print(f"  {kind:8s} {mode:7s} weights {max_diff(ref, w):<9.3g} losses "
                  f"{max(abs(a - b) for a, b in zip(ref_losses, losses)):<9.3g} hits "
                  f"{hits}")
        retraced = max_diff(ref, retraced_train(kind))
        print(f"  {kind:8s} re-traced tf.function model+opt: weights {retraced:.3g}")
    out = subprocess.run([sys.executable, __file__, "--retraced-no-arith"], capture_output=True,
                         text=True).stdout.strip()
    print(f"  bn       re-traced, arithmetic optimizer off:  weights {out}")

    print("\n== 7. guard µs/call: key | state (epoch+flags) | [ids of obj.variables] | whole guard ==")
    for label, (k, st, full, whole) in guard_cost().items():
        print(f"  {label:26s} {k:6.2f} | {st:6.2f} | [{full:6.2f}] | {whole:6.2f}")
    print("\n== 7b. guard: events | Dense.call entered | max |out - eager out| ==")
    for label, events, n, diff in guard_demo():
        print(f"  {label:30s} {'+'.join(events):16s} Dense.call x{n}   {diff:.3g}")

    print("\n== 8. effects (4 traced calls each; the last event) ==")
    for name, formed, event in effects_demo():
        print(f"  {name:40s} regions={formed}  {event}")

    if "--quick" not in sys.argv:  # a fresh process: a heap grown by the checks slows eager (GC)
        print(subprocess.run([sys.executable, __file__, "--speed"], text=True,
                             capture_output=True).stdout, end="")


def speed_table():
    print("\n== 6. steps/s, float(loss) every step (median of 3 alternating runs) | 30-step cell s ==")
    for kind in ("mlp", "bn"):
        med, cell = speed(kind)
        print(f"  {kind:4s} " + "  ".join(f"{m} {v:.0f} ({v / med['eager']:.1f}x)"
                                         for m, v in med.items()))
        print("       cell: " + "  ".join(f"{m} {v:.2f}s" for m, v in cell.items()))


if __name__ == "__main__":
    main()
