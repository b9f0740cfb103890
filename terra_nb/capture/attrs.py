"""OpDef-based normalisation of an op call: inputs split from attrs, every attr completed.

The fast path passes only explicit attrs (not the ones TensorFlow infers, such as ``T``, nor
defaults); the slow path passes all of them, type attrs as enums. Both become the same sorted tuple
of plain, hashable values here, so a TraceGraph node does not depend on the path an op took.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry, tensor_shape

from ..trace.records import TensorRef


def is_tensor(value) -> bool:
    """A tensor, or a TensorRef standing for one in the iteration log."""
    return isinstance(value, TensorRef) or tf.is_tensor(value)


def _op_def(op_type: str):
    return op_def_registry.get(op_type)


def split_call(op_type: str, args, attrs) -> tuple[list, dict]:
    """Inputs (list arguments flattened) and attrs as a dict, for either path."""
    if attrs is None:  # fast path: inputs in OpDef order, then attr name/value pairs
        op_def = _op_def(op_type)
        n = len(op_def.input_arg)
        raw_inputs, pairs = args[:n], args[n:]
        attr_dict = dict(zip(pairs[::2], pairs[1::2]))
        _infer_list_attrs(op_def, raw_inputs, attr_dict)
        return split_inputs(op_type, args, attrs), attr_dict
    return list(args), {name_of(n): v for n, v in zip(attrs[::2], attrs[1::2])}


def split_inputs(op_type: str, args, attrs) -> list:
    """The inputs of ``split_call`` alone (a tape's copy keys its ops' inputs every call)."""
    if attrs is not None:
        return list(args)
    inputs = []
    for arg, value in zip(_op_def(op_type).input_arg, args):  # stops before the attr pairs
        is_list = arg.number_attr or arg.type_list_attr
        inputs.extend(value if is_list and isinstance(value, (list, tuple)) else [value])
    return inputs


def _infer_list_attrs(op_def, raw_inputs, attr_dict) -> None:
    for arg, value in zip(op_def.input_arg, raw_inputs):
        if arg.number_attr and arg.number_attr not in attr_dict:
            attr_dict[arg.number_attr] = len(value)
        if arg.type_list_attr and arg.type_list_attr not in attr_dict:
            attr_dict[arg.type_list_attr] = [_dtype_name(v) for v in value]


def complete_attrs(op_type: str, attrs: dict, inputs: list, outputs: list) -> tuple:
    """Every attr of the op, normalised to hashable plain values and sorted by name.

    The fast path omits attrs TensorFlow infers (``T``) and defaults; they are taken from the
    input and output dtypes and from the OpDef, so both paths give the same attrs.
    """
    op_def = _op_def(op_type)
    if op_def is None:  # a function call op: the attrs are complete already
        return tuple(sorted((k, _plain(v)) for k, v in attrs.items()))
    kinds = {a.name: a.type for a in op_def.attr}
    full = dict(attrs)
    for args, values in ((op_def.input_arg, inputs), (op_def.output_arg, outputs)):
        position = 0
        for arg in args:
            width = full.get(arg.number_attr, 1) if arg.number_attr else 1
            if arg.type_list_attr:
                width = len(full.get(arg.type_list_attr, ()))
            if arg.type_attr and arg.type_attr not in full and is_tensor(_at(values, position)):
                full[arg.type_attr] = values[position].dtype
            position += width
    for a in op_def.attr:
        # The fast path passes None for an attr left at its default (``tf.squeeze(axis=None)``);
        # only a shape may be None (unknown rank).
        missing = a.name not in full or full[a.name] is None and a.type != "shape"
        if missing and a.HasField("default_value"):
            full[a.name] = _attr_value(a.default_value)
    return tuple(sorted((k, _normalise(kinds.get(k, ""), v)) for k, v in full.items()))


def _at(values: list, i: int):
    return values[i] if i < len(values) else None


def _dtype_name(value) -> str:
    if is_tensor(value):
        return value.dtype.name
    return tf.as_dtype(np.asarray(value).dtype).name


def _normalise(kind: str, value):
    if kind == "type":
        return tf.as_dtype(value).name
    if kind == "list(type)":
        return tuple(tf.as_dtype(v).name if not isinstance(v, str) else v for v in value)
    if kind == "shape":
        return _shape(value)
    if kind == "list(shape)":
        return tuple(_shape(v) for v in value)
    return _plain(value)


def _shape(value):
    dims = tensor_shape.as_shape(value)
    return None if dims.rank is None else tuple(dims.as_list())


def _plain(value):
    """A hashable, JSON-friendly form of an attr value."""
    if isinstance(value, bytes):  # bytes that are not UTF-8 survive: see string_attr
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, tf.DType):
        return value.name
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else repr(value)


def _attr_value(proto):
    which = proto.WhichOneof("value")
    if which == "list":
        lst = proto.list
        for field in ("s", "i", "f", "b", "type", "shape"):
            items = getattr(lst, field)
            if items:
                return [_attr_scalar(field, v) for v in items]
        return []
    return _attr_scalar(which, getattr(proto, which)) if which else None


def _attr_scalar(field: str, value):
    if field == "type":
        return tf.as_dtype(value).name
    if field == "shape":
        return (
            None
            if value.unknown_rank
            else tuple(d.size if d.size >= 0 else None for d in value.dim)
        )
    if field == "func":
        return value.name
    if field == "tensor":
        return repr(tf.make_ndarray(value).tolist())
    return value


def input_dtypes(op_type: str, attrs: dict, n_inputs: int) -> list[str | None]:
    """The dtype of every (flattened) input as the OpDef and the attrs give it."""
    op_def = _op_def(op_type)
    if op_def is None:
        return [None] * n_inputs
    out: list[str | None] = []
    for arg in op_def.input_arg:
        if arg.type_list_attr:
            out.extend(attrs.get(arg.type_list_attr, ()))
            continue
        dtype = tf.as_dtype(arg.type).name if arg.type else attrs.get(arg.type_attr)
        out.extend([dtype] * (attrs.get(arg.number_attr, 1) if arg.number_attr else 1))
    return out + [None] * (n_inputs - len(out))


def with_list_lengths(op_type: str, attrs: tuple, grouped_inputs) -> tuple | None:
    """Normalised ``attrs`` with every list-length attr (``N``) set from ``grouped_inputs`` (the
    op's inputs as the fast path passes them); None if a list of types would change too."""
    op_def = _op_def(op_type)
    full = dict(attrs)
    for arg, value in zip(op_def.input_arg, grouped_inputs):
        if arg.type_list_attr:
            return None
        if arg.number_attr:
            full[arg.number_attr] = len(value)
    return tuple(sorted(full.items()))


def output_count_attrs(op_def) -> frozenset[str]:
    """Attrs that only count outputs (``Unpack``'s ``num``, ``Split``'s ``num_split``): a call
    with a new value is the same call with more or fewer outputs."""
    if op_def is None:
        return frozenset()
    counted = {a.number_attr for a in op_def.output_arg if a.number_attr}
    return frozenset(counted - {a.number_attr for a in op_def.input_arg})


def name_of(name) -> str:
    """An op or attr name as the fast path (str) or the slow path (bytes) passes it."""
    return name.decode() if type(name) is bytes else name


def with_output_counts(attrs: tuple, passed: tuple, counts: frozenset[str]) -> tuple:
    """Normalised ``attrs`` with the output counts ``counts`` (``output_count_attrs``) as a call
    passed them (its attrs as name/value pairs, as in its signature)."""
    if not counts:
        return attrs
    full = dict(attrs)
    full.update((name_of(n), v) for n, v in zip(passed[::2], passed[1::2])
                if name_of(n) in counts)
    return tuple(sorted(full.items()))


def string_attr(value):
    """A normalised string attr (or list of them) as the bytes TensorFlow was given."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (list, tuple)):
        return [string_attr(v) for v in value]
    return value
