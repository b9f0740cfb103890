"""User ``tf.function`` calls from the loop, dispatched once per argument specs.

A ``tf.function`` called eagerly spends about 100 us of Python choosing its concrete function
(binding the arguments, their trace types, the cache lookup: ``Function.__call__`` down to
``tracing_compilation.call_function``) before ``ConcreteFunction._call_flat`` runs it. A loop of
four small functions spends a fifth of its step there. Once a call with given argument specs
ran WITHOUT tracing, TensorFlow's dispatch picks the same concrete function for the same specs
again (an exact match stays cached and is preferred; nothing a cached function matches is
traced again), so the later calls go straight to that function's ``_call_flat`` with the same
flat inputs: the same op runs, the tapes record the same, the values are eager's.

Guard: the function object, the device scope, whether it created variables (TensorFlow's
tracing options depend on it), the argument specs (tensors and numpy arrays by dtype and shape,
Python scalars by value, lists and tuples by length), and as specs too the defaults the call
leaves to Python (TensorFlow binds them: a list default changed in place retraces). Kept on
TensorFlow's dispatch: keyword arguments, any other argument (an object: TensorFlow keys it by
a weak reference, and its variables may be inputs; a numpy scalar; an array TensorFlow cannot
convert), a default that is not keyable (an object), functions with an input signature (it may
cast), run eagerly or compiled by XLA, calls in a distribution strategy's scope, calls whose
flat inputs are not exactly their tensor arguments in order, and a function whose arguments
took ``MAX_SPECS`` specs.
"""

from __future__ import annotations

import threading
import types
import weakref

import numpy as np
from tensorflow.python.distribute import distribute_lib
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import polymorphic_function
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.util import traceback_utils

from .. import capture
from ..capture.location import user_line
from ..capture.placeholder import Placeholder
from .summary import RegionRow

TENSORS = (tf_ops.EagerTensor, Placeholder)  # arguments keyed by dtype and shape
SCALARS = (bool, int, float, str, type(None))  # arguments keyed by value
MAX_SPECS = 16  # argument specs per function: at this many, a Python value changes every call
_TRACING_DETECTOR = polymorphic_function._frequent_tracing_detector_manager
_spying = threading.local()  # seen: the first ``_call_flat`` of a call being dispatched


def spy_call_flat(original):
    """``ConcreteFunction._call_flat`` noting, during a dispatch ``FunctionCalls`` watches,
    which concrete function TensorFlow picked and with what flat inputs."""

    def _call_flat(self, tensor_inputs, captured_inputs):
        seen = getattr(_spying, "seen", None)
        if seen is not None and not seen:
            seen.append((self, list(tensor_inputs)))
        return original(self, tensor_inputs, captured_inputs)

    _call_flat.__terra_region_original__ = original
    return _call_flat


class FunctionCalls:
    """The concrete function each (function, argument specs) dispatched to, and a row per
    function in the regions' summary (hits: calls answered without dispatch)."""

    def __init__(self, regions) -> None:
        """``regions``: the ``Regions`` whose rows hold one per function, keyed ("function", id),
        and retire a collected function's row as a collected object's."""
        self.regions, self.rows = regions, regions.rows
        self._picked: dict[tuple, tuple[weakref.ref, object]] = {}  # key -> (fn, concrete)
        self._specs: dict[int, int] = {}  # id(fn) -> specs remembered (MAX_SPECS: refused)
        self._gone: list[int] = []  # ids of collected functions (their finalizers append them)

    def call(self, fn, original, args: tuple):
        """``fn(*args)``: its concrete function's ``_call_flat`` when these specs dispatched
        without tracing before; else TensorFlow's dispatch, watched."""
        if self._gone:  # before the guard: a new function may have a collected one's address
            self._forget_gone()
        keyed = None
        if not (fn._run_functions_eagerly or fn._jit_compile or fn.input_signature
                or distribute_lib.has_strategy()):  # its Python runs, or XLA's, a signature's
            keyed = arguments_key(args)             # or a strategy's dispatch
        defaults = _defaults_key(fn, len(args)) if keyed is not None else None
        if defaults is None:
            return original(fn, *args)
        key, tensors, args = keyed
        key = (key, defaults)
        ident = id(fn)
        # whether the function created variables picks TensorFlow's tracing options, part of
        # its cache's context: a trace that creates one later sends every spec to a new trace
        key = (ident, context.context().device_name, bool(fn._created_variables), key)
        picked = self._picked.get(key)
        if picked is not None and picked[0]() is fn:
            result = _call_concrete(picked[1], tensors)
            self.rows[("function", ident)].hits += 1
            # counted as eager counts a call that returned: its retracing warnings stay eager's
            _TRACING_DETECTOR.called_without_tracing(fn._key_for_call_stats)
            return result
        row = self._row(fn)
        if self._specs.get(ident, 0) >= MAX_SPECS:
            return original(fn, *args)
        traced = fn.experimental_get_tracing_count()
        _spying.seen = seen = []
        try:
            result = original(fn, *args)
        finally:
            _spying.seen = None
        if fn.experimental_get_tracing_count() == traced and seen and _same(seen[0][1], tensors):
            self._remember(key, fn, seen[0][0], row)
        return result

    def _remember(self, key: tuple, fn, concrete, row: RegionRow) -> None:
        ident = key[0]
        n = self._specs[ident] = self._specs.get(ident, 0) + 1
        if n >= MAX_SPECS:  # a Python argument that changes every call: TensorFlow dispatches
            self._drop(ident)
            row.refuse(f"more than {MAX_SPECS - 1} argument specs (a Python argument that "
                       f"changes every call?): TensorFlow dispatches its calls")
            return
        self._picked[key] = (weakref.ref(fn), concrete)
        row.form(len(concrete.function_def.node_def))

    def _forget_gone(self) -> None:
        """Forget the functions collected since the last call (a new one may get the address
        of one and must start afresh): their entries go; a row that hit stays listed as
        collected, the others fold into one per source line."""
        while self._gone:
            ident = self._gone.pop()
            self._drop(ident)
            self._specs.pop(ident, None)
            self.regions.retire_row(("function", ident))

    def _drop(self, ident: int) -> None:
        """Forget the concrete functions remembered for the function ``ident``."""
        for key in [k for k in self._picked if k[0] == ident]:
            del self._picked[key]

    def _row(self, fn) -> RegionRow:
        row = self.rows.get(("function", id(fn)))
        if row is None:
            row = self.rows[("function", id(fn))] = RegionRow(
                f"{getattr(fn, '__name__', 'function')} (tf.function)", *user_line())
            weakref.finalize(fn, self._gone.append, id(fn))
        return row


@traceback_utils.filter_traceback  # an error's traceback loses TensorFlow's frames, as eager's
def _call_concrete(concrete, tensors: list):
    return concrete._call_flat(tensors, concrete.captured_inputs)


class _Unkeyed(Exception):
    """An argument the guard does not key: the call keeps TensorFlow's dispatch."""


def arguments_key(args: tuple) -> tuple[tuple, list, tuple] | None:
    """The guard key of a call's positional arguments, their tensors in order, and the arguments
    with each numpy array as an eager tensor of its dtype (as TensorFlow converts it: the same
    trace); None when an argument is neither a tensor, a numpy array, a Python scalar, nor a
    list or tuple of those."""
    key, tensors = [], []
    try:
        args = tuple(_keyed(a, key, tensors) for a in args)
    except _Unkeyed:
        return None
    return tuple(key), tensors, args


def _keyed(value, key: list, tensors: list):
    t = type(value)
    if t is np.ndarray:
        try:
            value, t = capture.eager_constant(value), tf_ops.EagerTensor
        except Exception as error:  # noqa: BLE001 - TensorFlow's own conversion says why
            raise _Unkeyed from error
    if t in TENSORS:
        key.append((value.dtype, value._shape_tuple()))
        tensors.append(value)
        return value
    if t is list or t is tuple:
        key.append((t, len(value)))
        return t(_keyed(v, key, tensors) for v in value)
    if t in SCALARS:
        key.append((t, value))
        return value
    raise _Unkeyed


def _defaults_key(fn, given: int) -> tuple | None:
    """The key of the defaults a call of ``given`` positional arguments leaves to Python, keyed
    as arguments: TensorFlow binds them and keys its cache on them (a list default changed in
    place retraces). None when one is not keyable, or the function's are not known."""
    python_function = fn._python_function
    bound = isinstance(python_function, types.MethodType)
    func = python_function.__func__ if bound else python_function
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    defaults, keywords = func.__defaults__ or (), func.__kwdefaults__ or {}
    used = defaults[max(0, given + bound - (code.co_argcount - len(defaults))):]
    used += tuple(keywords[k] for k in sorted(keywords))
    key: list = []
    try:
        for value in used:
            _keyed(value, key, [])
    except _Unkeyed:
        return None
    return tuple(key)


def _same(flat: list, tensors: list) -> bool:
    """Whether TensorFlow's flat inputs were exactly the call's tensor arguments, in order."""
    return len(flat) == len(tensors) and all(a is b for a, b in zip(flat, tensors))
