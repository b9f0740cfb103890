"""The guard key of a call: what a region is looked up by.

Object identity, method, argument specs (tensors by dtype and shape, Python scalars by value,
lists, tuples and dicts recursively, other objects by identity) and keyword names. numpy data is
an argument as the tensor Keras would convert it to (``numpy_as_tensors``); a numpy value left
in the arguments cannot be keyed (``Unguardable``): its values would be baked into the region.
"""

from __future__ import annotations

import numpy as np
from tensorflow.python.framework.indexed_slices import IndexedSlices

from .. import capture
from .function_calls import SCALARS, TENSORS

# tensors Keras attaches to a layer's output for the calls after it: a mask, and the logits of
# a sigmoid or softmax (its cross-entropies compute from them)
KERAS_ATTACHED = ("_keras_mask", "_keras_logits")


class Unguardable(Exception):
    """An argument the guard cannot key (its value would be baked into the region)."""


def _specs(value, out: list, tensors: list, seen: dict) -> None:
    """Guard key of one argument, appended to ``out``; lists, tuples and dicts (of any dict
    class) recursively: a tensor held in a container keyed by identity would be baked in by
    value. A tensor given twice is keyed as the same one (``seen``: id -> its first position):
    the recording wires both uses to one argument."""
    t = type(value)
    if t in TENSORS:
        first = seen.setdefault(id(value), len(tensors))
        same = first != len(tensors)
        out.append(("same", first) if same else (value.dtype, value._shape_tuple()))
        tensors.append(value)
        for name in KERAS_ATTACHED:  # read by Keras's losses: arguments too
            attached = getattr(value, name, None)
            if type(attached) in TENSORS:
                out.append(name)
                _specs(attached, out, tensors, seen)
    elif t is list or t is tuple:
        out.append(len(value))
        for v in value:
            _specs(v, out, tensors, seen)
    elif isinstance(value, dict):  # an OrderedDict's items too (its attributes: python_state)
        out.append((t, tuple(value)))
        for v in value.values():
            _specs(v, out, tensors, seen)
    elif t in SCALARS:
        out.append((t, value))
    elif t is IndexedSlices:  # a sparse gradient (an embedding's): its three tensors
        out.append(t)
        for part in (value.values, value.indices, value.dense_shape):
            _specs(part, out, tensors, seen)
    elif isinstance(value, np.ndarray | np.generic):
        raise Unguardable("a numpy argument (its values would be baked in)")
    else:
        out.append(id(value))


def guard_key(obj, method: str, args: tuple, kwargs: dict) -> tuple[tuple, list]:
    out, tensors, seen = [id(obj), method], [], {}
    for a in args:
        _specs(a, out, tensors, seen)
    for k, v in kwargs.items():
        out.append(k)
        _specs(v, out, tensors, seen)
    return tuple(out), tensors


def numpy_as_tensors(value):
    """``value`` with every numpy array or scalar (also in lists and tuples) as an eager tensor
    of its dtype (no op runs: nothing is recorded or co-executed)."""
    if isinstance(value, np.ndarray | np.generic):
        return capture.eager_constant(value)
    if type(value) is list or type(value) is tuple:
        return type(value)(numpy_as_tensors(v) for v in value)
    if type(value) is dict:
        return {k: numpy_as_tensors(v) for k, v in value.items()}
    return value


def variables_in(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out += variables_in(a)
        elif hasattr(a, "handle") and hasattr(a, "trainable"):
            out.append(a)
    return out
