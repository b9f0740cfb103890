"""A region: one framework call answered by one compiled forward function F and, when a gradient
tape watches it, one op on the tape whose backward is one compiled function B.

F is ``compile_segment`` of the recorded ops; B is ``backward.build_backward``. Each runs as ONE
eager op (``FastCall``: ``execute.execute`` of the function's name), so terra-nb's capture hooks
see one function-call op each. F's inputs and outputs are only assumed to be tensors (``_id``,
dtype, shape).
"""

from __future__ import annotations

import functools
import re
import weakref

import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import record
from tensorflow.python.framework.indexed_slices import IndexedSlices

from .. import capture
from ..capture.functions import register
from ..capture.location import called_from_c_loop
from ..coexec.function_call import FunctionCall
from ..coexec.lower import Segment, Wire, compile_segment
from ..trace.tracegraph import RegionCall
from .backward import build_backward, reads_twice, trainable_dtype
from .branches import guard_segment
from .python_state import PythonState
from .recording import Recording, packer

DECLINED = object()  # Region.run: the call must run its Python (higher order, no compile)
_HIGHER_ORDER = 2  # TFE_Py_TapeSetPossibleGradientTypes: more than one tape, or a forward one
_PLUMBING = frozenset({"Const", "Identity", "NoOp"})  # left out of a function's op types


class FastCall(FunctionCall):
    """A region's function, called as one eager op (``FunctionCall``). Registered with
    ``capture.functions`` (static output specs), so co-execution answers it with placeholders and
    runs it as graph work: inlined into the graph segments that call it, which run with its
    config (``eager_equal_config``: no grappler), so its values stay eager's. Called by itself
    it is never inlined (``noinline``), and keeps that config in any caller."""

    def __init__(self, cf, body=None) -> None:
        """``body``: B's Python body (``backward.build_backward``), which a tape region traces
        into its own function."""
        super().__init__(cf)
        self._op_types: tuple[str, ...] | None = None
        self.body = body
        self.opens: tuple | None = None  # B's: (region, watched arguments, saved value keys)
        # B's outputs: a list of tensors and IndexedSlices (an embedding's gradient), packed by
        # hand (nest's packing of composites builds each one's type spec: 1 ms a call)
        outputs = cf.structured_outputs
        self._slices = None
        if type(outputs) is list and all(isinstance(o, tf.Tensor | IndexedSlices) for o in outputs):
            self._slices = [0 if isinstance(o, tf.Tensor) else 2 + (o.dense_shape is not None)
                            for o in outputs]
        # static output specs: in co-execution it is graph work
        register(cf._inference_function, confirmed=True)

    def op_types(self) -> tuple[str, ...]:
        """The op types of the function's body, in its order; constants and identities (its
        outputs' plumbing) left out."""
        if self._op_types is None:
            body = self.cf._inference_function.cached_definition.node_def
            self._op_types = tuple(n.op for n in body if n.op not in _PLUMBING)
        return self._op_types

    def packed(self, *args):
        """The outputs in the function's structure: a composite output (the ``IndexedSlices``
        gradient of an embedding) is several tensors on the wire."""
        return self._pack(self(*args))

    def _pack(self, flat):
        if self._slices is None:
            return tf.nest.pack_sequence_as(self.cf.structured_outputs, flat,
                                            expand_composites=True)
        if not any(self._slices):
            return flat
        out, i = [], 0
        for parts in self._slices:  # values, indices[, dense_shape]: the composite's components
            out.append(flat[i] if not parts else IndexedSlices(*flat[i:i + parts]))
            i += parts or 1
        return out


def _gradient(backward: FastCall, saved: list, *out_grads):
    """A region's op on the gradient tape: B of the saved forward values and the out-grads.
    An out-grad the tape hands over as ``IndexedSlices`` (a ``tf.gather`` of the region's
    output) goes in dense, made by the same conversion the ops' own gradient functions apply in
    eager (``convert_to_tensor``): B's arguments are tensors."""
    out_grads = [tf.convert_to_tensor(g) if type(g) is IndexedSlices else g for g in out_grads]
    return backward.packed(*saved, *out_grads)


called_from_c_loop(_gradient.__code__)  # the tape calls it: B calls in a row are no user loop


_UNFILLABLE = ("resource", "variant")


FILLERS: set[int] = set()  # ids of the scalars ``_filler`` made


@functools.cache
def _filler(dtype: str):
    """A scalar of ``dtype``, passed to B for a forward value B does not read."""
    with capture.bypass():
        filler = tf.zeros((), dtype)
    FILLERS.add(id(filler))  # cached for good: its id is never reused
    return filler


class Region:
    """F(args) -> outputs (+ the forward values B reads). B(saved, out_grads) -> gradients of
    [watched args, trainable variable handles]."""

    def __init__(self, rec: Recording, variables: dict, obj, name: str) -> None:
        """``variables``: handle id -> variable, for the handles the call read."""
        self.rec, self.name = rec, name
        self._obj = weakref.ref(obj)  # a region does not keep the user's model alive
        # names its functions: region_Sequential_call_forward is the op type of F's calls
        self.label = "region_" + re.sub(r"\W+", "_", name.replace("__", ""))
        self.hits = 0
        self.broken: str | None = None  # why B cannot be built
        self.no_backward = rec.no_backward  # why B would not be eager's (None: it would)
        self.backwards: dict = {}  # watched args -> (F with saved values, B, B's saved inputs)
        self.spec = rec.spec
        self.trainable = {}  # capture key -> tf.Variable
        for key, h in rec.handles.items():
            v = variables.get(h._id)
            if v is not None and v.trainable:
                self.trainable[key] = getattr(v, "_value", v)  # Keras 3 wraps a tf.Variable
        self.t_handles = [rec.handles[k] for k in self.trainable]
        self.t_vars = list(self.trainable.values())
        self.float_args = tuple(i for i, (dt, _) in enumerate(rec.args) if trainable_dtype(dt))
        # F returns each op output once: an output returned twice (a cell's output and its new
        # state) is one tensor, as in eager, and one output of the region's op on the tape
        self.outs = list(dict.fromkeys(w for w in rec.out_wires + [w for _, w in rec.logits]
                                       if isinstance(w, Wire) and w.kind == "op"))
        # where each leaf of the call's result comes from: F's output j, argument i, or a value
        self._leaves = [self._source(w) for w in rec.out_wires]
        self._logits = [(i, self._source(w)) for i, w in rec.logits]  # set on leaf i
        self.single = len(rec.out_wires) == 1 and not tf.nest.is_nested(rec.out_struct)
        self.pack = packer(rec.out_struct)
        # F alone is compiled on the first call no tape records: a model called only under a
        # tape (training) never needs it, only F with the values B reads
        self.forward: FastCall | None = None
        with capture.bypass():
            segment = guard_segment(rec) if rec.branches else None
            self.branch_guard = None if segment is None else FastCall(compile_segment(
                segment, rec.captures, noinline=True, name=self.label + "_guard"))
        self.branch_values = [v for _, _, v in rec.branches]

    def _source(self, w) -> tuple:
        return ("op", self.outs.index(w)) if isinstance(w, Wire) and w.kind == "op" \
            else ("arg", w.index) if isinstance(w, Wire) else ("value", w)

    @property
    def obj(self):
        """The object whose call this region answers (None once the user dropped it)."""
        return self._obj()

    def watch(self, objs: list, arguments: list) -> None:
        """Keep weakly the objects whose state guards the region (the object and its
        sublayers), and a snapshot of the Python state reachable from them and from the
        ``arguments`` that are objects (``python_state``: raises ``UnguardedState``), which every
        hit compares."""
        self._objs = [weakref.ref(o) for o in objs]
        self.python = PythonState(objs + arguments, count_writes=True)
        # the snapshot holds the layers (in the lists the model keeps): once the model is gone,
        # so is the snapshot, and they are freed
        weakref.finalize(self.obj, self.python.forget)

    def objects(self) -> list | None:
        """The objects guarding the region; None when one of them is gone."""
        objs = [r() for r in self._objs]
        return None if any(o is None for o in objs) else objs

    @property
    def guarded_branches(self) -> bool:
        """Whether every branch the call decided can be checked before it runs."""
        return not self.branch_values or self.branch_guard is not None

    def branches_hold(self, args: list) -> bool:
        """Whether the call would decide its branches as when it was recorded."""
        if self.branch_guard is None:
            return True
        values = self.branch_guard(*args)
        return all(bool(v) == want for v, want in zip(values, self.branch_values))

    def dtype(self, key: tuple) -> str:
        return self.rec.dtype(key)

    def compile_forward(self, saved: tuple = (), any_shape: bool = False) -> FastCall:
        """F returning the call's outputs and the ``saved`` op outputs; ``any_shape``: for
        arguments of any shape (of their rank), as ``families`` shares it."""
        returns = tuple((w.index, w.output) for w in self.outs) + tuple(saved)
        args = self.rec.args
        if any_shape:
            args = tuple((dtype, (None,) * len(shape)) for dtype, shape in args)
        segment = Segment(tuple(self.rec.ops), args, returns)
        return FastCall(compile_segment(segment, self.rec.captures, noinline=True,
                                        name=self.label + "_forward"))

    def _plain(self) -> FastCall | None:
        """F, compiled on first use; None (``broken`` says why) if it cannot be."""
        if self.forward is None and self.broken is None:
            try:
                with capture.bypass():
                    self.forward = self.compile_forward()
            except Exception as error:  # noqa: BLE001 - the call then runs its Python
                self.broken = f"cannot compile the call: {error}"
        return self.forward

    def _backward(self, watched: tuple) -> tuple | None:
        """F with the values B reads, and B; None (``broken`` says why) if B cannot be built."""
        hit = self.backwards.get(watched)
        if hit is None and self.broken is None:
            try:
                with capture.bypass():
                    cf, keys, used, body = build_backward(self, watched)
                    # a handle or variant has no scalar filler: F keeps it, read or not
                    used = [k for k in keys if k in used or self.spec[k][0] in _UNFILLABLE]
                    saved_ops = tuple(k[1:] for k in used if k[0] == "op")
                    backward = FastCall(cf, body)
                    # what opens the hit on a tape (``tape_open``): the region, the arguments
                    # B differentiates, and the key of each value B is given
                    backward.opens = (self, watched, tuple(keys))
                    hit = (self.compile_forward(saved_ops), backward, self._saved(keys, used))
            except Exception as error:  # noqa: BLE001 - the call then runs its Python
                self.broken = f"cannot build the backward function: {error}"
                return None
            self.backwards[watched] = hit
        return hit

    def _saved(self, keys: list, used: list) -> list[tuple]:
        """Where each of B's saved inputs comes from: ``("op", j)`` F's j-th saved output,
        ``("arg", i)`` the call's argument i, ``("fill", t)`` a scalar filler ``t`` (B does not
        read that value: F does not keep it)."""
        saved_ops = [k for k in used if k[0] == "op"]
        where = []
        for k in keys:
            if k not in used:
                where.append(("fill", _filler(self.spec[k][0])))
            else:
                where.append(("op", saved_ops.index(k)) if k[0] == "op" else ("arg", k[1]))
        return where

    @functools.cached_property
    def reads_twice(self) -> bool:
        """Whether a hit on a tape may read a variable or a float argument twice (``backward``)."""
        return reads_twice(self, self.float_args)

    def run(self, args: list):
        """A hit: the object's Python does not run. ``DECLINED`` when the gradient may be
        differentiated again (nested tapes, forward accumulators): B is not differentiable."""
        watched = ()
        taped = record.could_possibly_record() and bool(self.t_vars or self.float_args)
        if taped and self.no_backward:
            self.broken = self.no_backward
            return DECLINED
        if taped:
            watched = tuple(i for i in self.float_args if record.should_record_backprop([args[i]]))
            for v in self.t_vars:  # as a ReadVariableOp does in eager: the tape watches the var
                pywrap_tfe.TFE_Py_TapeVariableAccessed(v)
            taped = bool(watched or self.t_vars)
            inputs = [args[i] for i in watched] + self.t_handles
            if taped and pywrap_tfe.TFE_Py_TapeSetPossibleGradientTypes(inputs) == _HIGHER_ORDER:
                return DECLINED
        built = self._backward(watched) if taped else self._plain()
        if built is None:
            return DECLINED
        self.hits += 1
        if not taped:
            flat = built(*args)
        else:
            forward, backward, where = built
            flat = forward(*args)
            n = len(self.outs)
            outs = flat[:n]
            saved = [flat[n + j] if kind == "op" else args[j] if kind == "arg" else j
                     for kind, j in where]
            record.record_operation("TerraRegion", outs, [args[i] for i in watched]
                                    + self.t_handles, functools.partial(_gradient, backward, saved))
        leaves = [flat[j] if kind == "op" else args[j] if kind == "arg" else j
                  for kind, j in self._leaves]
        for i, (kind, j) in self._logits:
            leaves[i]._keras_logits = flat[j] if kind == "op" else args[j] if kind == "arg" else j
        if self.single:  # one tensor (a model's output) or none: nothing to pack
            return leaves[0]
        return self.pack(leaves)

    def calls(self, source: str, call: str) -> list[RegionCall]:
        """Its compiled functions as the TraceGraph sees them: one op each, typed by its name
        (F, F with the values B reads, B, the branch guard)."""
        recorded = tuple(op.op_type for op in self.rec.ops)

        def entry(fn: FastCall, kind: str, ops: tuple[str, ...]) -> RegionCall:
            return RegionCall(fn.name, self.name, kind, source, call, ops)

        out = [] if self.forward is None else [entry(self.forward, "forward", recorded)]
        for forward, backward, _ in self.backwards.values():
            out += [entry(forward, "forward", recorded),
                    entry(backward, "backward", backward.op_types())]
        if self.branch_guard is not None:
            out.append(entry(self.branch_guard, "guard", self.branch_guard.op_types()))
        return out

    @property
    def n_ops(self) -> int:
        return len(self.rec.ops)
