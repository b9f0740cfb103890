"""Hooks on TensorFlow's eager op execution.

Every eager op reaches one of two functions (DESIGN section 4): the fast path
``pywrap_tfe.TFE_Py_FastPathExecute`` (generated op wrappers) or the slow path
``execute.quick_execute`` (eager fallbacks, function calls; ``execute.execute`` is the same
function). Both are module attributes looked up at call time, so replacing them sees every op. An
op whose fast path raises ``_FallbackException`` arrives again at the slow path; only a completed
call is reported, so each op is reported once.

``pywrap_tfe.TFE_Py_TensorShapeSlice`` (sizes along an axis, used by concat's gradient) only
accepts eager tensors; while hooked it answers placeholders from their static shapes.

Materialisation (``numpy()``, ``float()``, ``bool()``, ``__array__``, ``__format__``, ``print``) all
funnel through ``_EagerTensorBase._numpy``, which is hooked to report fetches.

The hooks are installed while at least one ``capturing`` context is open and removed exactly when
the last one closes. Reports go to the *sink* of the current thread only: other threads (the
GraphRunner) and code under ``bypass()`` run TensorFlow untouched.

A sink with ``intercepts = True`` (the PythonRunner) replaces execution: it gets the op before
TensorFlow and a ``run`` callable for the original. TensorFlow's C code must never see a
``Placeholder`` (it would read it as an eager tensor), so while placeholders may be alive the hooks
also swap any placeholder input for its real value (``hold_placeholders``).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import execute
from tensorflow.python.eager.core import _FallbackException
from tensorflow.python.framework import constant_op, dtypes, ops

from . import replica_threads
from .placeholder import Placeholder
from .signature import op_info


class OpSink(Protocol):
    """Receives the ops and fetches of the thread that opened ``capturing``."""

    intercepts: bool  # True: ``run_op(run, op_name, args, attrs, frame)`` replaces execution

    def on_fast_fallback(self, op_name: Any, args: Any, frame: Any) -> None:
        """The fast path refused the call (``_FallbackException``); the slow path follows."""

    def on_op(self, op_name: Any, args: Any, attrs: tuple | None, outputs: Any, frame: Any) -> None:
        """``attrs`` is None for the fast path, where ``args`` holds inputs then attr pairs."""

    def on_fetch(self, tensor: Any) -> None:
        """Python read the value of ``tensor``."""


_local = threading.local()
_install_lock = threading.Lock()
_installs = 0
_holds = 0  # > 0 while placeholders may be alive: swap them for their values
_originals: dict[str, Any] = {}
_installed: list[tuple] = []  # the entry points the hooks replaced: what removing restores


_MAY_HOLD = (Placeholder, list, tuple)


_foreign = threading.Lock()  # one thread outside the loop's at a time resolves placeholders


def real_values(args):
    """``args`` with every placeholder (also inside lists) replaced by its real value."""
    for a in args:  # a loop, not any(): this runs for every op
        if isinstance(a, _MAY_HOLD):
            break
    else:
        return args
    if getattr(_local, "sink", None) is None and holds_placeholder(args):
        # A thread with no sink (tf.distribute's all-reduce pool runs one per device at once)
        # resolves placeholders through the loop's executor, which one thread at a time uses:
        # the loop's thread is parked meanwhile, waiting for the pool.
        with _foreign:
            return _real_values(args)
    return _real_values(args)


def holds_placeholder(args) -> bool:
    """Whether an op input (also inside lists) is a placeholder."""
    return any(_holds_placeholder(a) for a in args)


def _holds_placeholder(a) -> bool:
    return isinstance(a, Placeholder) or isinstance(a, (list, tuple)) and any(
        isinstance(x, Placeholder) for x in a)


def _real_values(args) -> list:
    out = []
    for a in args:
        if isinstance(a, Placeholder):
            a = a.real()
        elif isinstance(a, (list, tuple)) and any(isinstance(x, Placeholder) for x in a):
            a = [x.real() if isinstance(x, Placeholder) else x for x in a]
        out.append(a)
    return out


_PLAIN = frozenset(
    {ops.EagerTensor, Placeholder, int, float, bool, str, bytes, np.ndarray, type(None)}
)


_n_inputs: dict[str, int] = {}


def _plain(x) -> bool:
    return type(x) in _PLAIN or isinstance(x, np.generic)


def _converts_objects(op_name, args) -> bool:
    """Whether an input is an object TensorFlow must convert (a variable, a Keras tensor ...).

    The C fast path would convert it without running a visible op; sending such calls to the slow
    path makes the conversion (a ``ReadVariableOp``) a recorded op in every mode alike.
    """
    n = _n_inputs.get(op_name)
    if n is None:
        n = _n_inputs[op_name] = op_info(op_name).n_inputs
    for x in args[:n]:  # noqa: SIM110 (any() over a generator is slower on this hot path)
        if type(x) not in _PLAIN and _converted(x):  # most inputs stop at the first test
            return True
    return False


def _converted(x) -> bool:
    if type(x) is list or type(x) is tuple:
        return not all(_plain(e) for e in x)
    return not isinstance(x, np.generic)


def wait_at_barrier(op_name) -> None:
    """What an eager op run outside any sink does first (a tee with no sink behind it calls it
    too): wait at this thread's barrier, if one is set."""
    barrier = getattr(_local, "barrier", None)
    if barrier is not None:
        barrier(op_name)


def current_sink() -> OpSink | None:
    """The sink this thread's ops go to (None: none); a sink that wraps another (a tee) forwards
    to it."""
    return getattr(_local, "sink", None)


def replace_sink(sink: OpSink | None) -> OpSink | None:
    """Make ``sink`` this thread's sink and return the one it replaces: for a stretch that is no
    block of code (a gradient tape records from its push to its pop), so no ``capturing``."""
    previous = getattr(_local, "sink", None)
    _local.sink = sink
    return previous


def set_barrier(barrier) -> None:
    """Call ``barrier(op_name)`` before every eager op this thread runs outside an iteration (the
    co-execution engine waits there for the graph, so eager code sees every confirmed update)."""
    _local.barrier = barrier


# Run by a finaliser (``__del__`` of a variable the garbage collector freed), at any moment:
# never an op of the program, so never reported.
FINALISER_OPS = frozenset({"DestroyResourceOp", b"DestroyResourceOp"})


def _fast_path_execute(ctx, op_name, name, *args):
    sink = getattr(_local, "sink", None)
    if sink is None or op_name in FINALISER_OPS:
        if sink is None:
            wait_at_barrier(op_name)
        if _holds:
            args = real_values(args)
        return _originals["fast"](ctx, op_name, name, *args)
    if _converts_objects(op_name, args):
        sink.on_fast_fallback(op_name, args, sys._getframe(1))
        raise _FallbackException("terra-nb: objects are converted on the slow path")
    fast = _originals["fast"]
    if sink.intercepts:
        return sink.run_op(
            lambda a: fast(ctx, op_name, name, *a), op_name, args, None, sys._getframe(1)
        )
    try:
        outputs = fast(ctx, op_name, name, *(real_values(args) if _holds else args))
    except _FallbackException:
        sink.on_fast_fallback(op_name, args, sys._getframe(1))
        raise
    sink.on_op(op_name, args, None, outputs, sys._getframe(1))
    return outputs


def _quick_execute(op_name, num_outputs, inputs, attrs, ctx, name=None):
    sink = getattr(_local, "sink", None)
    slow = _originals["slow"]
    if sink is None or op_name in FINALISER_OPS:
        if sink is None:
            wait_at_barrier(op_name)
        return slow(
            op_name, num_outputs, real_values(inputs) if _holds else inputs, attrs, ctx, name
        )
    if sink.intercepts:
        return sink.run_op(
            lambda a: slow(op_name, num_outputs, a, attrs, ctx, name),
            op_name,
            inputs,
            attrs,
            sys._getframe(1),
        )
    outputs = slow(
        op_name, num_outputs, real_values(inputs) if _holds else inputs, attrs, ctx, name
    )
    sink.on_op(op_name, inputs, attrs, outputs, sys._getframe(1))
    return outputs


def report_read(placeholder) -> None:
    """Python read a placeholder's value (its runner counted the fetch): a sink that watches
    reads (``on_placeholder_read``: a region's recording tee) sees it."""
    sink = getattr(_local, "sink", None)
    seen = getattr(sink, "on_placeholder_read", None)
    if seen is not None:
        seen(placeholder)


def _numpy(self):
    sink = getattr(_local, "sink", None)
    if sink is not None:
        sink.on_fetch(self)
    return _originals["numpy"](self)


def _tensor_shape_slice(tensors, dim):
    """``TFE_Py_TensorShapeSlice`` (the sizes along ``dim``; concat's gradient) for placeholders
    too: their shapes are static."""
    if any(type(t) is Placeholder for t in tensors):
        return constant_op.constant([t.shape[dim] for t in tensors], dtype=dtypes.int32)
    return _originals["shape_slice"](tensors, dim)


def _remember_originals() -> None:
    """Keep TensorFlow's own functions for good, on first install: a hooked call already in
    flight (in another thread, or cut short by a garbage-collection callback that removes the
    hooks) still finds them after the hooks are gone."""
    if not _originals:
        _originals.update(
            shape_slice=pywrap_tfe.TFE_Py_TensorShapeSlice,
            fast=pywrap_tfe.TFE_Py_FastPathExecute,
            slow=execute.quick_execute,
            execute=execute.execute,
            numpy=ops._EagerTensorBase.__dict__["_numpy"],
        )


def _thread_state() -> tuple:
    """This thread's (sink, barrier): what a tf.distribute replica thread it starts takes."""
    return getattr(_local, "sink", None), getattr(_local, "barrier", None)


def _adopt(state: tuple) -> tuple:
    """Make ``state`` this thread's (sink, barrier); return the pair it replaces."""
    previous = _thread_state()
    _local.sink, _local.barrier = state
    return previous


def _install() -> None:
    global _installs
    with _install_lock:
        if _installs == 0:
            _remember_originals()
            replica_threads.install(_thread_state, _adopt)
            if list(points := _entry_points()) != _installed:  # (kept: gc.freeze's objects stay)
                _installed[:] = points
            for owner, name, hook, _key in _installed:
                setattr(owner, name, hook)
        _installs += 1


def _uninstall() -> None:
    global _installs
    with _install_lock:
        _installs -= 1
        if _installs == 0:
            for owner, name, hook, key in _installed:
                # a wrapper installed on top of the hook (a profiler's, the user's) stays: the
                # last placeholder's finaliser may remove the hooks at any moment
                if owner.__dict__.get(name) is hook:
                    setattr(owner, name, _originals[key])
            replica_threads.uninstall()


def _entry_points() -> tuple:
    """(where, name, the hook, its original's key) for each TensorFlow entry point hooked. The
    hooks are looked up when installing, so a wrapper of a hook set on this module before
    (benchmarks/capture_overhead.py's clock) is what is installed, and what removing looks for."""
    return (
        (pywrap_tfe, "TFE_Py_TensorShapeSlice", _tensor_shape_slice, "shape_slice"),
        (pywrap_tfe, "TFE_Py_FastPathExecute", _fast_path_execute, "fast"),
        (execute, "quick_execute", _quick_execute, "slow"),
        (execute, "execute", _quick_execute, "execute"),
        (ops._EagerTensorBase, "_numpy", _numpy, "numpy"),
    )


def hold_placeholders() -> None:
    """Keep the hooks in place, swapping placeholders for values, until ``release_placeholders``."""
    global _holds
    _install()
    _holds += 1


def release_placeholders() -> None:
    global _holds
    _holds -= 1
    _uninstall()


def hold_until_collected(objects: list) -> None:
    """Keep swapping placeholders until every one of ``objects`` is garbage (or forever, for
    objects that cannot be weakly referenced)."""
    if not objects:
        return
    hold_placeholders()
    remaining = [len(objects)]

    def collected() -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            release_placeholders()

    for obj in objects:
        weakref.finalize(obj, collected)


def is_installed() -> bool:
    """Whether the hooks are in place (some ``capturing`` context is open)."""
    return _installs > 0


@contextmanager
def installed() -> Iterator[None]:
    """Keep the hooks in place inside the block (reporting nothing by itself)."""
    _install()
    try:
        yield
    finally:
        _uninstall()


@contextmanager
def capturing(sink: OpSink) -> Iterator[None]:
    """Report the current thread's eager ops and fetches to ``sink`` inside the block."""
    with installed():
        previous = getattr(_local, "sink", None)
        _local.sink = sink
        try:
            yield
        finally:
            _local.sink = previous


@contextmanager
def bypass() -> Iterator[None]:
    """Run TensorFlow in this thread without reporting anything or waiting at the barrier
    (terra-nb's own ops)."""
    previous, barrier = getattr(_local, "sink", None), getattr(_local, "barrier", None)
    _local.sink = _local.barrier = None
    try:
        yield
    finally:
        _local.sink, _local.barrier = previous, barrier


@contextmanager
def quiet_reads() -> Iterator[None]:
    """Placeholders read in this thread inside the block are not fetches the plan learns: the
    inputs of ops run eagerly after a divergence (known ops in the next iteration), terra-nb's
    own checks."""
    previous = getattr(_local, "quiet", False)
    _local.quiet = True
    try:
        yield
    finally:
        _local.quiet = previous


def reads_quietly() -> bool:
    """Whether this thread is inside ``quiet_reads()``."""
    return getattr(_local, "quiet", False)
