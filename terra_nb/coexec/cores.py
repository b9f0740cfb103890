"""Keeping the graph's executor thread and the loop's thread on cores of their own (Linux).

TensorFlow's asynchronous executor sleeps when it has nothing to run. Issuing a run wakes its
thread, and Linux's scheduler tends to place a woken thread on the core of the thread that woke
it and let it run there first: the loop's thread, which issued the run to go on with Python,
then waits, runnable, until the run ends, while the other core idles; and a loop thread woken
after a wait may land on the executor's core. Measured on the 2-core VM (kernel 6.18,
``benchmarks/core_split.py``): a 0.3 ms compiled segment's call returned 0.05 ms before the run's
end instead of at once, so nothing overlapped. mlp-small, medians of 5 alternating rounds of 200
co-executed iterations: 361 it/s shared, 387 with only the executor's thread kept off the loop
thread's core, 557 with the loop's thread also kept on its core.

``CoreSplit`` finds the executor's thread (the one ``new_executor`` starts), keeps the loop's
thread on the core it runs on when the Terra starts and the executor's thread on every other
core the process may use. Threads inherit the affinity of the thread that starts them: those the
loop's thread starts during the loop (the user's, tf.data's) get every allowed core back when
Python next issues work, ``SWEEP_S`` apart at most (not while the loop's thread waits), and a
process it forks at once; those the executor's thread starts (the pools
TensorFlow makes on first use: XLA's) are TensorFlow's work and keep its cores until the end.
oneDNN's thread count is fixed before the first split (``_onednn_threads_fixed``).
When the Terra ends every thread has the affinity it had, or every allowed core. Where the
process may use one core only, or the platform has no thread affinity, it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

_TASKS = "/proc/self/task"
SWEEP_S = 0.05  # how soon a thread the loop's thread started gets every allowed core back


def _libc_getcpu() -> Callable[[], int] | None:
    """``sched_getcpu`` of the C library (the core the calling thread runs on; a vDSO call)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        getcpu = libc.sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype, getcpu.argtypes = ctypes.c_int, []
    return getcpu


_GETCPU = _libc_getcpu() if hasattr(os, "sched_setaffinity") else None


@functools.cache  # once per process
def _onednn_threads_fixed() -> None:
    """oneDNN fixes how many threads it splits work for, for the whole process, at its first
    primitive, from the cores the thread making it may use: a first convolution made on a pinned
    thread (the loop's, the executor's) split its filter gradient for one thread, and summed it
    in another order than eager's (the adversarial review: a Conv2D's kernel 1 ulp off from the
    first step). So a 1x1 product runs first, on the loop's thread before the split."""
    import tensorflow as tf

    from .. import capture

    with capture.bypass(), tf.device("/CPU:0"):
        tf.linalg.matmul(tf.ones((1, 1)), tf.ones((1, 1)))


def _threads() -> set[int]:
    try:
        return {int(name) for name in os.listdir(_TASKS)}
    except OSError:
        return set()


class CoreSplit:
    """The executor thread(s) ``started`` saw start, and the loop's thread (the caller), kept on
    cores of their own (see the module docstring). ``cores``: the loop thread's allowed cores
    when it started (empty: the split does nothing)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and _GETCPU is not None and os.path.isdir(_TASKS)
        self.threads: list[int] = []
        self.cores: frozenset[int] = frozenset()
        self.loop_core = -1  # the core the loop's thread is kept on
        self.loop_thread = threading.get_native_id()
        self._before: set[int] = set()  # the threads before the executor's started
        self._seen: set[int] = set()  # threads the sweep looked at already
        self._given: set[frozenset[int]] = set()  # the affinities given here
        self._next_sweep = 0.0
        self._loop_given = True  # the loop thread's affinity is the one given here

    def started(self, make: Callable[[], Any]) -> Any:
        """``make()`` (``executor.new_executor``), noting the threads it started (not holding
        what it made: the executor's thread ends when it is collected), and split the cores."""
        self._before = before = _threads() if self.enabled else set()
        made = make()
        if self.enabled:
            _onednn_threads_fixed()
            self.threads = sorted(_threads() - before)
            self.cores = frozenset(os.sched_getaffinity(0))
            self._seen = _threads()  # the sweep leaves these be
            self.follow()
        return made

    @property
    def active(self) -> bool:
        return len(self.cores) > 1 and bool(self.threads)

    def follow(self) -> None:
        """(The loop's thread, as it issues work) split again if the loop's thread was moved
        (its affinity changed by the user); give threads it started every core back."""
        if not self.active:
            return
        core = _GETCPU()
        if core != self.loop_core and core in self.cores:
            if self.loop_core >= 0 and _affinity(self.loop_thread) != {self.loop_core}:
                self._loop_given = False  # the user set it: theirs from now on
            self._split(core)
        now = time.perf_counter()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self._sweep()

    def settled(self) -> None:
        """The threads started so far (the GraphRunner's helper) stay on the loop's core."""
        self._seen = _threads()

    def _split(self, core: int) -> None:
        if self not in _SPLITS:
            _SPLITS.append(self)
        self.loop_core = core
        own, others = frozenset({core}), self.cores - {core}
        self._given |= {own, others}
        if self._loop_given:
            _set_affinity(self.loop_thread, own)
        self.threads = [tid for tid in self.threads if _set_affinity(tid, others)]

    def _sweep(self) -> None:
        """Threads started since the last sweep with the loop thread's core only get every
        allowed core."""
        new = _threads() - self._seen
        self._seen |= new
        own = {self.loop_core}
        for tid in new - {self.loop_thread}:
            if _affinity(tid) == own:
                _set_affinity(tid, self.cores)

    def release(self) -> None:
        """(Once the executor is gone) the loop's thread, unless the user set its affinity
        meanwhile, and every thread started since with an affinity given here, get the loop
        thread's allowed cores again."""
        if self in _SPLITS:
            _SPLITS.remove(self)
        if not self._given:
            return
        if self._loop_given and _affinity(self.loop_thread) == {self.loop_core}:
            _set_affinity(self.loop_thread, self.cores)
        for tid in _threads() - self._before:
            if _affinity(tid) in self._given:
                _set_affinity(tid, self.cores)
        self._given.clear()


def _affinity(tid: int) -> frozenset[int]:
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError:  # it ended meanwhile
        return frozenset()


def _set_affinity(tid: int, cores: frozenset[int]) -> bool:
    """Whether ``tid`` may now run on ``cores`` only (False: it ended meanwhile)."""
    try:
        os.sched_setaffinity(tid, cores)
    except OSError:
        return False
    return True


_SPLITS: list[CoreSplit] = []  # the splits in force (a forked child gets every core back)


def _child_gets_every_core() -> None:
    """In a process forked by a thread with an affinity given here (``multiprocessing``'s fork,
    ``os.fork``): every core that thread had before (a child ``subprocess`` is not forked through
    Python's hooks, and keeps it: see the README's Known limits)."""
    for split in _SPLITS:
        if _affinity(0) in split._given:
            _set_affinity(0, split.cores)
    _SPLITS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_child_gets_every_core)
