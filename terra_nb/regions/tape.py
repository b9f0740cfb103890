"""A tape region: ``GradientTape.gradient`` answered by one compiled function G, so TensorFlow's
gradient functions do not run in Python.

While a non-persistent tape records inside a Terra iteration, a ``TapeTee`` in front of the
engine's sink keeps a copy of every op the loop's thread runs, and of every region the tape
records (``record.record_operation`` of a ``TerraRegion``). At ``gradient(target, variables)`` a
``TapeRecording`` wires that copy as a region's recording does, except that every tensor not made
by an op of the copy is an argument of G (the batch, a constant), never a value baked in.

Which of those ops the tape holds follows TensorFlow's rule (pywrap_tfe RecordGradient): the tape
was not paused, and an input of a trainable dtype is on the tape; the variables the tape watched
start it. Function calls run by ``execute`` (a region's F) are not recorded, as in eager. G is
``backward.propagate`` over those ops: tape.h's order, TensorFlow's gradient functions, a region's
own B for a region, seeded with ones for the target.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import record
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.framework.indexed_slices import IndexedSlices

from .. import capture
from ..capture.attrs import split_inputs
from ..capture.location import user_line
from ..capture.placeholder import Placeholder
from ..capture.recorder import flatten
from ..capture.signature import MAX_VALUES, op_info, op_type_of
from ..coexec.lower import NOINLINE, SegmentOp, Wire
from .backward import _aggregate, _Values, fill_out_grads, propagate, tape_view, wire_key
from .recording import Recording, RecordingTee
from .region import _UNFILLABLE, FILLERS, FastCall, _filler

if TYPE_CHECKING:
    from .tape_key import CopyValues

REGION_OP = "TerraRegion"  # the op type a region's hit records on the tape (region.Region.run)
# a value fetched from the graph while the tape recorded, linked on the tape to its placeholder,
# then read by an op itself (this tape only)
FETCHED = "a value fetched from the graph while the tape recorded"


class TapeTee(RecordingTee):
    """The capture sink while one tape records: the engine's sink sees every op as always."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        # a tape records the loop's own code: a constant made there may come from the loop's
        # data, so reading it stays an effect (``Recording._split_reads``)
        self.first_id = None
        self.broken = ""  # why the tape's ops cannot be known from the copy
        self.regions: dict[int, tuple] = {}  # position -> (B, its saved inputs) of a region
        self.copy = self.wired = None  # its CopyKey and TapeRecording, once ``gradient`` made them
        self.watches: list[tuple[int, list]] = []  # (ops copied before, tensors) per tape.watch
        self.site = user_line()[0]  # where the tape was pushed
        self.calls: dict[int, int] = {}  # Keras calls made while it recorded, per object id
        self.links: set[int] = set()  # ids of fetched values the tape links to placeholders

    def watch(self, tensors: list) -> None:
        """``tape.watch`` of ``tensors`` (variables aside: the tape lists those)."""
        tensors = [t for t in tensors if isinstance(t, tf.Tensor) and t.dtype != tf.resource]
        if tensors:
            self.watches.append((len(self.raw), tensors))

    def _record(self, op_name, args, attrs, outputs) -> None:
        if self.links and not self.broken and any(
                getattr(x, "_id", None) in self.links for x in flatten(args)):
            self.broken = FETCHED  # the tape reads it behind its link; the copy cannot
        op_type = op_type_of(op_name)
        # a function called by ``execute`` (a region's F) is not taped: who calls it tapes
        untaped = attrs is not None and op_info(op_type).function
        self.raw.append((op_type, _as_read(args), attrs, outputs,
                         untaped or pywrap_tfe.TFE_Py_TapeSetIsStopped()))

    def own_gradient(self, op_type: str, inputs, outputs) -> None:
        """An op recorded with its own gradient function that is not a region's hit (a custom
        gradient, a tf.function): the copy cannot know the tape. A fetched value's link to its
        placeholder (``Placeholder.real``) is a dead end on the tape, which the copy need not
        hold: every op on a placeholder is taped on the placeholder itself (the slow path,
        ``PythonRunner._trace_op``). Only an op reading the value itself breaks the copy."""
        if op_type == "Identity" and inputs and isinstance(inputs[0], Placeholder):
            self.links.update(t._id for t in outputs)
        else:
            self.broken = f"an op with its own gradient function on the tape ({op_type})"

    def region_op(self, inputs, outputs, backward: FastCall, saved: list) -> None:
        """A region's hit, recorded on the tape as one op whose gradient is its B."""
        self.regions[len(self.raw)] = (backward, saved)
        self.raw.append((REGION_OP, list(inputs), None, list(outputs),
                         pywrap_tfe.TFE_Py_TapeSetIsStopped()))


def _as_read(args):
    """An op's arguments with each numpy array copied, as the op read it: the copy is read at
    the gradient, and the loop may refill an array in place meanwhile (a mask or an index
    buffer reused every step), where eager's ops converted it when they ran."""
    for a in args:
        if type(a) is np.ndarray or type(a) in (list, tuple) and any(
                type(x) is np.ndarray for x in a):
            break
    else:
        return args
    return [type(a)(map(_copied, a)) if type(a) in (list, tuple) else _copied(a) for a in args]


def _copied(x):
    return x.copy() if type(x) is np.ndarray else x


def _inputs(op_type: str, args, attrs) -> list:
    return list(args) if op_type == REGION_OP else split_inputs(op_type, args, attrs)


def _shape_like(op_type: str, inputs: list) -> tuple:
    """Per input: whether it is an axis, a shape, a permutation (``signature.OpInfo``)."""
    like = () if op_type == REGION_OP else op_info(op_type).shape_like
    return like if len(like) == len(inputs) else (False,) * len(inputs)


def tape_inputs(tee: TapeTee, p: int):
    """(value, shape-like) of each input of the copy's op ``p``, then of the values a region's
    B reads (never shape-like)."""
    op_type, args, attrs = tee.raw[p][:3]
    inputs = _inputs(op_type, args, attrs)
    saved = tee.regions[p][1] if p in tee.regions else ()
    likes = itertools.chain(_shape_like(op_type, inputs), itertools.repeat(False))
    return zip((*inputs, *saved), likes)


def _externals(tee: TapeTee) -> tuple[list, set]:
    """The tensors the copied ops read but did not make, in first use order: G's arguments
    (variable handles aside). Also the ids of the inputs baked into G by value: small integer
    axes, shapes and permutations, which gradient functions read with ``constant_value``."""
    made, seen, out, baked = set(), set(), [], set()
    for p, raw in enumerate(tee.raw):
        for x, like in tape_inputs(tee, p):
            if is_filler(x):
                continue
            if like and is_baked(x):
                baked.add(id(x))
            elif isinstance(x, tf.Tensor) and x._id not in made and x._id not in seen \
                    and x.dtype != tf.resource:
                seen.add(x._id)
                out.append(x)
        made.update(t._id for t in flatten(raw[3]))
    return out, baked


def is_filler(x) -> bool:
    """Whether ``x`` is the scalar a region passes to B for a value B does not read."""
    return id(x) in FILLERS


def is_baked(x) -> bool:
    """Whether a shape-like input is baked into G by value: a small integer tensor or array."""
    if type(x) is tf_ops.EagerTensor:
        return x.dtype.is_integer and x.shape.num_elements() <= MAX_VALUES
    if isinstance(x, np.ndarray | np.generic):
        return np.issubdtype(x.dtype, np.integer) and np.size(x) <= MAX_VALUES
    return False


class TapeRecording(Recording):
    """The copy of one tape as wired ops, with the interface ``backward`` reads of a region
    (``rec``, ``spec``, ``dtype``, ``trainable``, ``outs``, ``grad_fns``)."""

    def __init__(self, tee: TapeTee, target, watched: set[int]) -> None:
        """``watched``: the ids of the handles of the variables the tape watched."""
        self._tee_regions, self.saved_wires, self.values = tee.regions, {}, {}
        self.numpy_args: dict[int, tuple] = {}  # argument -> (id of its array, its dtype)
        self.externals, self._baked = _externals(tee)
        super().__init__(tee, self.externals, target)
        self.args = tuple((t.dtype.name, tuple(t.shape.as_list())) for t in self.externals)
        self.trainable = {k: h for k, h in self.handles.items() if h._id in watched}
        self.outs = [w for w in self.out_wires if isinstance(w, Wire) and w.kind == "op"]
        self.grad_fns = {p: _region_grads for p in tee.regions}
        self.backwards = {p: b for p, (b, _) in tee.regions.items()}

    def _add_op(self, p: int, op_type: str, call_args, raw_attrs, outputs) -> None:
        self.values[p] = flatten(outputs)
        if op_type != REGION_OP:
            return super()._add_op(p, op_type, call_args, raw_attrs, outputs)
        backward, saved = self._tee_regions[p]
        wires = tuple(self._wire(x, x.dtype)[0] for x in call_args)
        # a value B does not read (a scalar filler) is zeros of its spec inside G: B's body
        # reads static shapes
        self.saved_wires[p] = tuple(
            ("zeros", x.dtype.name, tuple(spec.shape.as_list())) if is_filler(x)
            else self._wire(x, x.dtype)[0] for x, spec in zip(saved, backward.cf.inputs))
        self.ops.append(SegmentOp(p, REGION_OP, (("backward", backward.name),), wires,
                                  len(outputs)))
        for k, t in enumerate(outputs):
            self._made[t._id] = (p, k)
            self.out_specs[(p, k)] = (t.dtype.name, tuple(t.shape.as_list()))

    def _wire(self, x, dtype) -> tuple[Wire, bool]:
        """A numpy input (the batch the loop fed an op) is an argument too, as the tensor the op
        converts it to; a Python number or a baked axis stays a constant of the code."""
        if isinstance(x, np.ndarray | np.generic) and id(x) not in self._baked:
            self.numpy_args[len(self.externals)] = (id(x), dtype)
            x = capture.eager_constant(x, dtype)
            self._arg_ids[x._id] = len(self.externals)
            self.externals.append(x)
            return Wire("arg", self._arg_ids[x._id]), False
        return super()._wire(x, dtype)

    @property
    def rec(self) -> TapeRecording:
        """Itself, as ``backward`` reads a region's recording (a property: an attribute would
        be a reference cycle, keeping the copy's tensors until the cyclic collector runs)."""
        return self

    def value(self, key: tuple):
        """This call's tensor of a value key of G's arguments."""
        return self.values[key[1]][key[2]] if key[0] == "op" else self.externals[key[1]]

    def source_keys(self, handles: list) -> tuple:
        """The capture key of each source handle (None: the copy never read it)."""
        return tuple(self._cap.get(h._id) for h in handles)


def _region_grads(rec: TapeRecording, view, p: int, out_grads: list, value) -> list:
    """A region's gradient inside G: its B's body on its saved values and the out-grads (zeros
    where none, as the tape gives a recorded op), as ``Region.run`` records it. Inlined: a
    function called inside G ran twice as slow."""
    if not fill_out_grads(rec, p, out_grads, value):
        return [None] * len(rec.ops[p].inputs)
    saved = [value(wire_key(w)) if isinstance(w, Wire) else value.zeros(w[2], w[1])
             for w in rec.saved_wires[p]]
    return list(rec.backwards[p].body(*saved, *out_grads))  # B's ops, traced into G


class TapeRegion:
    """G for one tape recording: (the forward values it reads) -> the sources' gradients."""

    def __init__(self, rec: TapeRecording, sources: tuple, label: str) -> None:
        view = tape_view(rec, ())
        ops = rec.ops
        self.keys = sorted(
            {wire_key(w) for p in view.in_set
             for w in (*ops[p].inputs, *rec.saved_wires.get(p, ()))
             if isinstance(w, Wire) and w.kind != "var"}
            | {("op", p, k) for p in view.in_set for k in range(ops[p].n_outputs)},
            key=lambda k: (k[0] != "op", k[1:]))
        self.dtypes = [rec.spec[k][0] for k in self.keys]
        self.connected: list[int] = []  # positions of the sources G returns a gradient for
        target = wire_key(rec.outs[0])
        traced = [rec]  # only while G is traced: the copy's tensors must not outlive the call

        def body(*flat):
            rec = traced[0]
            value = _Values(rec, dict(zip(self.keys, flat)))
            dtype, shape = rec.spec[target]
            grads = propagate(rec, view, {target: [tf.ones(shape, dtype)]}, value)
            out = []
            for i, k in enumerate(sources):
                g = None if k is None else _aggregate(grads.get(("var", k)))
                if g is not None:
                    self.connected.append(i)
                    out.append(g)
            return out

        body.__name__ = label
        specs = [tf.TensorSpec(rec.spec[k][1], rec.spec[k][0]) for k in self.keys]
        with record.stop_recording():  # its captures are no op of a tape still recording
            cf = tf.function(body, autograph=False, experimental_attributes=NOINLINE
                             ).get_concrete_function(*specs)
        traced.clear()
        self.used = [ph.consumers() != [] for ph in cf.graph.inputs[:len(self.keys)]]
        self.n_sources = len(sources)
        self.n_ops = len(view.in_set)
        self.fn = FastCall(cf)
        self.hits = 0

    def inputs(self, rec: TapeRecording | CopyValues) -> list:
        """G's arguments for this call's values, read by ``rec.value`` (the wired copy, or a copy
        matched by key); a scalar filler where G does not read one."""
        return [_tensor(rec.value(k), dtype) if used or dtype in _UNFILLABLE else _filler(dtype)
                for k, used, dtype in zip(self.keys, self.used, self.dtypes)]

    def arrange(self, grads) -> list:
        """G's outputs as one gradient per source (None where a source is unconnected)."""
        out = [None] * self.n_sources
        for i, g in zip(self.connected, grads):
            out[i] = g
        return out

    def run(self, rec: TapeRecording | CopyValues) -> list:
        """The sources' gradients for this call's values, as graph work."""
        return self.arrange(self.fn.packed(*self.inputs(rec)) if self.connected else ())


def _tensor(x, dtype: str):
    """An argument of G as a tensor. A copy matched by key holds the numpy array the loop fed
    an op where the copy G formed from held the tensor that op ran on (an op run for real
    converts its input first; answered by co-execution, it takes the array): G takes the tensor
    the op converts it to (an array in a function call's inputs is a TypeError)."""
    return capture.eager_constant(x, dtype) if isinstance(x, np.ndarray | np.generic) else x


def same_bits(a, b) -> bool:
    """Bit for bit: both None, or equal values (an IndexedSlices: its values and indices)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, IndexedSlices) or isinstance(b, IndexedSlices):
        return (type(a) is type(b) and same_bits(a.values, b.values)
                and same_bits(a.indices, b.indices))
    x, y = np.asarray(a), np.asarray(b)
    return x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()

