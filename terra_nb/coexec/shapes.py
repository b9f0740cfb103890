"""Output shapes of a call no traced iteration made, from TensorFlow's shape inference.

A call that differs from a known one only in input shapes, in the values of shape-defining inputs
(``x[:, t]`` for a ``t`` not seen before, a reshape to a new size) or in the length of a list of
equal inputs (``AddN`` over the trips of a longer loop) is answered without a fallback: the op is
built once in a scratch graph, with those values as constants and every other input as a graph
placeholder of its dtype and shape, and its output shapes are read off.

Shapes are values unless proven static (``value_shaped``): a traced call's output shapes answer a
later call only when inference, from the input specs and the input values its signature fixes,
determines them fully. ``tf.range`` on a tensor, ``boolean_mask``/``where``, ``unique``, NMS and
``dynamic_partition`` are not: such a call runs for real and Python reads its real shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops

from ..capture.attrs import with_list_lengths, with_output_counts
from ..capture.functions import static_outputs
from ..capture.placeholder import Placeholder
from ..capture.signature import FAST_FALLBACK, RUN_FOR_REAL, Entry, SignatureIndex, op_info
from .lower import SegmentOp, lower

UNKNOWN = "unknown"  # a shape that inference cannot tell: it depends on input values


def infer_entry(index: SignatureIndex, sig: tuple, inputs, attrs, flat: list) -> Entry | None:
    """An entry for a call with signature ``sig`` that differs from a known one only in input
    shapes, shape-defining values, list lengths or output counts, with output shapes from
    inference (added to ``index``); None when there is no such sibling or inference fails."""
    sibling = index.sibling(sig)
    if sibling is None:
        return None
    if sibling is FAST_FALLBACK:
        return index.add(sig, sibling)
    op_attrs, specs = sibling.attrs, input_specs(flat, sibling.inputs)
    if len(flat) != len(sibling.inputs):  # a list of another length
        op_attrs = None if attrs is not None else with_list_lengths(
            sibling.op_type, op_attrs, inputs)
    if op_attrs is None or specs is None:
        return None
    op_attrs = with_output_counts(op_attrs, sig[2], op_info(sibling.op_type).count_attrs)
    outputs = infer_outputs(sibling, op_attrs, specs, sig)
    if outputs is UNKNOWN:  # a known call whose output shapes are data: it runs for real
        return index.add(sig, RUN_FOR_REAL)
    if outputs is None or {d for d, _ in outputs} != {s[0].name for s in sibling.outputs}:
        return None
    return index.add(sig, sibling, op_attrs, specs, outputs)


def infer_outputs(entry: Entry, attrs: tuple, specs: tuple, sig: tuple) -> list[tuple] | str | None:
    """(dtype name, shape) per output of ``entry``'s op called with ``attrs`` on inputs of
    (dtype name, shape) ``specs``, where the input values the call signature ``sig`` carries are
    constants; ``UNKNOWN`` when an output shape depends on other input values; None when the shape
    function rejects the call."""
    inputs = _flat_inputs(sig[3])
    if len(inputs) != len(specs):
        return None
    if _unfixed_shape_input(entry.op_type, sig):
        return UNKNOWN
    return _inferred(entry, attrs, specs, _fixed_values(inputs, specs))


def value_shaped(entry: Entry, sig: tuple) -> bool:
    """Whether the output shapes of a traced call depend on input values that its signature
    ``sig`` does not fix (so the traced shapes cannot answer another call with that signature).
    A variable's reads take its declared shape (resizable variables run for real anyway). A
    function's outputs are static when the function was traced with static output shapes."""
    traced = [(d.name, tuple(shape.as_list())) for d, shape, _ in entry.outputs]
    if op_info(entry.op_type).function:
        return list(static_outputs(entry.op_type) or ()) != traced
    if any(_is_resource(s) for s in _flat_inputs(sig[3])):
        return False
    return infer_outputs(entry, entry.attrs, entry.inputs, sig) != traced  # else: not proven


def _inferred(entry: Entry, attrs: tuple, specs: tuple, values: list) -> list[tuple] | str | None:
    graph = tf.Graph()
    with graph.as_default():
        try:
            inputs = [_graph_input(v, dtype, shape) for v, (dtype, shape) in zip(values, specs)]
            op = SegmentOp(entry.node, entry.op_type, attrs, (), len(entry.outputs))
            outputs = lower(op, inputs)
        except (TypeError, ValueError, tf.errors.OpError):  # the shape function rejects the call
            return None
    if not all(output.shape.is_fully_defined() for output in outputs):
        return UNKNOWN
    return [(output.dtype.name, tuple(output.shape.as_list())) for output in outputs]


def _graph_input(value: Any, dtype: str, shape: tuple | None):
    """A constant for a known value, else a graph placeholder of the input's dtype and shape."""
    if value is not None:
        return tf.constant(value, dtype=dtype)
    return tf.compat.v1.placeholder(dtype, shape)


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


def _unfixed_shape_input(op_type: str, sig: tuple) -> bool:
    """Whether an input whose value decides output shapes (a reshape target, a range's limit)
    has a value the signature does not fix: even where inference tells the shape (a reshape to
    one dimension), whether the call succeeds depends on that value, and a compiled graph may
    drop the check (grappler removes a reshape to the shape it already has)."""
    shape_like = op_info(op_type).shape_like
    inputs = sig[3]
    if len(shape_like) != len(inputs):  # list inputs flattened: no positional information
        return False
    for like, s in zip(shape_like, inputs):
        if like and s and (type(s[0]) is int or s[0] is float) and _fixed_value(s, "int64") is None:
            return True
    return False


def _flat_inputs(sigs: tuple) -> list:
    out = []
    for s in sigs:
        if s and (s[0] is list or s[0] is tuple):
            out.extend(s[1])
        else:
            out.append(s)
    return out


def _is_resource(s: tuple) -> bool:
    return type(s[0]) is int and len(s) == 2 and type(s[1]) is int


def _fixed_values(sigs: list, specs: tuple) -> list:
    return [_fixed_value(s, dtype) for s, (dtype, _) in zip(sigs, specs)]


def _fixed_value(s: tuple, dtype: str):
    """The value an input signature carries (a small shape-like integer input), else None."""
    head = s[0]
    if type(head) is int and len(s) == 3:  # a tensor: (dtype enum, shape, values)
        return np.array(s[2], dtype=dtype).reshape(s[1])
    if head is np.ndarray and len(s) == 4:  # (ndarray, dtype str, shape, values)
        return np.array(s[3], dtype=s[1]).reshape(s[2])
    if (head is int or head is bool or isinstance(head, type) and issubclass(head, np.generic)) \
            and len(s) == 2:
        return s[1]
    return None
