"""Graph generation: a straight-line segment of confirmed ops -> one compiled ``tf.function``.

A ``Segment`` is plain data: the ops Python issued since the last flush (TraceGraph node, op type,
normalised attrs), how each input is wired (``op``: an earlier op of the segment; ``arg``: a
function argument, i.e. a value computed before the segment or fed from Python; ``var``: a
variable handle, captured), and which outputs the segment returns (those Python still holds).
Equal segments share one compiled function. Each op is lowered by a rule of ``lowering_rules``
(keyed by op type), by default from its OpDef as graph-mode op wrappers do. ``run_segment`` runs
a segment's ops eagerly instead, one by one, for a segment not worth compiling (seen once).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context, core, record
from tensorflow.python.framework import (
    op_def_library,
    op_def_library_pybind,
    op_def_registry,
    versions,
)
from tensorflow.python.ops import gen_array_ops

from ..capture import eager_constant
from ..capture.attrs import string_attr
from ..capture.functions import add_to_graph, function_def, graph_callee, static_outputs
from ..capture.placeholder import Placeholder
from ..capture.signature import op_info
from ..errors import TerraError
from .effect_order import IssueOrder
from .graph_sums import add_n


class Wire(NamedTuple):
    """Where an op input of a segment comes from: ``op``, output ``output`` of the segment's op at
    ``index``; ``arg``, the function argument ``index``; ``var``, the variable handle whose key
    is ``index`` (captured)."""

    kind: str
    index: int
    output: int = 0


@dataclass(frozen=True, slots=True)
class SegmentOp:
    node: int
    op_type: str
    attrs: tuple[tuple[str, Any], ...]
    inputs: tuple[Wire, ...]
    n_outputs: int
    device: str = ""  # the device scope Python issued it in ("": the default)


@dataclass(frozen=True, slots=True)
class Segment:
    ops: tuple[SegmentOp, ...]
    args: tuple[tuple[str, tuple[int | None, ...]], ...]  # (dtype name, shape) per argument
    returns: tuple[tuple[int, int], ...]  # (op position, output index)

    def __str__(self) -> str:
        lines = [f"segment({len(self.args)} args) -> {len(self.returns)} values"]
        for i, op in enumerate(self.ops):
            ins = " ".join(f"{k}{a}" + (f".{b}" if b else "") for k, a, b in op.inputs)
            lines.append(f"  #{i} node {op.node}: {op.op_type} {ins}")
        return "\n".join(lines)


def make_segment(key: tuple, entries: list) -> Segment:
    """The Segment named by a PythonRunner key: per op (entry uid, wiring), and the returns.

    ``entries`` give each op's node, type, attrs and input specs (the specs of arguments).
    """
    ops_key, returns = key
    specs: dict[int, tuple] = {}
    ops = []
    for (_, wiring, device), entry in zip(ops_key, entries):
        for i, (kind, a, _) in enumerate(wiring):
            if kind == "arg" and a not in specs:
                specs[a] = entry.inputs[i]
        ops.append(SegmentOp(entry.node, entry.op_type, entry.attrs, wiring, len(entry.outputs),
                             device))
    args = tuple(specs[a] for a in range(len(specs)))
    return Segment(tuple(ops), args, returns)


Rule = Callable[[SegmentOp, list], list]
lowering_rules: dict[str, Rule] = {}


def fusion_barrier(tensor):
    """``tensor`` unchanged, as a value TensorFlow's oneDNN graph pass cannot see through. The
    pass fuses a ``BiasAddGrad`` with a ``Conv2DBackpropFilter`` of the same gradient (into
    ``_MklConv2DBackpropFilterWithBias``), whose bias gradient sums in another order than eager's
    ``BiasAddGrad`` (7e-5 apart on a 16x8x8x16 gradient). ``EnsureShape``, unlike ``Identity``,
    is left in place by grappler."""
    return gen_array_ops.ensure_shape(tensor, tensor.shape)


def _op_def_rule(op: SegmentOp, inputs: list) -> list:
    """Build the op from its OpDef, as generated graph-mode wrappers do."""
    op_def = op_def_registry.get(op.op_type)
    if op_def is None:
        raise TerraError(f"terra-nb cannot lower op {op.op_type} into a graph")
    if op.op_type == "BiasAddGrad":
        inputs = [fusion_barrier(inputs[0])]
    if op.op_type == "AddN":  # in eager's order (graph_sums.py)
        return [add_n(inputs)]
    attrs = dict(op.attrs)
    kwargs = _group_inputs(op_def, attrs, inputs)
    inferred = _inferred(op.op_type)
    kinds = {a.name: a.type for a in op_def.attr}
    kwargs.update(
        {k: string_attr(v) if kinds[k] in _STRINGS else v
         for k, v in attrs.items() if k not in inferred}
    )
    # The name lets an error raised by the op be traced back to its node (and source line).
    return list(_create(op.op_type, op_def, f"terra_node_{op.node}", kwargs).outputs)


def _create(op_type: str, op_def, name: str, kwargs: dict):
    """The graph op of ``op_type`` from its keyword inputs and attrs. Where the generated
    wrappers' C++ fast path applies (every input one tensor, no function attrs, no ref inputs),
    the op is made directly: ``_apply_op_helper`` around it opens a name scope and serialises
    the graph's versions per op, half of the cost of building a region of 700 ops."""
    if (not op_def_library._CanExtractAttrsFastPath(op_def, kwargs)
            or any(a.is_ref for a in op_def.input_arg)):
        return op_def_library._apply_op_helper(op_type, name=name, **kwargs)[2]
    attrs, inputs, input_types, _ = op_def_library_pybind.process_inputs(
        op_type, versions.GRAPH_DEF_VERSION, kwargs)
    return _add_op(op_type, inputs, name, input_types=input_types, attrs=attrs, op_def=op_def)


def _add_op(op_type: str, inputs: list, name: str, **kwargs):
    """The graph op itself, named ``name`` (made unique)."""
    graph = tf.compat.v1.get_default_graph()
    # a name ending in "/" is taken as it is: unique_name has made it unique already
    return graph._create_op_internal(op_type, inputs, name=graph.unique_name(name) + "/",
                                     **kwargs)


_STRINGS = ("string", "list(string)")


@functools.cache
def _inferred(op_type: str) -> frozenset[str]:
    """Attrs TensorFlow infers from the inputs (passing them is an error)."""
    args = op_def_registry.get(op_type).input_arg
    return frozenset(n for a in args for n in (a.type_attr, a.number_attr, a.type_list_attr) if n)


def _group_inputs(op_def, attrs: dict, flat: list) -> dict:
    """Regroup flattened inputs into the OpDef's (possibly list-valued) input arguments."""
    out, position = {}, 0
    for arg in op_def.input_arg:
        if arg.number_attr:
            width = attrs[arg.number_attr]
        elif arg.type_list_attr:
            width = len(attrs[arg.type_list_attr])
        else:
            out[arg.name] = flat[position]
            position += 1
            continue
        out[arg.name] = list(flat[position : position + width])
        position += width
    return out


def _function_rule(op: SegmentOp, inputs: list) -> list:
    """A call of a runtime function (a ``tf.function``, a region): the function is copied into
    the graph's library and called so that its values stay eager's (``graph_callee``: a
    region's inlined, a user's function with the config its eager call had), with the output
    shapes it was traced with."""
    name = graph_callee(op.op_type)  # its values stay eager's
    add_to_graph(tf.compat.v1.get_default_graph(), name)
    attrs = dict(op.attrs)
    op_type = "StatefulPartitionedCall" if op_info(op.op_type).stateful else "PartitionedCall"
    tout = [tf.as_dtype(a.type) for a in function_def(name).signature.output_arg]
    # made directly, as ``_create`` makes an op: the generated wrapper's ``_apply_op_helper``
    # checks and converts every input and attr in Python, the most of compiling a segment of
    # region calls (whose B calls take dozens of inputs)
    call_attrs = {
        "Tin": _type_list([t.dtype for t in inputs]), "Tout": _type_list(tout),
        "f": attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name)),
        "config": attr_value_pb2.AttrValue(s=b""),
        "config_proto": attr_value_pb2.AttrValue(s=string_attr(attrs.get("config_proto", ""))),
        "executor_type": attr_value_pb2.AttrValue(
            s=string_attr(attrs.get("executor_type", ""))),
    }
    outputs = _add_op(op_type, inputs, f"terra_node_{op.node}", dtypes=tout, attrs=call_attrs,
                      op_def=op_def_registry.get(op_type)).outputs
    for output, (_, shape) in zip(outputs, static_outputs(op.op_type) or ()):
        output.set_shape(shape)
    return list(outputs)


def _type_list(dtypes: list) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(
        list=attr_value_pb2.AttrValue.ListValue(type=[d.as_datatype_enum for d in dtypes]))


def lower(op: SegmentOp, inputs: list) -> list:
    """Build ``op`` in the current (graph) context; returns its outputs."""
    rule = lowering_rules.get(op.op_type)
    if rule is None:
        rule = _function_rule if op_info(op.op_type).function else _op_def_rule
    return rule(op, inputs)


def _inputs(op: SegmentOp, env: list[list], args, handles: dict[int, Any]) -> list:
    """``op``'s inputs: outputs of earlier ops (``env``), arguments, variable handles."""
    out = []
    for kind, a, b in op.inputs:
        if kind == "op":
            out.append(env[a][b])
        elif kind == "arg":
            out.append(args[a])
        else:
            out.append(handles[a])
    return out


def interpretable(segment: Segment) -> bool:
    """Whether ``run_segment`` can run ``segment`` (no op needs a lowering rule or takes a
    function attr; a call of a function by name runs as eager runs it)."""
    return not any(op.op_type in lowering_rules or _has_function_attr(op) for op in segment.ops)


def _has_function_attr(op: SegmentOp) -> bool:
    op_def = op_def_registry.get(op.op_type)
    if op_def is None:
        return not op_info(op.op_type).function
    return any(a.type in ("func", "list(func)") for a in op_def.attr)


def _on(device: str):
    """The device scope an op was issued in (as ``tf.device`` in the user's code)."""
    return tf.device(device) if device else contextlib.nullcontext()


def run_segment(segment: Segment, args: list, handles: dict[int, Any],
                calls: list | None = None, env: list[list] | None = None,
                stamp: Callable[[], Any] | None = None) -> list:
    """Run ``segment``'s ops eagerly, one by one, in the order Python issued them (so a failing op
    stops every later one, as in eager); returns the values the segment returns. ``calls``, when
    given, gets a pair of ``stamp()`` values (Timestamp ops, issued into the same executor)
    around each call of a function among the ops; ``env``, each op's outputs as it runs (what
    ran before a failing op stays readable, as in eager). The caller keeps this thread's capture
    hooks and gradient tapes out of it."""
    ctx = context.context()
    ctx.ensure_initialized()  # (``_execute`` passes its handle straight to TensorFlow)
    env = [] if env is None else env
    after = None  # the stamp after the previous op, if it called a function
    for op in segment.ops:
        attrs = eager_attrs(op.op_type, op.attrs)
        timed = calls is not None and op_info(op.op_type).function
        # ``after`` is a pending tensor: its truth would wait for the executor to reach it
        before = (stamp() if after is None else after) if timed else None
        with _on(op.device):
            outputs = _execute(op, _inputs(op, env, args, handles), attrs, ctx)
        after = stamp() if timed else None
        if timed:
            calls.append((before, after))
        env.append(outputs or [])
    return [env[p][k] for p, k in segment.returns]


def _execute(op: SegmentOp, inputs: list, attrs: tuple, ctx) -> list:
    """``execute.quick_execute`` without its Python layers (the capture hook's pass-through
    among them): an op-by-op run issues every op of a segment, every run."""
    try:
        return pywrap_tfe.TFE_Py_Execute(ctx._handle, ctx.device_name, op.op_type, inputs,
                                         attrs, op.n_outputs)
    except core._NotOkStatusException as error:
        raise core._status_to_exception(error) from None


def real_argument(value: Any, dtype: str):
    """A segment argument as a tensor: a placeholder's value (pending while the run that makes
    it is not confirmed), a tensor, a Python value (made on the synchronous executor: call it
    outside the asynchronous one's scope)."""
    if isinstance(value, Placeholder):
        if value.value is not None:
            return value.value
        item = value.item
        if item is not None and item.error is not None:
            raise item.error  # made by an op that failed
        if value.failed is not None:
            raise value.failed  # made by a whole-program iteration that failed
        if value.pending is not None:
            return value.pending
        raise TerraError(f"internal: the value of node {value.node} was not kept")
    if isinstance(value, tf.Tensor):
        return value
    if type(value) is np.ndarray:  # the batch Python fed: the common case, made cheaply
        return eager_constant(value, dtype)
    return tf.convert_to_tensor(value, dtype)


@functools.lru_cache(maxsize=4096)
def eager_attrs(op_type: str, attrs: tuple) -> tuple:
    """Normalised attrs (see attrs.py) in the flat form eager execution takes (a function call's
    are its config strings). The answer is shared: read it, never change it."""
    op_def = op_def_registry.get(op_type)
    if op_def is None:
        return tuple(x for name, value in attrs for x in (name, string_attr(value)))
    kinds = {a.name: a.type for a in op_def.attr}
    flat: list = []
    for name, value in attrs:
        kind = kinds.get(name)
        if kind == "type":
            value = tf.as_dtype(value).as_datatype_enum
        elif kind == "list(type)":
            value = [tf.as_dtype(v).as_datatype_enum for v in value]
        elif kind == "list(shape)":
            value = [None if v is None else list(v) for v in value]
        elif kind in _STRINGS:
            value = string_attr(value)
        elif isinstance(value, tuple):  # shapes and lists of ints, floats, bools
            value = list(value)
        flat += [name, value]
    return tuple(flat)


NOINLINE = {"_noinline": True}  # tf.function attributes of a function that is never inlined
NO_ACD = {"_disable_acd": True}  # ... whose body orders its effects itself


def compile_segment(segment: Segment, handles: dict[int, Any], xla: bool = False,
                    noinline: bool = False, name: str = "segment", stamped: bool = False):
    """The concrete function that runs ``segment``; ``handles`` maps variable keys to handles.
    ``noinline``: a function called from other graphs (a region's) keeps its own body and
    grappler config there, instead of being inlined and optimised with its caller. ``name``
    names the function (``__inference_<name>_N``: the op type its calls have). ``stamped`` (and
    not XLA, which has no kernel for it, ``uses_xla``): one more output, a ``Timestamp`` taken
    once every op the run waits for has run (the run's end, without an op of its own)."""
    xla = uses_xla(segment, xla)

    def body(*args):
        order = IssueOrder()
        env: list[list] = []
        for op in segment.ops:
            inputs = _inputs(op, env, args, handles)
            with order.place(op.op_type, inputs), _on(op.device):
                outputs = lower(op, inputs)
            if len(outputs) != op.n_outputs:
                raise TerraError(f"lowering {op.op_type} gave {len(outputs)} outputs")
            env.append(outputs)
        returns = [env[p][k] for p, k in segment.returns]
        if stamped and not xla:
            with tf.control_dependencies(returns + list(order.graph.control_outputs)):
                returns.append(tf.timestamp())
        return returns

    body.__name__ = name
    function = tf.function(body, autograph=False, jit_compile=xla or None, reduce_retracing=False,
                           experimental_attributes={**NO_ACD, **(NOINLINE if noinline else {})})
    with record.stop_recording():  # its captures of handles are no op of an open tape's
        return function.get_concrete_function(
            *[tf.TensorSpec(shape, dtype) for dtype, shape in segment.args])


def uses_xla(segment: Segment, xla: bool) -> bool:
    """Whether ``compile_segment`` compiles ``segment`` with XLA when asked to (``xla``)."""
    return xla and _xla_can_run(segment)


def _xla_can_run(segment: Segment) -> bool:
    """XLA gives other values than eager for stateless random ops (it picks another algorithm):
    a segment holding one runs without XLA. So does a segment on several devices (a
    MirroredStrategy step): XLA compiles one cluster on one device, which then cannot reach the
    other replicas' variables (InvalidArgumentError: Trying to access resource ...)."""
    return not any(op.op_type.startswith("Stateless") for op in segment.ops) \
        and len({op.device for op in segment.ops} - {""}) <= 1
