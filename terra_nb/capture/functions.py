"""Function-call ops: a call of a function registered with the eager runtime.

A ``tf.function`` called in the loop (its concrete function's ``call_flat``), or a region, reaches
the slow-path hook as one op whose type is the function's name (``__inference_f_20``). It has no
OpDef: its inputs, outputs and statefulness come from the function's ``FunctionDef``, and it is
built into a graph by copying the function (and the functions it calls) into the graph's library.

Its output shapes cannot be inferred from the ``FunctionDef`` (shape inference does not enter
function calls, nor read variable shapes), so they come from the function object itself:
``register`` (a region registers what it makes) or ``learn``, which finds the ``AtomicFunction``
in the calling frames. A function whose outputs are not fully static is run for real.
"""

from __future__ import annotations

import functools
from typing import Any

from tensorflow.python.eager import context
from tensorflow.python.framework import op_def_registry

Spec = tuple[str, tuple[int, ...]]

_defs: dict[str, Any] = {}  # name -> FunctionDef (None: not a function)
_outputs: dict[str, tuple[Spec, ...] | None] = {}  # name -> static output specs (None: not static)
_confirmed: set[str] = set()  # functions whose calls are known by construction (regions)
_LEARN_DEPTH = 3  # hook caller -> Context.call_function -> AtomicFunction.call_flat


STATELESS_STATEFUL = frozenset({"Assert"})  # stateful by OpDef, with no state of its own
_RESOURCE = 20  # DT_RESOURCE


@functools.lru_cache(maxsize=4096)
def kernel_state(op_type: str) -> bool:
    """Whether op ``op_type`` keeps state in its kernel (stateful, with no resource input: a
    random op's stream, ``tf.print``), or, for a function, whether it or a function it calls
    runs one. Eager keeps one kernel per op and function; a new function made of such an op (a
    compiled segment, a region) starts that state again."""
    op_def = op_def_registry.get(op_type)
    if op_def is not None:  # an op that calls functions (a call, If, While) is judged by them
        return op_def.is_stateful and op_type not in STATELESS_STATEFUL and not any(
            a.type == _RESOURCE for a in op_def.input_arg) and not any(
            a.type in ("func", "list(func)") for a in op_def.attr)
    fdef = function_def(op_type)
    if fdef is None:
        return False
    called = [f.name for node in fdef.node_def for a in node.attr.values()
              for f in ([a.func] if a.func.name else list(a.list.func))]
    return any(kernel_state(node.op) for node in fdef.node_def) or any(map(kernel_state, called))


def function_def(op_type: str):
    """The ``FunctionDef`` of the function named ``op_type``; None when it names none."""
    if op_type not in _defs:
        ctx = context.context()
        _defs[op_type] = ctx.get_function_def(op_type) if ctx.has_function(op_type) else None
    return _defs[op_type]


def register(function, confirmed: bool = False) -> None:
    """Record the output specs of an ``AtomicFunction`` (or anything with ``name`` and
    ``function_type``) that will be called by name. ``confirmed``: made from calls already seen
    to repeat (a region's functions), so a first call of it does not keep a loop tracing."""
    name = function.name.decode() if isinstance(function.name, bytes) else function.name
    if confirmed:
        _confirmed.add(name)
    specs = []
    for spec in function.function_type.flat_outputs:
        shape = getattr(spec, "shape", None)
        if shape is None or not shape.is_fully_defined():
            _outputs[name] = None
            return
        specs.append((spec.dtype.name, tuple(shape.as_list())))
    _outputs[name] = tuple(specs)


def learn(op_type: str, frame) -> None:
    """Register the function named ``op_type`` from the frames of its call, the first time."""
    if op_type in _outputs:
        return
    for _ in range(_LEARN_DEPTH):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        name = getattr(owner, "name", None)
        if hasattr(owner, "function_type") and name in (op_type, op_type.encode()):
            register(owner)
            return
        frame = frame.f_back
    _outputs[op_type] = None


def confirmed(op_type: str) -> bool:
    """Whether the function named ``op_type`` was registered as confirmed."""
    return op_type in _confirmed


def static_outputs(op_type: str) -> tuple[Spec, ...] | None:
    """The function's output specs when every one is static; None when unknown or not static."""
    return _outputs.get(op_type)


class _RuntimeFunction:
    """What ``Graph._add_function`` reads of a function: its name and its C handle."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._c_func = context.context().get_c_function(name)


def _called(fdef) -> set[str]:
    """Names of the functions ``fdef``'s body calls (as op types or function attrs)."""
    ctx, out = context.context(), set()
    for node in fdef.node_def:
        if op_def_registry.get(node.op) is None and ctx.has_function(node.op):
            out.add(node.op)
        for attr in node.attr.values():
            if attr.HasField("func"):
                out.add(attr.func.name)
            out.update(f.name for f in attr.list.func)
    return out


def graph_callee(name: str) -> str:
    """The function a graph of recorded ops calls for a call of function ``name``. Such a graph
    runs without grappler, as eager ops do. A ``tf.function`` inlined into it would lose the
    grappler passes its eager call gets (the arithmetic optimizer's rewrites change its values
    by an ulp): it is called through a copy never inlined. A region's function is recorded ops
    run without grappler itself: it is called through a copy inlined into the graph. A call
    that is not inlined instantiates its function anew for each graph calling it and runs an
    executor of its own: on rnn-varlen a segment of ten region calls compiled in 52-80 ms and
    ran in 0.65-0.94 ms, inlined in 24-50 ms and 0.43-0.72 ms."""
    inline = name in _confirmed
    fdef = function_def(name)
    if fdef.attr["_noinline"].b != inline:
        return name
    twin = f"{name}_terra_{'inline' if inline else 'noinline'}"
    if function_def(twin) is None:
        copy = type(fdef)()
        copy.CopyFrom(fdef)
        copy.signature.name = twin
        copy.attr["_noinline"].b = not inline
        context.context().add_function_def(copy)
        _defs[twin] = copy
    return twin


def add_to_graph(graph, name: str) -> None:
    """Copy function ``name`` and every function it calls into ``graph``'s library."""
    if graph._is_function(name):
        return
    graph._add_function(_RuntimeFunction(name))
    for called in _called(function_def(name)):
        add_to_graph(graph, called)
