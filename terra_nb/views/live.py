"""Helpers that keep live views off the loop's critical path: a layout worker thread, a rate
estimate, and the hook that finishes a dashboard when its notebook cell ends."""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Callable


class LayoutWorker:
    """One daemon thread running layout jobs; only the newest pending job runs (older ones are
    dropped: a newer graph supersedes them). Graphviz runs as a subprocess, off the GIL."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._job: Callable[[], None] | None = None
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def submit(self, job: Callable[[], None]) -> None:
        with self._cond:
            self._job = job
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="terra-layout", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout: float = 120.0) -> bool:
        """Block until no job is pending or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._job is None and not self._busy, timeout)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._job is not None or self._closed)
                if self._closed:
                    return
                job, self._job, self._busy = self._job, None, True
            try:
                job()
            except Exception as err:  # a layout failure must not kill the live view
                self.errors.append(f"{type(err).__name__}: {err}")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


class RateMeter:
    """Iterations per second over the iterations that ended in the last ``span`` seconds."""

    def __init__(self, span: float = 3.0) -> None:
        self.span = span
        self._ends: deque[float] = deque(maxlen=4096)

    def add(self, t_end: float) -> None:
        self._ends.append(t_end)

    def extend(self, ends) -> None:
        self._ends.extend(ends)

    def rate(self) -> float:
        if len(self._ends) < 2:
            return 0.0
        last = self._ends[-1]
        recent = [t for t in self._ends if t >= last - self.span]
        if len(recent) < 2:
            recent = list(self._ends)[-2:]
        elapsed = recent[-1] - recent[0]
        return (len(recent) - 1) / elapsed if elapsed > 0 else 0.0


def on_cell_end(owner: object, method: str) -> Callable[[], None] | None:
    """Call ``owner.<method>()`` after every notebook cell while ``owner`` lives (IPython's
    ``post_execute``). Returns a function that removes the hook; None outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    ref = weakref.ref(owner)

    def hook() -> None:
        target = ref()
        if target is None:
            remove()
            return
        try:
            getattr(target, method)()
        except Exception as err:  # hooks never break a cell
            print(f"terra-nb: dashboard update failed: {type(err).__name__}: {err}")

    def remove() -> None:
        try:
            shell.events.unregister("post_execute", hook)
        except ValueError:
            pass

    shell.events.register("post_execute", hook)
    return remove
