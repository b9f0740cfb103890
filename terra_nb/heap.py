"""The heap while a loop runs: objects alive when a Terra opens are left out of Python's cyclic
garbage collections until it closes.

Tracing and co-execution allocate many small containers (trace records, op signatures), so the
collector runs far more often than in plain eager code, and now and then a full collection walks
every object in the process. With TensorFlow and Keras loaded that is some 360,000 objects:
130-230 ms each time, measured in a 30-step cell of the MLP and the CNN loops, more than all of
its co-executed steps. ``gc.freeze`` moves the objects alive now to a permanent generation no
collection walks; ``gc.unfreeze`` puts them back when the last open Terra closes, so garbage
among them is collected as before. Objects made inside the loop are collected as usual.

What a user can see: garbage in reference cycles made before the loop and dropped inside it is
collected at the loop's close, not in it (a finalizer runs later), and inside the loop
``gc.get_objects()`` and ``gc.get_referrers()`` skip the frozen objects. A process that froze
objects itself keeps its own freeze: terra-nb then freezes nothing.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_open = 0  # Terras open (in any thread)
_froze = False  # whether the first of them froze the heap (not if the user had frozen it)


def freeze() -> None:
    """A Terra opens: the first one freezes the objects alive now, unless the process froze
    some itself (it manages its collections; its freeze is left as it is)."""
    global _open, _froze
    with _lock:
        if _open == 0 and gc.get_freeze_count() == 0:
            gc.freeze()
            _froze = True
        _open += 1


def thaw() -> None:
    """A Terra closes: the last one gives the objects it froze back to the collector."""
    global _open, _froze
    with _lock:
        _open -= 1
        if _open == 0 and _froze:
            gc.unfreeze()
            _froze = False


@contextmanager
def thawed() -> Iterator[None]:
    """Inside the block every object is visible to ``gc.get_referrers`` again (it skips frozen
    ones): a hand-over of placeholders finds a list made before the loop. Frozen again after,
    with what the loop made so far. Holds the lock: no Terra opens or closes meanwhile."""
    with _lock:
        frozen = _froze
        if frozen:
            gc.unfreeze()
        try:
            yield
        finally:
            if frozen:
                gc.freeze()
