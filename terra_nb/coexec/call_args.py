"""What the PythonRunner reads from an op call: its flat inputs, whether they hold placeholders or
variables, a light copy for the log, tensors for the tape, the wrapper's output structure, and
the ops it answers from static shapes (``SHAPE_RULES``: Shape, Size, Rank of placeholders).
"""

from __future__ import annotations

import numpy as np
from tensorflow.python.framework import dtypes, ops
from tensorflow.python.ops import resource_variable_ops

from ..capture import eager_constant
from ..capture.placeholder import Placeholder
from ..capture.signature import Entry
from ..trace.records import TensorRef

EAGER = ops.EagerTensor
RESOURCE_ENUM = dtypes.resource.as_datatype_enum


def static_shape(x) -> list[int]:
    return x.shape.as_list()


SHAPE_RULES = {
    "Shape": lambda flat, t: [eager_constant(static_shape(flat[0]), t)],
    "ShapeN": lambda flat, t: [eager_constant(static_shape(x), t) for x in flat],
    "Size": lambda flat, t: [eager_constant(int(np.prod(static_shape(flat[0]))), t)],
    "Rank": lambda flat, t: [eager_constant(len(static_shape(flat[0])), dtypes.int32)],
}
SHAPE_OPS = frozenset(SHAPE_RULES)  # the whole program leaves them to Python too


def shaped_outputs(entry: Entry, outs: list):
    """The op's outputs in the structure its wrapper returns."""
    if entry.structure == "single":
        return outs[0]
    return None if entry.structure == "none" else list(outs)  # the caller may change it


def is_resizable(handle) -> bool:
    data = resource_variable_ops.get_eager_safe_handle_data(handle)
    if data is None or not data.is_set or not data.shape_and_type:
        return True  # nothing declared (an iterator's handle has no data): it may change
    shape = data.shape_and_type[0].shape
    return shape.unknown_rank or any(d.size < 0 for d in shape.dim)


class ResizableVariables:
    """Which variables' shapes may change (``shape=[None, ...]``): what reads one gets the shape
    it has when it runs, so it must run for real. Decided once per handle."""

    def __init__(self) -> None:
        self._known: dict[int, bool] = {}  # variable handle id -> shape not fully defined

    def read_by(self, flat: list) -> bool:
        """Whether an input in ``flat`` is the handle of such a variable."""
        for x in flat:
            if type(x) is EAGER and x._datatype_enum() == RESOURCE_ENUM:
                resizable = self._known.get(x._id)
                if resizable is None:
                    resizable = self._known[x._id] = is_resizable(x)
                if resizable:
                    return True
        return False


def flat_inputs(inputs) -> list:
    out = []
    for x in inputs:
        if type(x) is list or type(x) is tuple:
            out.extend(x)
        else:
            out.append(x)
    return out


def scan_inputs(flat: list) -> tuple[bool, bool]:
    placeholders = resources = False
    for x in flat:
        t = type(x)
        if t is Placeholder:
            placeholders = True
        elif t is EAGER and x._datatype_enum() == RESOURCE_ENUM:
            resources = True
    return placeholders, resources


def light_args(args):
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


def tape_inputs(flat: list, entry: Entry) -> list:
    """Inputs for the tape: Python values converted to tensors of the op's input dtype."""
    out = []
    for x, (dtype, _) in zip(flat, entry.inputs):
        if type(x) is Placeholder or isinstance(x, EAGER):
            out.append(x)
        else:
            out.append(eager_constant(x, dtype))
    return out
