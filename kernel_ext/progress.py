"""The progress line of a ``%%terra`` loop, updated in place and rate-limited.

``Progress`` is a ``Terra.subscribe`` listener. Nothing is shown for a loop shorter than
``interval`` seconds; after that one line shows the iteration count, the phase and the recent
speed, updated at most once per ``interval``: a display updated in place in a notebook
(``DisplayHandle``), a line of stderr rewritten in place in a terminal (``StderrLine``). Never
the program's stdout, which is the user's. ``close()`` clears it: the cell's one-line summary
replaces it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol


class Handle(Protocol):
    """What a progress display needs: ``update(text)``."""

    def update(self, text: str) -> None: ...


class DisplayHandle:
    """A text/plain display updated in place (``IPython.display.display(display_id=True)``)."""

    def __init__(self, text: str) -> None:
        from IPython.display import display

        self._handle = display({"text/plain": text}, raw=True, display_id=True)

    def update(self, text: str) -> None:
        self._handle.update({"text/plain": text}, raw=True)


class StderrLine:
    """One line of stderr, rewritten in place with a carriage return (a terminal)."""

    def __init__(self, text: str) -> None:
        self._width = 0
        self.update(text)

    def update(self, text: str) -> None:
        pad = " " * max(self._width - len(text), 0)  # erase what a longer line left
        sys.stderr.write(f"\r{text}{pad}" + ("\r" if not text else ""))
        sys.stderr.flush()
        self._width = len(text)


def progress_text(iteration: int, phase: str, speed: float, label: str = "") -> str:
    """``terra: iteration 120 | tracing | 45.3 it/s``; a Keras step's iteration says which
    (``terra: iteration 120 (fit epoch 2 step 5) | coexec | 45.3 it/s``)."""
    which = f"{iteration} ({label})" if label else f"{iteration}"
    return f"terra: iteration {which} | {phase} | {speed:.1f} it/s"


class Progress:
    """Listener showing the loop's progress; see the module docstring."""

    def __init__(
        self,
        interval: float = 0.5,
        show: Callable[[str], Handle] = DisplayHandle,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.interval = interval
        self._show = show
        self._clock = clock
        self._handle: Handle | None = None
        self._started: float | None = None
        self._last_time = 0.0
        self._last_count = 0
        self.updates = 0

    def __call__(self, stats: Any) -> None:
        now = self._clock()
        if self._started is None:
            self._started = self._last_time = stats.t_start
        if now - self._last_time < self.interval:
            return
        count = stats.iteration + 1
        speed = (count - self._last_count) / max(now - self._last_time, 1e-9)
        text = progress_text(stats.iteration, stats.phase, speed, getattr(stats, "label", ""))
        if self._handle is None:
            self._handle = self._show(text)
        else:
            self._handle.update(text)
        self.updates += 1
        self._last_time, self._last_count = now, count

    def close(self) -> None:
        """Clear the progress line (if one was shown)."""
        if self._handle is not None:
            self._handle.update("")
            self._handle = None
