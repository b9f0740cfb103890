"""Fault points: count the TensorFlow ops a user's training step issues, and inject a fault at
the k-th of them.

Why a wrapper around TensorFlow's op entry points, and not a Python callback between statements
or an op callback: the ops of a Keras step are mostly issued inside Keras (layer calls, the loss,
``tape.gradient``'s backward functions, Adam's update), where no user statement can be put
between them; and ``tf.debugging``/op callbacks fire only for ops TensorFlow executes, so under
co-execution (ops answered with placeholders) they never fire. ``OpCounter`` wraps the two
module attributes every eager op goes through (``pywrap_tfe.TFE_Py_FastPathExecute`` and
``execute.execute``/``quick_execute``), *outside* whatever is installed there (terra-nb's capture
hooks when a ``Terra`` is open, TensorFlow's own functions otherwise), and delegates every call
unchanged. Nothing of terra-nb is touched: terra-nb sees the same calls, from the same frames
plus one (this module's), which only changes the file:line ``explain()`` names.

What counts as an op: a call that *completes*, issued by the user's step (not by terra-nb, whose own
eager work, e.g. running a segment op by op in the Python thread, has terra_nb frames above it; not
by another thread, nor by a finaliser a garbage collection runs in the middle of the step: those are
listed in ``stray``, not counted), and that is not a ``ReadVariableOp``: plain eager reads a
``tf.Variable`` inside the C fast path without a visible call, while under terra-nb the same read is
a visible call, so counting reads would shift every later position between eager and terra-nb. Reads
change no state, so a fault before a read and one before the op consuming it leave the same state.

Position ``k`` (0 <= k <= ops in the step) is the moment right after the k-th counted op: the
fault fires at the entry of the next op call (before it reaches terra-nb or TensorFlow), or at the
end of the step for ``k`` = all ops.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from contextlib import contextmanager

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import execute

import terra_nb

_TERRA_DIR = os.path.dirname(os.path.realpath(terra_nb.__file__)) + os.sep
_NOT_COUNTED = {"ReadVariableOp", b"ReadVariableOp"}


class OpCounter:
    """Counts the ops of the steps run inside ``step()``; calls ``action(k)`` at every position
    ``k`` of them (0 before the first op, ..., n after the last).

    ``action`` runs in the user's thread with counting off, so the ops it issues are its own; it
    may raise (the step then stops there, as when the user's code raises). ``ops`` lists the
    counted op types of the last step watched, ``counts`` the number of every step watched, and
    ``stray`` the calls left out as another thread's or a collection's: (op type, position,
    thread, whether a garbage collection ran)."""

    def __init__(self, action=None) -> None:
        self.action = action
        self.ops: list[str] = []
        self.counts: list[int] = []
        self.stray: list[tuple] = []
        self._watching = False
        self._thread = None  # the thread the watched step runs in
        self._collecting = False  # a garbage collection runs (its finalisers are not the step)
        self._position = -1  # the last position reported in this step
        self._terra_code: dict = {}

    # -- what the program calls -------------------------------------------------------------

    @contextmanager
    def step(self, watched: bool = True):
        """Around one step of the user's loop: count its ops if ``watched``."""
        self.ops, self._position, self._watching = [], -1, watched
        self._thread = threading.get_ident()
        try:
            yield
            if watched:
                self._reached()  # the position after the last op
        finally:
            self._watching = False
            if watched:
                self.counts.append(len(self.ops))

    # -- installing -------------------------------------------------------------------------

    @contextmanager
    def installed(self):
        """Wrap the op entry points (outermost) inside the block; restore them after it."""
        inner_fast, inner_slow = pywrap_tfe.TFE_Py_FastPathExecute, execute.quick_execute
        inner_execute = execute.execute
        fast, slow = self._wrap(inner_fast, 1), self._wrap(inner_slow, 0)
        pywrap_tfe.TFE_Py_FastPathExecute, execute.quick_execute, execute.execute = fast, slow, slow
        gc.callbacks.append(self._gc_phase)
        try:
            yield self
        finally:
            gc.callbacks.remove(self._gc_phase)
            replaced = (pywrap_tfe.TFE_Py_FastPathExecute, execute.quick_execute, execute.execute)
            pywrap_tfe.TFE_Py_FastPathExecute = inner_fast
            execute.quick_execute, execute.execute = inner_slow, inner_execute
            assert replaced == (fast, slow, slow), "the op entry points changed under the counter"

    def _wrap(self, inner, op_arg: int):
        """``inner``, counted; the op type is its argument ``op_arg``. One call site of
        ``inner`` for watched and unwatched calls: terra-nb locates an op by its frame chain,
        which includes this frame's instruction."""

        def counted(*args, **kwargs):
            watched = self._watching and not self._from_terra(sys._getframe(1)) \
                and self._ours(args[op_arg])
            if watched:
                self._reached()
            out = inner(*args, **kwargs)  # a _FallbackException: not completed, not counted
            if watched and args[op_arg] not in _NOT_COUNTED:
                op_type = args[op_arg]
                self.ops.append(op_type.decode() if isinstance(op_type, bytes) else op_type)
            return out

        return counted

    def _gc_phase(self, phase: str, info: dict) -> None:
        self._collecting = phase == "start"

    def _ours(self, op_type) -> bool:
        """Whether a call while a step is watched is the step's: issued in its thread, not by a
        finaliser of a garbage collection (else it is listed in ``stray``)."""
        if threading.get_ident() == self._thread and not self._collecting:
            return True
        self.stray.append((op_type, len(self.ops), threading.current_thread().name,
                           self._collecting))
        return False

    def _reached(self) -> None:
        """Report the current position once."""
        k = len(self.ops)
        if k == self._position or self.action is None:
            return
        self._position = k
        self._watching = False  # the action's own ops are not the step's
        try:
            self.action(k)
        finally:
            self._watching = True

    def _from_terra(self, frame) -> bool:
        """Whether terra-nb issued this call (a terra_nb frame above it)."""
        cache = self._terra_code
        while frame is not None:
            code = frame.f_code
            inside = cache.get(code)
            if inside is None:
                inside = cache[code] = os.path.realpath(code.co_filename).startswith(_TERRA_DIR)
            if inside:
                return True
            frame = frame.f_back
        return False
