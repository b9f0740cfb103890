"""Ctrl-C at a safe point: a KeyboardInterrupt that arrives while the PythonRunner is updating its
own state (mid-op, mid-flush) is held back until that step is done, so an op Python issued is
never half-submitted. Only the main thread receives signals; elsewhere this does nothing.
"""

from __future__ import annotations

import signal
import threading


class DeferredInterrupts:
    """Wraps the SIGINT handler while installed; ``enter``/``leave`` bracket a critical step."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending = False
        self._previous = None
        self._installed = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, self._handle)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

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
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt
