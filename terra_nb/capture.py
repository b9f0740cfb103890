"""Hooks on TensorFlow's eager op execution.

Every eager op reaches one of two functions (DESIGN section 4): the fast path
``pywrap_tfe.TFE_Py_FastPathExecute`` (generated op wrappers) or the slow path
``execute.quick_execute`` (eager fallbacks, function calls; ``execute.execute`` is the same
function). Both are module attributes looked up at call time, so replacing them sees every op. An
op whose fast path raises ``_FallbackException`` arrives again at the slow path; only a completed
call is reported, so each op is reported once.

Materialisation (``numpy()``, ``float()``, ``bool()``, ``__array__``, ``__format__``, ``print``) all
funnel through ``_EagerTensorBase._numpy``, which is hooked to report fetches.

The hooks are installed while at least one ``capturing`` context is open and removed exactly when
the last one closes. Reports go to the *sink* of the current thread only: other threads (the
GraphRunner) and code under ``bypass()`` run TensorFlow untouched.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import execute
from tensorflow.python.framework import ops


class OpSink(Protocol):
    """Receives the ops and fetches of the thread that opened ``capturing``."""

    def on_op(self, op_name: Any, args: Any, attrs: tuple | None, outputs: Any, frame: Any) -> None:
        """``attrs`` is None for the fast path, where ``args`` holds inputs then attr pairs."""

    def on_fetch(self, tensor: Any) -> None:
        """Python read the value of ``tensor``."""


_local = threading.local()
_install_lock = threading.Lock()
_installs = 0
_originals: dict[str, Any] = {}


def _fast_path_execute(ctx, op_name, name, *args):
    outputs = _originals["fast"](ctx, op_name, name, *args)
    sink = getattr(_local, "sink", None)
    if sink is not None:
        sink.on_op(op_name, args, None, outputs, sys._getframe(1))
    return outputs


def _quick_execute(op_name, num_outputs, inputs, attrs, ctx, name=None):
    outputs = _originals["slow"](op_name, num_outputs, inputs, attrs, ctx, name)
    sink = getattr(_local, "sink", None)
    if sink is not None:
        sink.on_op(op_name, inputs, attrs, outputs, sys._getframe(1))
    return outputs


def _numpy(self):
    sink = getattr(_local, "sink", None)
    if sink is not None:
        sink.on_fetch(self)
    return _originals["numpy"](self)


def _install() -> None:
    global _installs
    with _install_lock:
        if _installs == 0:
            _originals["fast"] = pywrap_tfe.TFE_Py_FastPathExecute
            _originals["slow"] = execute.quick_execute
            _originals["execute"] = execute.execute
            _originals["numpy"] = ops._EagerTensorBase.__dict__["_numpy"]
            pywrap_tfe.TFE_Py_FastPathExecute = _fast_path_execute
            execute.quick_execute = _quick_execute
            execute.execute = _quick_execute
            ops._EagerTensorBase._numpy = _numpy
        _installs += 1


def _uninstall() -> None:
    global _installs
    with _install_lock:
        _installs -= 1
        if _installs == 0:
            pywrap_tfe.TFE_Py_FastPathExecute = _originals.pop("fast")
            execute.quick_execute = _originals.pop("slow")
            execute.execute = _originals.pop("execute")
            ops._EagerTensorBase._numpy = _originals.pop("numpy")


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
    """Run TensorFlow in this thread without reporting anything (terra-nb's own ops)."""
    previous = getattr(_local, "sink", None)
    _local.sink = None
    try:
        yield
    finally:
        _local.sink = previous
