"""Call signatures: what the PythonRunner matches an op call against, cheaply.

A call signature is built from the op call exactly as it reaches the capture hook (op name, program
location, the attrs as passed, and per input its dtype and shape), so computing it costs a few
microseconds and needs no OpDef normalisation. Tracing computes the signature of every op it
records; co-execution looks calls up by it. Inputs whose *value* decides output shapes (a reshape
target, a reduction axis, slice bounds: integer inputs typed by an index attr) put their value in
the signature too, so an entry's output shapes are always right.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import dtypes, op_def_registry, ops
from tensorflow.python.framework.tensor_shape import TensorShape

from ..trace.records import TensorRef, TensorSpec, Trace
from .attrs import name_of, output_count_attrs
from .functions import confirmed, function_def
from .placeholder import Placeholder

_EAGER = ops.EagerTensor
_INT_ENUMS = {3, 9}  # DT_INT32, DT_INT64
_RESOURCE_ENUM = 20
# Type attrs of inputs that hold shapes, axes, indices into shapes: their values decide shapes.
_INDEX_ATTRS = {
    "Tidx", "Tshape", "Index", "Tpaddings", "Tmultiples", "Tperm", "Tdim", "index_type",
    "Tblock_shape", "Tcrops", "Taxis", "Tlen", "Tsplits", "out_type", "Tk", "Tnumsegments",
}
_SHAPE_INPUTS = {"RandomUniform": (0,), "RandomStandardNormal": (0,), "TruncatedNormal": (0,),
                 "RandomUniformInt": (0,), "ScatterNd": (2,)}
# The input pipeline's ops: Python runs them for real, where they happen (an iterator's end,
# OutOfRange, surfaces there), without waiting for the graph, which never touches an iterator or
# a dataset. A new iterator each epoch is no new call: their signatures are never looked up. So
# are the datasets a loop makes each epoch (a distributed dataset's per-device datasets are
# ``GeneratorDataset``s whose functions are new every epoch) and a ``MultiDeviceIterator``'s ops.
ITERATOR_OPS = frozenset({
    "AnonymousIterator", "AnonymousIteratorV2", "AnonymousIteratorV3", "IteratorV2",
    "MakeIterator", "DeleteIterator", "IteratorGetNext", "IteratorGetNextSync",
    "IteratorGetNextAsOptional", "OptionalGetValue", "OptionalHasValue", "OptionalNone",
    "IteratorToStringHandle", "IteratorFromStringHandleV2",
    "MultiDeviceIterator", "AnonymousMultiDeviceIterator", "AnonymousMultiDeviceIteratorV3",
    "DeleteMultiDeviceIterator", "MultiDeviceIteratorInit", "MultiDeviceIteratorToStringHandle",
    "MultiDeviceIteratorFromStringHandle", "MultiDeviceIteratorGetNextFromShard",
} | {op for op in dir(tf.raw_ops)
     if op.endswith(("Dataset", "DatasetV2", "DatasetV3", "DatasetV4"))})
MAX_VALUES = 16  # a shape-defining input of at most this many values is part of a signature


class OpInfo:
    """What the hot path needs to know about an op type, computed once."""

    __slots__ = ("n_inputs", "shape_like", "structure", "stateful", "known", "function",
                 "count_attrs")

    def __init__(self, op_type: str) -> None:
        op_def = op_def_registry.get(op_type)
        self.function = False
        self.count_attrs = output_count_attrs(op_def)
        if op_def is None:  # a function call (only ever seen on the slow path), or unknown
            fdef = function_def(op_type)
            self.known = self.function = fdef is not None
            self.shape_like, self.structure = (), "list"
            self.n_inputs = len(fdef.signature.input_arg) if self.function else -1
            self.stateful = fdef.signature.is_stateful if self.function else True
            return
        self.known = True
        self.n_inputs = len(op_def.input_arg)
        fixed = _SHAPE_INPUTS.get(op_type, ())
        self.shape_like = tuple(
            i in fixed or a.type_attr in _INDEX_ATTRS or (not a.type_attr and a.type in _INT_ENUMS)
            for i, a in enumerate(op_def.input_arg)
        )
        outs = op_def.output_arg
        single = len(outs) == 1 and not outs[0].number_attr and not outs[0].type_list_attr
        self.structure = "none" if not outs else "single" if single else "list"
        self.stateful = op_def.is_stateful


_infos: dict[str, OpInfo] = {}


op_type_of = name_of  # the op type of a hook call: the slow path may pass it as bytes


def op_info(op_type: str) -> OpInfo:
    info = _infos.get(op_type)
    if info is None:
        info = _infos[op_type] = OpInfo(op_type)
    return info


# An eager tensor's signature by its ``_id`` (a process-wide counter, never reused; a tensor never
# changes): a loop passes the same constants to its ops every iteration. Not only cheaper: while
# a GraphRunner thread ran, the first ``_shape_tuple`` of a hooked call took ~13 us (0.3 alone),
# and memoising it made a co-executed loop of 33 small ops 18% faster.
_eager_sigs: dict[tuple[int, bool], tuple] = {}
MAX_EAGER_SIGS = 4096  # then forgotten at once: a loop feeding new tensors only misses


def _eager_sig(x, shape_like: bool) -> tuple:
    enum = x._datatype_enum()
    if enum == _RESOURCE_ENUM:  # which variable decides the shapes of what is read
        return (enum, x._id)
    shape = x._shape_tuple()
    if shape_like and enum in _INT_ENUMS and size_of(shape) <= MAX_VALUES:
        return (enum, shape, tuple(x._numpy_internal().ravel().tolist()))
    return (enum, shape)


def input_sig(x: Any, shape_like: bool) -> tuple:
    """Dtype and shape of one input (and its value when it is a small shape-like integer)."""
    t = type(x)
    if t is Placeholder:
        return x.sig
    if t is _EAGER:
        key = (x._id, shape_like)
        sig = _eager_sigs.get(key)
        if sig is None:
            if len(_eager_sigs) >= MAX_EAGER_SIGS:
                _eager_sigs.clear()
            sig = _eager_sigs[key] = _eager_sig(x, shape_like)
        return sig
    if t is TensorRef:  # a placeholder in the iteration log: the same form as Placeholder.sig
        return (x.dtype.as_datatype_enum, tuple(x.shape.as_list()))
    if t is int or t is bool:
        return (t, x) if shape_like else (t,)
    if t is float:
        return (t,)
    if t is list or t is tuple:
        return (t, tuple(input_sig(e, shape_like) for e in x))
    if t is np.ndarray:
        if shape_like and x.dtype.kind in "iu" and x.size <= MAX_VALUES:
            return (t, x.dtype.str, x.shape, tuple(x.ravel().tolist()))
        return (t, x.dtype.str, x.shape)
    if isinstance(x, np.generic):
        return (t, x.item()) if shape_like else (t,)
    return ("obj", t)


def size_of(shape: tuple) -> int:
    """Elements in a tensor of this (fully known) shape."""
    size = 1
    for d in shape:
        size *= d
    return size


def _frozen(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _attr_key(values: tuple) -> tuple:
    try:
        hash(values)  # the usual case: strings, ints, bools, dtypes
        return values
    except TypeError:
        return tuple(_frozen(v) for v in values)


def call_signature(op_name: Any, args: Any, attrs: tuple | None, loc: int) -> tuple:
    """The signature of a call as the hook sees it (fast path: ``attrs`` is None)."""
    info = op_info(op_type_of(op_name))
    if attrs is None:
        n = info.n_inputs
        ins = tuple([input_sig(x, s) for x, s in zip(args[:n], info.shape_like)])
        return (op_name, loc, _attr_key(args[n:]), ins)
    if len(info.shape_like) == len(args):
        ins = tuple([input_sig(x, s) for x, s in zip(args, info.shape_like)])
    else:  # list arguments flattened: no positional shape-like information
        ins = tuple([input_sig(x, False) for x in args])
    return (op_name, loc, _attr_key(tuple(attrs)), ins)


FAST_FALLBACK = "fast-path fell back"
RUN_FOR_REAL = "output shapes depend on input values"  # Python runs the call and reads them


@dataclass(frozen=True, slots=True)
class Entry:
    """What answering a known call needs: its node, output specs, attrs, return structure."""

    uid: int  # names the entry in segment keys
    node: int
    op_type: str
    attrs: tuple
    flat_attrs: tuple
    inputs: tuple[tuple[str, tuple], ...]  # (dtype name, shape) per flattened input
    outputs: tuple[tuple[Any, Any, tuple], ...]  # (tf.DType, TensorShape, sig) per output
    structure: str


class SignatureIndex:
    """Call signature -> Entry (or FAST_FALLBACK), learned from traced iterations."""

    max_inferred = 10_000
    max_siblings = 16  # known calls kept per site for inference

    def __init__(self) -> None:
        self.entries: dict[tuple, Entry | str] = {}
        self.node_locs: dict[int, int] = {}  # TraceGraph node -> the loc id it was learned at
        # Nodes whose values Python read in some iteration: co-execution hands the graph the ops
        # up to such a node as soon as it is issued, so the value is ready when Python asks.
        self.fetched_nodes: set[int] = set()
        # Entry uid -> whether its traced output shapes depend on input values (shapes.py)
        self.value_shaped: dict[int, bool] = {}
        self._sites: dict[tuple, list[tuple]] = {}  # (op name, loc) -> signatures, for explain
        self._uids = itertools.count()
        # Calls answered by shape inference, oldest first: a loop indexing by its step (``x[i]``)
        # makes one per iteration, so only the newest ``max_inferred`` are kept.
        self._inferred: deque[tuple] = deque()
        # site_key of known calls -> their (signature, answer)s: another call at the same site
        # is answered alike, with output shapes from shape inference. Several: two layers' ops
        # share a location (a Keras Sequential's loop over its layers)
        self._siblings: dict[tuple, list[tuple[tuple, Entry | str]]] = {}

    def unknown(self, signatures) -> tuple | None:
        """The first call of a traced iteration (its (signature, fast-path signature) pairs) that
        is not known and has no sibling; None when co-executing that iteration again would answer
        every op (iterator ops need no answer: they run for real; a region's function is known
        by construction, and this iteration teaches its call)."""
        for sig, fast in signatures:
            op_type = op_type_of(sig[0])
            if op_type in ITERATOR_OPS or confirmed(op_type):
                continue
            if not self._knows(sig):
                return sig
            if fast is not None and not self._knows(fast):
                return fast
        return None

    def _knows(self, sig: tuple) -> bool:
        return sig in self.entries or site_key(sig) in self._siblings

    def learn(self, trace: Trace, signatures, mapping: dict[int, int]) -> None:
        for op, (sig, fast_sig) in zip(trace.ops, signatures):
            if sig not in self.entries:
                structure = "list" if sig[2] and isinstance(sig[0], bytes) else None
                self.entries[sig] = Entry(
                    uid=next(self._uids),
                    node=mapping[op.index],
                    op_type=op.op_type,
                    attrs=op.attrs,
                    flat_attrs=tuple(x for kv in op.attrs for x in kv),
                    inputs=tuple((s.dtype, s.shape) for s in op.input_specs),
                    outputs=tuple(_output_spec(s) for s in op.outputs),
                    structure=structure or _structure(op.op_type, sig),
                )
                self._sites.setdefault(sig[:2], []).append(sig)
                self._add_sibling(sig, self.entries[sig])
            if fast_sig is not None and fast_sig not in self.entries:
                self.entries[fast_sig] = FAST_FALLBACK
                self._add_sibling(fast_sig, FAST_FALLBACK)
            self.node_locs.setdefault(mapping[op.index], op.loc)
            if op.fetched:
                self.fetched_nodes.add(mapping[op.index])

    def _add_sibling(self, sig: tuple, answer: Entry | str) -> None:
        known = self._siblings.setdefault(site_key(sig), [])
        if len(known) < self.max_siblings:
            known.append((sig, answer))

    def sibling(self, sig: tuple) -> Entry | str | None:
        """A known call that differs from ``sig`` only in input shapes, shape-defining values
        (``x[:, t]`` for a new ``t``) or list lengths: its answer holds but for those. Of
        several, the one sharing the most inputs with ``sig`` (a layer's weights: its node)."""
        known = self._siblings.get(site_key(sig))
        if not known:
            return None
        inputs = sig[3]
        return max(known, key=lambda k: sum(a == b for a, b in zip(k[0][3], inputs)))[1]

    def add(self, sig: tuple, sibling: Entry | str, attrs: tuple = (), inputs: tuple = (),
            outputs: list[tuple] = ()) -> Entry | str:
        """Know ``sig``: ``sibling``'s answer with these attrs, (dtype name, shape) inputs and
        outputs, inferred (a fast-path fallback stays one, as does a call run for real)."""
        answer: Entry | str = sibling  # the fast path refuses it as it refused the sibling
        if type(sibling) is Entry:
            answer = Entry(
                uid=next(self._uids),
                node=sibling.node,
                op_type=sibling.op_type,
                attrs=attrs,
                flat_attrs=tuple(x for kv in attrs for x in kv),
                inputs=inputs,
                outputs=tuple(_output_spec(TensorSpec(d, s)) for d, s in outputs),
                structure=sibling.structure,
            )
            self.value_shaped[answer.uid] = False  # its shapes come from inference
        self.entries[sig] = answer
        self._inferred.append(sig)
        if len(self._inferred) > self.max_inferred:
            dropped = self.entries.pop(self._inferred.popleft(), None)
            if type(dropped) is Entry:
                self.value_shaped.pop(dropped.uid, None)
        return answer

    def why_unknown(self, sig: tuple) -> str:
        """A short reason why ``sig`` is not in the index."""
        known = self._sites.get(sig[:2])
        if not known:
            return "new op or new program location"
        if all(k[2] != sig[2] for k in known):
            return "new attributes"
        reads_variable = any(s[0] == _RESOURCE_ENUM for s in sig[3] if type(s) is tuple and s)
        if reads_variable and all(k[3] != sig[3] for k in known):
            return "a different variable, or a new input shape or dtype"
        if all(len(k[3]) != len(sig[3]) or k[3] != sig[3] for k in known):
            return "new input shape, dtype or shape-defining value"
        return "new call"


def site_key(sig: tuple) -> tuple:
    """What a call's signature keeps when input shapes, shape-defining values, the length of
    lists of equal inputs and output counts (``tf.unstack`` of a new size) may change: op,
    location, the other attrs, input dtypes and ranks."""
    attrs, counts = sig[2], op_info(op_type_of(sig[0])).count_attrs
    if counts:
        attrs = tuple("*" if i % 2 and name_of(attrs[i - 1]) in counts else v
                      for i, v in enumerate(attrs))
    return (sig[0], sig[1], attrs, tuple(_input_site(s) for s in sig[3]))


def _input_site(s: tuple) -> tuple:
    head = s[0]
    if type(head) is int:  # a tensor: (dtype enum, shape[, values]) or (resource, variable)
        return s[:2] if head == _RESOURCE_ENUM else (head, len(s[1]))
    if head is list or head is tuple:  # equal elements: any number of them (AddN over the trips)
        elements = tuple(_input_site(e) for e in s[1])
        if len(elements) > 1 and all(e == elements[0] for e in elements):
            return (head, "*", elements[0])
        return (head, elements)
    if head is np.ndarray:
        return (head, s[1], len(s[2]))
    if head is int or head is bool or isinstance(head, type) and issubclass(head, np.generic):
        return (head,)
    return s


def _output_spec(spec) -> tuple:
    """What a placeholder of this output needs, made once: dtype, TensorShape, signature."""
    dtype = dtypes.as_dtype(spec.dtype)
    return (dtype, TensorShape(spec.shape), (dtype.as_datatype_enum, spec.shape))


def _structure(op_type: str, sig: tuple) -> str:
    # The slow path (``execute``) always returns a list; the fast path follows the OpDef.
    return "list" if isinstance(sig[0], bytes) else op_info(op_type).structure
