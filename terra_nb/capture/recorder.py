"""The recorder: the capture sink that turns one iteration's eager ops into a ``Trace``.

The hot path (``on_op``) only locates the op and appends the raw call; everything else (splitting
fast-path arguments, completing attributes from the OpDef, shapes, lineage) happens once per
iteration in ``finish``, so capture stays cheap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

from ..trace.records import Source, TensorSpec, Trace, TraceOp
from .attrs import complete_attrs, input_dtypes, is_tensor, split_call
from .location import LocationTable
from .signature import call_signature, op_type_of
from .variable_names import name_variables

_RESOURCE = tf.resource


class TraceRecorder:
    """Capture sink for one thread; ``begin``/``finish`` bracket each iteration.

    After ``finish``, ``signatures`` holds per op of the trace its call signature and, for an op
    whose fast path fell back to the slow path, the signature of that fast-path attempt.
    """

    intercepts = False

    def __init__(self, locations: LocationTable, handles: dict[str, Any] | None = None,
                 names: dict[str, str] | None = None) -> None:
        self.locations = locations
        self._raw: list[tuple] = []
        self._context = context.context()  # its device_name: the user's tf.device scope
        self._fetched: list[Any] = []
        self._attempt: tuple | None = None
        self._previous: dict[int, tuple[int, int]] = {}  # tensor id -> (op, output), last iteration
        self.signatures: list[tuple[tuple, tuple | None]] = []
        # variable key (``Source.detail``) -> its resource handle, for the generated program
        self.handles: dict[str, Any] = {} if handles is None else handles
        # variable key -> its Keras or TensorFlow name (``variable_names``), for the views
        self.names: dict[str, str] = {} if names is None else names

    # -- hot path ---------------------------------------------------------------------------

    def on_op(self, op_name, args, attrs, outputs, frame) -> None:
        # ``record`` inlined: this runs for every op while tracing.
        loc = self.locations.locate(frame)
        attempt = self._attempt
        if attempt is not None:
            self._attempt = None
        self._raw.append((op_name, args, attrs, outputs, loc, attempt, self._context.device_name))

    def record(self, op_name, args, attrs, outputs, loc: int, device: str | None = None) -> None:
        """Log one executed op (``outputs`` may be TensorRefs); ``device``: its tf.device scope,
        when the caller read it already (else read here)."""
        attempt, self._attempt = self._attempt, None
        if device is None:
            device = self._context.device_name
        self._raw.append((op_name, args, attrs, outputs, loc, attempt, device))

    def on_fast_fallback(self, op_name, args, frame) -> None:
        """The fast path refused the call; the same op comes next through the slow path."""
        self.attempted(op_name, args, self.locations.locate(frame))

    def attempted(self, op_name, args, loc: int) -> None:
        """Log a fast-path call that was refused; it is attached to the next recorded op."""
        self._attempt = (op_name, args, loc)

    def on_fetch(self, tensor) -> None:
        self._fetched.append(tensor)

    @property
    def last_loc(self) -> int | None:
        """The location of the op logged last this iteration (None before the first)."""
        return self._raw[-1][4] if self._raw else None

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
        self.locations.release_root()
        self._raw.clear()
        self._fetched.clear()
        self._attempt = None

    def finish(self, iteration: int) -> Trace:
        """Make the trace of the ops recorded since ``begin`` and release their tensors."""
        root = self.locations.root  # its namespace names the variables the trace read
        self.locations.release_root()
        producers: dict[int, tuple[int, int]] = {}
        ops = []
        prev_loc = None
        self.signatures = []
        for index, (op_name, args, raw_attrs, outputs, loc, attempt, device) in enumerate(
                self._raw):
            op_type = op_type_of(op_name)
            self.signatures.append(
                (
                    call_signature(op_name, args, raw_attrs, loc),
                    None if attempt is None else call_signature(*attempt[:2], None, attempt[2]),
                )
            )
            inputs, attrs = split_call(op_type, args, raw_attrs)
            outputs = flatten(outputs)
            attrs = complete_attrs(op_type, attrs, inputs, outputs)
            dtypes = input_dtypes(op_type, dict(attrs), len(inputs))
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
                    device=device or "",
                    new_iteration=None
                    if prev_loc is None
                    else self.locations.boundary(prev_loc, loc),
                )
            )
            prev_loc = loc
            for k, t in enumerate(outputs):
                producers[t._id] = (index, k)
        ops = _mark_fetches(ops, self._fetched, producers)
        name_variables(self.handles, root, self.names)
        self._previous = producers
        self.discard()
        return Trace(iteration=iteration, ops=tuple(ops))

    def _source(self, value, producers) -> Source:
        if not is_tensor(value):
            return Source("feed", detail="numpy" if isinstance(value, np.ndarray) else "python")
        made = producers.get(value._id)
        if made is not None:
            return Source("op", made[0], made[1])
        if value.dtype == _RESOURCE:
            key = f"v{value._id}"
            self.handles[key] = value
            return Source("var", detail=key)
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


def flatten(value) -> list:
    """The leaves of a hook call's (nested) list of inputs or outputs; None is no leaf."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    return [value]


def _spec(value, dtype: str | None = None) -> TensorSpec:
    """Spec of an input or output; a Python value gets the dtype the op converts it to."""
    if is_tensor(value):
        shape = value.shape
        return TensorSpec(value.dtype.name, None if shape.rank is None else tuple(shape.as_list()))
    array = np.asarray(value)
    return TensorSpec(dtype or array.dtype.name, tuple(array.shape))
