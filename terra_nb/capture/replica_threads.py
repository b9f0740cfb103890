"""tf.distribute's replica threads run for the thread that called ``strategy.run``.

In eager execution ``MirroredStrategy.run`` (and ``MultiWorkerMirroredStrategy``'s, through the
same ``mirrored_run``) runs the step once per replica, each in a thread of its own
(``mirrored_run._MirroredReplicaThread``), and one at a time: the calling thread starts a
replica, waits until it pauses (at a ``merge_call``: an optimizer's update, a cross-replica
sum) or returns, then starts the next one, and runs each merge itself. So a step's ops come in
one order, as if from one thread.

A replica thread created while its parent thread has a sink (a Terra iteration) or a barrier
(between iterations) takes both when it starts: its ops are traced and co-executed with the
loop's, in that order. Without it they ran eagerly outside the Terra, where nothing made them
wait for the graph: a replica read variables before the graph had applied the last step's
update (a MirroredStrategy epoch loop gave other weights than eager as soon as it
co-executed). TensorFlow offers no seam for a replica thread's set-up, so its constructor
(which runs in the parent thread) and ``run`` are wrapped while the hooks are installed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

try:  # TensorFlow's internals: without them there are no replica threads to follow
    from tensorflow.python.distribute import mirrored_run
except ImportError:  # pragma: no cover
    mirrored_run = None

_ATTR = "_terra_parent_state"  # the parent thread's (sink, barrier), set on the thread object
_originals: dict[str, Any] = {}


def install(state: Callable[[], tuple], adopt: Callable[[tuple], tuple]) -> None:
    """Wrap the replica thread class: ``state()`` reads the current thread's (sink, barrier),
    ``adopt(state)`` makes them the current thread's and returns what they replace."""
    thread = getattr(mirrored_run, "_MirroredReplicaThread", None)
    if thread is None or _originals:
        return
    init, run = thread.__init__, thread.run
    _originals.update(init=init, run=run)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):  # noqa: N807 - it replaces __init__
        init(self, *args, **kwargs)
        setattr(self, _ATTR, state())  # in the parent thread

    @functools.wraps(run)
    def run_for_parent(self):
        inherited = getattr(self, _ATTR, None)
        if inherited is None:
            return run(self)
        previous = adopt(inherited)
        try:
            return run(self)
        finally:
            adopt(previous)

    thread.__init__, thread.run = __init__, run_for_parent


def uninstall() -> None:
    """Give the replica thread class its own methods back."""
    if _originals:
        thread = mirrored_run._MirroredReplicaThread
        thread.__init__, thread.run = _originals.pop("init"), _originals.pop("run")


def in_replica_thread() -> bool:
    """Whether this thread runs a replica of ``strategy.run``'s function."""
    thread = getattr(mirrored_run, "_MirroredReplicaThread", None)
    return thread is not None and isinstance(threading.current_thread(), thread)
