"""The executor's thread and the loop's run on cores of their own (``coexec/cores.py``), and
nothing else changes: threads the loop starts get every core back, every thread has its cores
back after the Terra, the executor's thread ends with it, lazy mode and ``split_cores=False``
leave every thread as it was, and the loop's values stay eager's.

Where the split pays is measured by ``benchmarks/core_split.py``, not here (no timed asserts).
"""

import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.coexec.cores import SWEEP_S

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


def test_the_executor_thread_and_the_loop_thread_run_on_cores_of_their_own():
    before = os.sched_getaffinity(0)
    seen = {}

    def look(terra):
        split = terra._engine.runner.graph.cores
        seen["threads"] = list(split.threads)
        seen["allowed"] = [os.sched_getaffinity(tid) for tid in split.threads]
        seen["loop_core"], seen["loop"] = split.loop_core, os.sched_getaffinity(0)

    terra, losses, w = run_loop(seen=look)
    assert_coexecuted(terra, at_least=0.5)
    assert len(seen["threads"]) == 1, "new_executor starts one thread"
    assert seen["loop"] == {seen["loop_core"]}
    assert seen["allowed"] == [ALLOWED - {seen["loop_core"]}]
    assert os.sched_getaffinity(0) == before, "the loop's thread gets its cores back"
    assert not any(os.path.exists(f"/proc/self/task/{t}") for t in seen["threads"]), \
        "the executor's thread ends with the Terra"
    _, eager_losses, eager_w = run_loop(mode="eager")
    assert losses == eager_losses
    np.testing.assert_array_equal(w, eager_w)


def test_a_thread_the_loop_starts_gets_every_core_soon():
    """It inherits the loop thread's one core; the split gives it every core within
    ``SWEEP_S`` while the loop goes on issuing work, and at the end at the latest."""
    seen = []

    def watch():
        time.sleep(4 * SWEEP_S)
        seen.append(os.sched_getaffinity(0))

    thread = threading.Thread(target=watch)
    v = tf.Variable(1.0)
    with Terra() as terra:
        for i in terra.loop(range(40)):
            v.assign_add(tf.reduce_sum(tf.ones(4)) * 1e-3)
            if i == 10:
                thread.start()
            time.sleep(SWEEP_S / 5)
    thread.join()
    assert_coexecuted(terra, at_least=0.5, last=20)
    assert seen == [ALLOWED]


def test_the_split_follows_the_loop_thread_to_another_core():
    seen = {}

    def move(terra):
        split = terra._engine.runner.graph.cores
        other = min(ALLOWED - {current_core()})
        os.sched_setaffinity(0, {other})  # the user moves the loop thread
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


def test_a_process_forked_in_the_loop_gets_every_core():
    read, write = os.pipe()
    v = tf.Variable(1.0)
    with Terra() as terra:
        for i in terra.loop(range(24)):
            v.assign_add(tf.reduce_sum(tf.ones(4)) * 1e-3)
            if i == 20:
                if os.fork() == 0:  # the child: report its cores, and go
                    os.write(write, repr(sorted(os.sched_getaffinity(0))).encode())
                    os._exit(0)
                os.wait()
    os.close(write)
    with os.fdopen(read) as child:
        assert child.read() == repr(sorted(ALLOWED))
    assert_coexecuted(terra, at_least=0.5, last=4)
