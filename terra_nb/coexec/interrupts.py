"""Ctrl-C at a safe point: a KeyboardInterrupt that arrives while the PythonRunner is updating its
own state (mid-op, mid-flush) is held back until that step is done, so an op Python issued is
never half-submitted. Only the main thread receives signals; elsewhere this does nothing.

A Ctrl-C whose KeyboardInterrupt Python swallows (raised inside a finaliser, a ``__del__`` or a
weakref callback, where exceptions are only reported) is not lost: it is raised again at the
next safe point, so a ``while True`` loop always stops.
"""

from __future__ import annotations

import signal
import sys
import threading


class DeferredInterrupts:
    """Wraps the SIGINT handler while installed; ``enter``/``leave`` bracket a critical step."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending = False
        self._previous = None
        self._unraisable = None
        self._raised = False
        self._installed = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
            self._unraisable, sys.unraisablehook = sys.unraisablehook, self._swallowed
            self._raised = False  # a Ctrl-C's KeyboardInterrupt is on its way up
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            sys.unraisablehook = self._unraisable
            self._installed = False

    def _swallowed(self, unraisable) -> None:
        """Python dropped an exception it could not raise; a Ctrl-C's is raised again later."""
        if self._raised and issubclass(unraisable.exc_type, KeyboardInterrupt):
            self._raised, self.pending = False, True
            return
        self._unraisable(unraisable)

    def enter(self) -> None:
        self.depth += 1

    def leave(self) -> None:
        self.depth -= 1
        if self.depth == 0 and self.pending:
            self.pending = False
            self._forward(signal.SIGINT, None)

    def _handle(self, signum, frame) -> None:
        if self.depth:
            self.pending = True
        else:
            self._forward(signum, frame)

    def _forward(self, signum, frame) -> None:
        previous = self._previous
        self._raised = True
        # another loop's handler left in place (its loop cut short) would hold the Ctrl-C back
        if callable(previous) and not isinstance(getattr(previous, "__self__", None),
                                                 DeferredInterrupts):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt
