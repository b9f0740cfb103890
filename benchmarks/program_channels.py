"""Why the whole program's runs keep a thread of their own (not a test).

    python benchmarks/program_channels.py

A whole program (``Terra(program="whole")``) reads Python's decisions and feeds from FIFO queues
while it runs, and Python abandons a run (a divergence) by closing its queues. This probes a run
of such a program issued into an asynchronous executor, as segments are:

1. Python's enqueue issued into the same executor: it waits behind the run, which waits for it
   (a deadlock; the probe gives up after 2 s and closes the queue).
2. Python's enqueue issued on the synchronous executor: the run gets it (how long it took).
3. Python closes the queue of a run waiting on it (an abandon): the run fails with
   OutOfRangeError, which poisons the executor: an op queued behind the run (a segment issued
   after it) is dropped, not run.

So on the segments' executor an abandoned run would drop the segment work queued behind it, and
the in-order confirmation of segments would wait behind a run waiting for Python; the program's
runs stay on a thread of their own (``coexec/work_items.py``, ``ProgramThread``).
"""

from __future__ import annotations

import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from tensorflow.python.eager import context, executor  # noqa: E402


def program():
    @tf.function(autograph=False)
    def run(queue):
        value = tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.float32])[0]
        return value * 2.0

    return run


def issue_run(run, queue, ex):
    with context.executor_scope(ex):
        return run(queue.queue_ref)


def main() -> None:
    run = program()
    # 1. enqueue into the executor the run occupies
    ex = executor.new_executor(enable_async=True)
    queue = tf.queue.FIFOQueue(8, [tf.float32], shapes=[[]])
    run.get_concrete_function(queue.queue_ref)
    out = issue_run(run, queue, ex)
    done = threading.Event()

    one = tf.constant(1.0)

    def enqueue_there():
        try:
            with context.executor_scope(ex):
                tf.raw_ops.QueueEnqueueV2(handle=queue.queue_ref, components=[one])
            ex.wait()
        except tf.errors.OpError:
            return  # the queue was closed under it
        done.set()

    threading.Thread(target=enqueue_there, daemon=True).start()
    deadlocked = not done.wait(2.0)
    queue.close(cancel_pending_enqueues=True)  # frees the run either way
    try:
        ex.wait()
    except tf.errors.OpError:
        ex.clear_error()
    print(f"1. enqueue issued into the run's executor: "
          f"{'deadlock (nothing after 2 s)' if deadlocked else 'completed'}")

    # 2. enqueue on the synchronous executor
    queue = tf.queue.FIFOQueue(8, [tf.float32], shapes=[[]])
    out = issue_run(run, queue, ex)
    start = time.perf_counter()
    tf.raw_ops.QueueEnqueueV2(handle=queue.queue_ref, components=[one])
    value = float(out.numpy())
    print(f"2. enqueue on the synchronous executor: the run returned {value} after "
          f"{(time.perf_counter() - start) * 1e3:.2f} ms")

    # 3. an abandoned run poisons the executor: what was queued behind it is dropped
    queue = tf.queue.FIFOQueue(8, [tf.float32], shapes=[[]])
    v, one = tf.Variable(0.0), tf.constant(1.0)
    out = issue_run(run, queue, ex)
    with context.executor_scope(ex):  # a segment issued after the run
        tf.raw_ops.AssignAddVariableOp(resource=v.handle, value=one)
    time.sleep(0.05)
    queue.close(cancel_pending_enqueues=True)
    try:
        ex.wait()
        outcome = "no error"
    except tf.errors.OutOfRangeError:
        outcome = "OutOfRangeError"
        ex.clear_error()
    print(f"3. abandoned run: {outcome}; the variable updated behind it: {float(v.numpy())} "
          f"(1.0 had it run)")


if __name__ == "__main__":
    main()
