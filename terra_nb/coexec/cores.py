"""Keeping the graph's executor thread off the core the loop's thread runs on (Linux).

TensorFlow's asynchronous executor sleeps when it has nothing to run. Issuing a run wakes its
thread, and Linux's scheduler tends to place a woken thread on the core of the thread that woke
it and let it run there first: the loop's thread, which issued the run to go on with Python,
then waits, runnable, until the run ends, while the other core idles. Measured on the 2-core VM
(kernel 6.18, ``benchmarks/core_split.py``): a 0.3 ms compiled segment's call returned 0.05 ms
before the run's end instead of at once, so nothing overlapped (co-execution level with lazy
mode); with the executor's thread kept off the loop thread's core the call returns in 0.02-0.03
ms.

``CoreSplit`` finds the executor's thread (the one ``new_executor`` starts) and allows it every
core the process may use except the loop thread's current one, checked at each issue (the loop
thread may move; the executor's is moved after it). The loop thread and every thread it starts
keep their affinity. Threads the executor's thread starts inherit its affinity (the pools
TensorFlow makes on first use: XLA's, for one) and outlive it: ``release`` gives them every
allowed core again once the executor is gone. Where the process may use one core only, or the
platform has no thread affinity, it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable
from typing import Any

_TASKS = "/proc/self/task"


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


def _threads() -> set[int]:
    try:
        return {int(name) for name in os.listdir(_TASKS)}
    except OSError:
        return set()


class CoreSplit:
    """The executor thread(s) ``started`` saw start, kept off the loop thread's core (see the
    module docstring). ``cores``: the process's allowed cores (empty: the split does nothing)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and _GETCPU is not None and os.path.isdir(_TASKS)
        self.threads: list[int] = []
        self.cores: frozenset[int] = frozenset()
        self.loop_core = -1  # the loop thread's core the executor's threads were moved off
        self._before: set[int] = set()  # the threads before the executor's started
        self._given: set[frozenset[int]] = set()  # the affinities given to its threads

    def started(self, make: Callable[[], Any]) -> Any:
        """``make()`` (``executor.new_executor``), noting the threads it started (not holding
        what it made: the executor's thread ends when it is collected)."""
        self._before = before = _threads() if self.enabled else set()
        made = make()
        if self.enabled:
            self.threads = sorted(_threads() - before)
            self.cores = frozenset(os.sched_getaffinity(0))
        return made

    @property
    def active(self) -> bool:
        return len(self.cores) > 1 and bool(self.threads)

    def follow(self) -> None:
        """Move the executor's thread(s) off the core the calling (loop) thread runs on now."""
        if not self.active:
            return
        core = _GETCPU()
        if core == self.loop_core or core not in self.cores:
            return
        self.loop_core = core
        others = self.cores - {core}
        self._given.add(others)
        for tid in self.threads:
            try:
                os.sched_setaffinity(tid, others)
            except OSError:  # the thread ended (or is not ours to move): nothing to keep apart
                self.threads = [t for t in self.threads if t != tid]

    def release(self) -> None:
        """(Once the executor is gone) threads started since with an affinity given here (by
        inheritance from the executor's thread) get every allowed core again."""
        for tid in _threads() - self._before if self._given else ():
            try:
                if frozenset(os.sched_getaffinity(tid)) in self._given:
                    os.sched_setaffinity(tid, self.cores)
            except OSError:  # it ended meanwhile
                continue
        self._given.clear()
