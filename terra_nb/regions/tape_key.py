"""The guard of a tape region: a key of a tape's copy, computed without wiring the copy.

Wiring a copy (``tape.TapeRecording``) splits and completes every op's attrs and keys every
value: about 2 ms a call for a five-op tape, as much as the gradient functions G replaces. Once a
copy has formed G, later copies are matched by ``CopyKey``, one pass over the copy: per op its
type, raw attrs, tape pause flag and output specs, and per input where it came from (an output
of an earlier op, a variable handle, the n-th distinct outside value with its spec, a Python
number or a baked small integer axis by value). Equal keys mean equal wired recordings, so G's
arguments are found again by position (``CopyValues``).
"""

from __future__ import annotations

import numpy as np
from tensorflow.python.framework import ops as tf_ops

from .. import capture
from ..capture.placeholder import Placeholder
from ..capture.recorder import flatten
from ..capture.signature import _attr_key, op_info
from ..coexec.call_args import RESOURCE_ENUM
from .tape import REGION_OP, TapeTee, is_baked, is_filler, tape_inputs

_EAGER = tf_ops.EagerTensor


class CopyKey:
    """One pass over a tape's copy: ``key``, and the outside values it reads in first-use
    order (``outside``), each named ``("t", tensor id)`` or ``("n", id)`` for a numpy array."""

    def __init__(self, tee: TapeTee, target, watched: frozenset, handles: list) -> None:
        self.made: dict[int, tuple] = {}  # tensor id -> (op position, output)
        self.names: dict[tuple, int] = {}  # name of an outside value -> its index
        self.outside: list = []
        self.outputs: list[list] = []
        self._specs: dict[int, tuple] = {}  # tensor id -> ``_outside``'s answer
        parts = []
        for p, raw in enumerate(tee.raw):
            parts.append(self._op(tee, p, *raw))
        self.key = (tuple(parts), self._input(target, False), watched,
                    tuple(h._id for h in handles))

    def _op(self, tee: TapeTee, p: int, op_type: str, args, attrs, outputs, paused) -> tuple:
        outs = flatten(outputs)
        self.outputs.append(outs)
        if op_type == REGION_OP:  # B's name fixes its F's and B's signatures
            backward, saved = tee.regions[p]
            key = (backward.name, paused, tuple([self._wiring(x) for x in (*args, *saved)]))
        else:  # the fast path passes attrs after its inputs
            attrs = _attr_key(tuple(args[op_info(op_type).n_inputs:]) if attrs is None
                              else tuple(attrs))
            key = (op_type, attrs, paused,
                   tuple([self._input(x, like) for x, like in tape_inputs(tee, p)]),
                   tuple([(t.dtype, t._shape_tuple()) for t in outs]))
        for k, t in enumerate(outs):
            self.made[t._id] = (p, k)
        return key

    def name(self, x):
        """Where tensor ``x`` comes from in the copy, as the key names an op's input."""
        return self._input(x, False)

    def _wiring(self, x):
        """Where a region's input or saved value comes from (B's signature fixes the spec of
        what its ops make; an outside value's is keyed all the same)."""
        made = self.made.get(x._id)
        if made is not None:
            return made
        if is_filler(x):
            return ("filler",)
        return self._outside(x)

    def _input(self, x, like: bool):
        t = type(x)
        if t is _EAGER or t is Placeholder:
            made = self.made.get(x._id)
            if made is not None:
                return made
            if x._datatype_enum() == RESOURCE_ENUM:
                return ("var", x._id)
            if is_filler(x):
                return ("filler",)
            if like and is_baked(x):
                return ("baked", x.dtype, x._shape_tuple(), x.numpy().tobytes())
            return ("outside", *self._outside(x))
        if t is np.ndarray or isinstance(x, np.generic):
            if like and is_baked(x):
                return ("baked", x.dtype.str, np.shape(x), x.tobytes())
            return ("outside", self._name(("n", id(x)), x), x.dtype.str, np.shape(x))
        if t is float:
            return (t, x.hex())
        if t is list or t is tuple:
            return (t, tuple([self._input(v, like) for v in x]))
        return (t, x) if t in (bool, int, str, type(None)) else (t, repr(x))

    def _outside(self, x) -> tuple:
        """An outside tensor's (index, dtype, shape), read once per copy (a variable's handle
        or the batch is an input of most ops)."""
        spec = self._specs.get(x._id)
        if spec is None:
            spec = self._specs[x._id] = (self._name(("t", x._id), x), x.dtype, x._shape_tuple())
        return spec

    def _name(self, name: tuple, x) -> int:
        index = self.names.get(name)
        if index is None:
            index = self.names[name] = len(self.outside)
            self.outside.append(x)
        return index


class CopyValues:
    """The values G reads in one copy matched by key: ``value(("op", p, k))`` an op output,
    ``value(("arg", i))`` G's i-th argument (``arg_sources``: per argument, the index of its
    outside value and, for a numpy array, the dtype the op converted it to)."""

    def __init__(self, copy: CopyKey, arg_sources: list[tuple]) -> None:
        self.copy, self.arg_sources = copy, arg_sources

    def value(self, key: tuple):
        if key[0] == "op":
            return self.copy.outputs[key[1]][key[2]]
        index, dtype = self.arg_sources[key[1]]
        x = self.copy.outside[index]
        if dtype is None:
            return x
        return capture.eager_constant(x, dtype)  # as the op converted it


def arg_sources(copy: CopyKey, externals: list, numpy_args: dict) -> list[tuple] | None:
    """Per argument of a wired copy (``TapeRecording.externals``), where ``copy`` holds it;
    None if one is missing (then the copy is only ever answered through its wiring)."""
    out = []
    for i, x in enumerate(externals):
        name, dtype = (("n", numpy_args[i][0]), numpy_args[i][1]) if i in numpy_args \
            else (("t", x._id), None)
        index = copy.names.get(name)
        if index is None:
            return None
        out.append((index, dtype))
    return out
