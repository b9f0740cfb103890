"""Forward-mode autodiff: whether a ``tf.autodiff.ForwardAccumulator`` records in this thread.

An accumulator computes each op's JVP as the op runs, from the op's real inputs and their
tangents. An op answered with a placeholder runs later, in a graph no accumulator sees: its JVP
would come out wrong, or None. So while an accumulator records, no op is answered with a
placeholder, no pure op's output is taken from the memo, and no region is hit: the ops under it
run for real, as in eager, and the rest of the iteration co-executes.

Counted by wrapping the accumulator's push and pop (``__enter__``/``__exit__`` and its own
pauses). The wrappers go in once, when terra-nb's runtime is imported (``terra_nb.capture``: by
``Terra`` or ``%load_ext terra_nb``), and stay: an accumulator entered before the loop begins,
or before a Terra opens, is counted as well. One entered before that import is not (its
iterations fall back: new JVP functions). They cost nothing per op.
"""

from __future__ import annotations

import functools
import threading

from tensorflow.python.eager import forwardprop

REASON = "a ForwardAccumulator records: its ops run for real"
active = 0  # accumulators recording in any thread: per op, the engine reads this first
_local = threading.local()
_lock = threading.Lock()


def recording() -> bool:
    """Whether a ``ForwardAccumulator`` records in this thread now."""
    return active > 0 and getattr(_local, "accumulators", 0) > 0


def _counting(original, step: int):
    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        global active
        result = original(self, *args, **kwargs)
        with _lock:
            mine = getattr(_local, "accumulators", 0)
            _local.accumulators = max(0, mine + step)
            active += _local.accumulators - mine
        return result

    wrapper.__terra_forward_mode__ = True
    return wrapper


def install() -> None:
    """Count pushes and pops from now on (idempotent)."""
    cls = forwardprop.ForwardAccumulator
    with _lock:
        for method, step in (("_push_accumulator", 1), ("_pop_accumulator", -1)):
            original = getattr(cls, method)
            if not getattr(original, "__terra_forward_mode__", False):
                setattr(cls, method, _counting(original, step))
