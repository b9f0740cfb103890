"""The recorder: the capture sink that turns one iteration's eager ops into a ``Trace``.

The hot path (``on_op``) only locates the op and appends the raw call; everything else (splitting
fast-path arguments, completing attributes from the OpDef, shapes, lineage) happens once per
iteration in ``finish``, so capture stays cheap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry, tensor_shape

from .location import LocationTable
from .signature import call_signature
from .trace import Source, TensorSpec, Trace, TraceOp

_RESOURCE = tf.resource


class TensorRef:
    """Stands for a tensor in the iteration log without keeping it (or its value) alive."""

    __slots__ = ("_id", "dtype", "shape")

    def __init__(self, tensor) -> None:
        self._id = tensor._id
        self.dtype = tensor.dtype
        self.shape = tensor.shape


def _is_tensor(value) -> bool:
    return isinstance(value, TensorRef) or tf.is_tensor(value)


class TraceRecorder:
    """Capture sink for one thread; ``begin``/``finish`` bracket each iteration.

    After ``finish``, ``signatures`` holds per op of the trace its call signature and, for an op
    whose fast path fell back to the slow path, the signature of that fast-path attempt.
    """

    intercepts = False

    def __init__(self, locations: LocationTable) -> None:
        self.locations = locations
        self._raw: list[tuple] = []
        self._fetched: list[Any] = []
        self._attempt: tuple | None = None
        self._previous: dict[int, tuple[int, int]] = {}  # tensor id -> (op, output), last iteration
        self.signatures: list[tuple[tuple, tuple | None]] = []

    # -- hot path ---------------------------------------------------------------------------

    def on_op(self, op_name, args, attrs, outputs, frame) -> None:
        loc = self.locations.locate(frame)
        attempt = self._attempt
        if attempt is not None:
            self._attempt = None
        self._raw.append((op_name, args, attrs, outputs, loc, attempt))

    def record(self, op_name, args, attrs, outputs, loc: int) -> None:
        """Log one executed op (``outputs`` may be TensorRefs)."""
        attempt, self._attempt = self._attempt, None
        self._raw.append((op_name, args, attrs, outputs, loc, attempt))

    def on_fast_fallback(self, op_name, args, frame) -> None:
        """The fast path refused the call; the same op comes next through the slow path."""
        self._attempt = (op_name, args, self.locations.locate(frame))

    def on_fetch(self, tensor) -> None:
        self._fetched.append(tensor)

    @property
    def count(self) -> int:
        """Ops logged since ``begin``."""
        return len(self._raw)

    # -- per iteration ----------------------------------------------------------------------

    def begin(self, root_frame) -> None:
        """Start an iteration whose loop runs in ``root_frame``."""
        self.locations.set_root(root_frame)
        self._raw.clear()
        self._fetched.clear()

    def discard(self) -> None:
        """Drop what was recorded (and the tensors it holds) without making a trace."""
        self._raw.clear()
        self._fetched.clear()
        self._attempt = None

    def finish(self, iteration: int) -> Trace:
        """Make the trace of the ops recorded since ``begin`` and release their tensors."""
        producers: dict[int, tuple[int, int]] = {}
        ops = []
        prev_loc = None
        self.signatures = []
        for index, (op_name, args, raw_attrs, outputs, loc, attempt) in enumerate(self._raw):
            op_type = op_name.decode() if isinstance(op_name, bytes) else op_name
            self.signatures.append(
                (
                    call_signature(op_name, args, raw_attrs, loc),
                    None if attempt is None else call_signature(*attempt[:2], None, attempt[2]),
                )
            )
            inputs, attrs = _split_call(op_type, args, raw_attrs)
            outputs = _flatten(outputs)
            attrs = _complete_attrs(op_type, attrs, inputs, outputs)
            dtypes = _input_dtypes(op_type, dict(attrs), len(inputs))
            location = self.locations.locations[loc]
            ops.append(
                TraceOp(
                    index=index,
                    op_type=op_type,
                    attrs=attrs,
                    loc=loc,
                    location=location.text,
                    inputs=tuple(self._source(x, producers) for x in inputs),
                    input_specs=tuple(_spec(x, d) for x, d in zip(inputs, dtypes)),
                    outputs=tuple(_spec(t) for t in outputs),
                    loops=location.loops,
                    new_iteration=None
                    if prev_loc is None
                    else self.locations.boundary(prev_loc, loc),
                )
            )
            prev_loc = loc
            for k, t in enumerate(outputs):
                producers[t._id] = (index, k)
        ops = _mark_fetches(ops, self._fetched, producers)
        self._previous = producers
        self.discard()
        return Trace(iteration=iteration, ops=tuple(ops))

    def _source(self, value, producers) -> Source:
        if not _is_tensor(value):
            return Source("feed", detail="numpy" if isinstance(value, np.ndarray) else "python")
        made = producers.get(value._id)
        if made is not None:
            return Source("op", made[0], made[1])
        if value.dtype == _RESOURCE:
            return Source("var", detail=f"v{value._id}")
        made = self._previous.get(value._id)
        if made is not None:
            return Source("carry", made[0], made[1])
        return Source("feed", detail="tensor")


def _mark_fetches(ops: list[TraceOp], fetched: list, producers) -> list[TraceOp]:
    marks: dict[int, set[int]] = {}
    for tensor in fetched:
        made = producers.get(tensor._id)
        if made is not None:
            marks.setdefault(made[0], set()).add(made[1])
    for index, outs in marks.items():
        op = ops[index]
        ops[index] = TraceOp(**{**_fields(op), "fetched": tuple(sorted(outs))})
    return ops


def _fields(op: TraceOp) -> dict:
    return {name: getattr(op, name) for name in op.__slots__}


def _flatten(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flatten(v)]
    return [value]


def _op_def(op_type: str):
    return op_def_registry.get(op_type)


def _split_call(op_type: str, args, attrs) -> tuple[list, dict]:
    """Inputs (list arguments flattened) and attrs as a dict, for either path."""
    op_def = _op_def(op_type)
    if attrs is None:  # fast path: inputs in OpDef order, then attr name/value pairs
        n = len(op_def.input_arg)
        raw_inputs, pairs = args[:n], args[n:]
        attr_dict = dict(zip(pairs[::2], pairs[1::2]))
        inputs = []
        for arg, value in zip(op_def.input_arg, raw_inputs):
            is_list = arg.number_attr or arg.type_list_attr
            inputs.extend(value if is_list and isinstance(value, (list, tuple)) else [value])
        if op_def is not None:
            _infer_list_attrs(op_def, raw_inputs, attr_dict)
        return inputs, attr_dict
    names = attrs[::2]
    return list(args), {
        n.decode() if isinstance(n, bytes) else n: v for n, v in zip(names, attrs[1::2])
    }


def _infer_list_attrs(op_def, raw_inputs, attr_dict) -> None:
    for arg, value in zip(op_def.input_arg, raw_inputs):
        if arg.number_attr and arg.number_attr not in attr_dict:
            attr_dict[arg.number_attr] = len(value)
        if arg.type_list_attr and arg.type_list_attr not in attr_dict:
            attr_dict[arg.type_list_attr] = [_dtype_name(v) for v in value]


def _complete_attrs(op_type: str, attrs: dict, inputs: list, outputs: list) -> tuple:
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
            if arg.type_attr and arg.type_attr not in full and _is_tensor(_at(values, position)):
                full[arg.type_attr] = values[position].dtype
            position += width
    for a in op_def.attr:
        if a.name not in full and a.HasField("default_value"):
            full[a.name] = _attr_value(a.default_value)
    return tuple(sorted((k, _normalise(kinds.get(k, ""), v)) for k, v in full.items()))


def _at(values: list, i: int):
    return values[i] if i < len(values) else None


def _dtype_name(value) -> str:
    if _is_tensor(value):
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
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
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


def _spec(value, dtype: str | None = None) -> TensorSpec:
    """Spec of an input or output; a Python value gets the dtype the op converts it to."""
    if _is_tensor(value):
        shape = value.shape
        return TensorSpec(value.dtype.name, None if shape.rank is None else tuple(shape.as_list()))
    array = np.asarray(value)
    return TensorSpec(dtype or array.dtype.name, tuple(array.shape))


def _input_dtypes(op_type: str, attrs: dict, n_inputs: int) -> list[str | None]:
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
