"""Output shapes of a call no traced iteration made, from TensorFlow's shape inference.

A call that differs from a known one only in input shapes, in the values of shape-defining inputs
(``x[:, t]`` for a ``t`` not seen before, a reshape to a new size) or in the length of a list of
equal inputs (``AddN`` over the trips of a longer loop) is answered without a fallback: the op is
built once in a scratch graph, with those values as constants and every other input as a graph
placeholder of its dtype and shape, and its output shapes are read off. When inference cannot tell
a shape fully, the call is a divergence as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops

from .generator import SegmentOp, lower
from .placeholder import Placeholder
from .signature import MAX_VALUES, Entry


def infer_outputs(entry: Entry, attrs: tuple, specs: tuple, flat: list) -> list[tuple] | None:
    """(dtype name, shape) per output of ``entry``'s op called with ``attrs`` on ``flat`` (its
    flattened inputs, of (dtype name, shape) ``specs``), or None when shape inference leaves a
    shape unknown."""
    graph = tf.Graph()
    with graph.as_default():
        try:
            inputs = [_graph_input(x, dtype, shape) for x, (dtype, shape) in zip(flat, specs)]
            op = SegmentOp(entry.node, entry.op_type, attrs, (), len(entry.outputs))
            outputs = lower(op, inputs)
        except (TypeError, ValueError, tf.errors.OpError):  # the shape function rejects the call
            return None
    result = []
    for output in outputs:
        if not output.shape.is_fully_defined():
            return None
        result.append((output.dtype.name, tuple(output.shape.as_list())))
    return result


def _graph_input(x: Any, dtype: str, shape: tuple | None):
    value = _small_integer_value(x)
    if value is not None:
        return tf.constant(value, dtype=dtype)
    return tf.compat.v1.placeholder(dtype, shape)


def _small_integer_value(x: Any):
    """The value of an input that may define shapes (a few integers), else None."""
    if type(x) is ops.EagerTensor:
        small = x.dtype.is_integer and np.prod(x._shape_tuple()) <= MAX_VALUES
        return x._numpy_internal() if small else None  # not a fetch: x is a real value already
    if type(x) is int or type(x) is bool or isinstance(x, np.integer):
        return x
    if type(x) is np.ndarray:
        return x if x.dtype.kind in "iu" and x.size <= MAX_VALUES else None
    if type(x) in (list, tuple) and len(x) <= MAX_VALUES and all(type(e) is int for e in x):
        return list(x)
    return None


def input_specs(flat: list, known: tuple) -> tuple | None:
    """(dtype name, shape) of each input: a tensor's own; for a Python value or array, the dtype
    the sibling call converted it to (``known``, one spec per input) and its own shape; else
    None."""
    specs = []
    for i, x in enumerate(flat):
        if type(x) is Placeholder:
            specs.append((x.dtype.name, tuple(x.shape.as_list())))
        elif type(x) is ops.EagerTensor:
            specs.append((x.dtype.name, x._shape_tuple()))
        elif len(flat) == len(known):
            try:
                specs.append((known[i][0], np.shape(x)))
            except ValueError:  # a ragged nest of lists
                return None
        else:
            return None
    return tuple(specs)
