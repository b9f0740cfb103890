"""The executor's thread is kept off the loop thread's core (``coexec/cores.py``), and nothing
else changes: the loop thread, threads the loop starts and the process keep their affinity, the
executor's thread ends with the Terra, lazy mode and ``split_cores=False`` leave every thread as
it was, and the loop's values stay eager's.

Where the split pays is measured by ``benchmarks/core_split.py``, not here (no timed asserts).
"""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra

ALLOWED = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
pytestmark = pytest.mark.skipif(
    len(ALLOWED) < 2 or not os.path.isdir("/proc/self/task"),
    reason="needs Linux thread affinity and two usable cores")


def current_core() -> int:
    """The core the calling thread runs on (field 39 of its /proc stat)."""
    with open("/proc/thread-self/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[36])


def run_loop(steps: int = 24, seen=None, **options):
    """A small training-like loop; ``seen(terra)`` runs in its 20th iteration."""
    w = tf.Variable(np.full((16, 16), 0.01, dtype="float32"))
    x = tf.constant(np.linspace(0.0, 1.0, 256, dtype="float32").reshape(16, 16))
    losses = []
    with Terra(**options) as terra:
        for i in terra.loop(range(steps)):
            loss = tf.reduce_sum(tf.tanh(x @ w))
            w.assign_sub(0.001 * tf.ones_like(w) * loss)
            losses.append(float(loss))
            if i == 19 and seen is not None:
                seen(terra)
    return terra, losses, w.numpy()


def test_the_executor_thread_runs_off_the_loop_threads_core():
    before = os.sched_getaffinity(0)
    seen = {}

    def look(terra):
        split = terra._engine.runner.graph.cores
        seen["threads"] = list(split.threads)
        seen["allowed"] = [os.sched_getaffinity(tid) for tid in split.threads]
        seen["core"], seen["loop_core"] = current_core(), split.loop_core
        seen["loop"] = os.sched_getaffinity(0)
        started = []
        thread = threading.Thread(target=lambda: started.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join()
        seen["started"] = started[0]

    terra, losses, w = run_loop(seen=look)
    assert_coexecuted(terra, at_least=0.5)
    assert len(seen["threads"]) == 1, "new_executor starts one thread"
    assert seen["allowed"] == [ALLOWED - {seen["loop_core"]}]
    # The loop thread may have moved since the last issue; followed at the next one.
    assert seen["loop_core"] in ALLOWED
    assert seen["loop"] == before and seen["started"] == before  # only the executor's moved
    assert os.sched_getaffinity(0) == before
    assert not any(os.path.exists(f"/proc/self/task/{t}") for t in seen["threads"]), \
        "the executor's thread ends with the Terra"
    _, eager_losses, eager_w = run_loop(mode="eager")
    assert losses == eager_losses
    np.testing.assert_array_equal(w, eager_w)


def test_the_split_follows_the_loop_thread_to_another_core():
    seen = {}

    def move(terra):
        split = terra._engine.runner.graph.cores
        other = min(ALLOWED - {current_core()})
        os.sched_setaffinity(0, {other})  # the loop thread moves (as the scheduler may do)
        try:
            tf.reduce_sum(tf.ones(3)).numpy()  # a real op, then issued work follows
            split.follow()
            seen["allowed"] = [os.sched_getaffinity(tid) for tid in split.threads]
            seen["other"] = other
        finally:
            os.sched_setaffinity(0, ALLOWED)

    run_loop(seen=move)
    assert seen["allowed"] == [ALLOWED - {seen["other"]}]


@pytest.mark.parametrize("options", [{"mode": "lazy"}, {"split_cores": False}],
                         ids=["lazy", "split_cores=False"])
def test_no_split_where_nothing_overlaps_or_when_turned_off(options):
    seen = {}

    def look(terra):
        seen["threads"] = terra._engine.runner.graph.cores.threads
        seen["tasks"] = {tid: os.sched_getaffinity(int(tid)) for tid in os.listdir(
            "/proc/self/task")}

    terra, losses, _ = run_loop(seen=look, **options)
    assert_coexecuted(terra, at_least=0.5)
    assert seen["threads"] == []
    moved = {tid: allowed for tid, allowed in seen["tasks"].items() if allowed != ALLOWED}
    assert not moved, moved
    _, eager_losses, _ = run_loop(mode="eager")
    assert losses == eager_losses


def test_threads_the_executor_started_get_every_core_back():
    """XLA makes its thread pools on its first compile, from the executor's thread: they inherit
    its affinity and outlive it (they are TensorFlow's for the process)."""
    seen = {}

    def look(terra):
        seen["threads"] = list(terra._engine.runner.graph.cores.threads)

    terra, losses, _ = run_loop(seen=look, xla=True)
    assert_coexecuted(terra, at_least=0.5)
    assert terra.compiled_segments >= 1 and seen["threads"]
    restricted = {tid: os.sched_getaffinity(int(tid)) for tid in os.listdir("/proc/self/task")
                  if os.sched_getaffinity(int(tid)) != ALLOWED}
    assert not restricted, restricted
