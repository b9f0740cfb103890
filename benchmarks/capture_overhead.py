"""Cost per op of op capture against plain eager, on the same ops (not a test).

    python benchmarks/capture_overhead.py [--iterations N]

Prints microseconds per op for: plain eager; eager with the capture hot path (hook + program
location + raw record); the whole tracing phase (also building the trace and merging it into
the TraceGraph, done once per iteration); and a matched op in co-execution (Python's time per op
of a co-executed iteration, regions off: answering the op with placeholders, the graph runs on
the other thread). Of the last, ``engine`` is terra-nb's own part: Python's time inside the op
hooks plus the loop's time between iterations (ending one, beginning the next), per op; the rest
is TensorFlow's Python around each op (its wrappers, operator overloads, dispatch), which eager
pays too. Programs: elementwise ops on small tensors (from a variable, so that co-execution
answers them), and a Keras MLP training step (forward, backward, optimizer).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from contextlib import contextmanager

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from terra_nb import Terra, capture  # noqa: E402
from terra_nb.capture import hooks  # noqa: E402
from terra_nb.capture.location import LocationTable  # noqa: E402
from terra_nb.capture.recorder import TraceRecorder  # noqa: E402
from terra_nb.trace.merge import GraphBuilder  # noqa: E402


def elementwise_program():
    a = tf.constant(np.ones((4, 4), "float32"))
    b = tf.constant(np.full((4, 4), 0.5, "float32"))
    v = tf.Variable(a)

    def step():
        x = v * 1.0
        for _ in range(10):
            x = tf.tanh(x * b + a)
        v.assign(x)

    return step


def keras_program():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    opt = keras.optimizers.Adam(1e-3)
    x = np.ones((32, 16), "float32")
    y = np.zeros((32, 1), "float32")

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    step()  # build the optimizer's slots
    return step


def count_ops(step) -> int:
    recorder = TraceRecorder(LocationTable())
    recorder.begin(sys._getframe(0))
    with capture.capturing(recorder):
        step()
    return len(recorder.finish(0).ops)


def timed(step, iterations: int, mode: str) -> float:
    """Seconds per iteration of ``step`` in ``mode``: eager, capture or tracing."""
    recorder = TraceRecorder(LocationTable())
    builder = GraphBuilder()
    root = sys._getframe(0)
    best = float("inf")
    for _ in range(3):  # best of three rounds: less noise from the other core
        start = time.perf_counter()
        for i in range(iterations):
            if mode == "eager":
                step()
                continue
            recorder.begin(root)
            with capture.capturing(recorder):
                step()
            if mode == "tracing":
                builder.merge(recorder.finish(i))
            else:
                recorder.discard()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


@contextmanager
def hook_clock():
    """Seconds this thread spends in terra-nb's op hooks while the block runs (a clock read at
    each hook's entry and exit is counted in it)."""
    spent, me = [0.0], threading.get_ident()
    originals = hooks._fast_path_execute, hooks._quick_execute

    def clocked(hook):
        def call(*args, **kwargs):
            if threading.get_ident() != me:  # the GraphRunner's ops: not Python's time
                return hook(*args, **kwargs)
            start = time.perf_counter()
            try:
                return hook(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return call

    hooks._fast_path_execute, hooks._quick_execute = map(clocked, originals)  # before installing
    try:
        yield spent
    finally:
        hooks._fast_path_execute, hooks._quick_execute = originals


def coexec_timed(step, iterations: int) -> tuple[float, float, float]:
    """Seconds per co-executed iteration of ``step`` (regions off, after warm-up), seconds of
    it that terra-nb's engine spent (see the module docstring), and the share of iterations
    co-executed (an iteration traced again would be timed as tracing)."""
    rounds = []  # (seconds per iteration, engine seconds per iteration), best of three rounds
    with hook_clock() as hooked, Terra(regions=False) as terra:
        loop = terra.loop(range(20 + 3 * iterations))
        start = engine = 0.0
        left = None
        for i in loop:
            entered = time.perf_counter()
            if left is not None:  # the loop's own time: the hooks it runs are in it already
                engine += entered - left
            if i >= 20 and (i - 20) % iterations == 0:
                if i > 20:
                    rounds.append(((entered - start) / iterations, engine / iterations))
                start, engine = entered, 0.0
            hooked_before = hooked[0]
            step()
            left = time.perf_counter()
            engine += hooked[0] - hooked_before
        end = time.perf_counter()
        rounds.append(((end - start) / iterations, (engine + end - left) / iterations))
    steady = terra.stats[20:]
    best = min(rounds)
    return best[0], best[1], sum(s.phase == "coexec" for s in steady) / len(steady)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    print(
        f"{'program':<12} {'ops':>4} {'eager us/op':>12} {'capture us/op':>14} "
        f"{'added':>7} {'tracing us/op':>14} {'added':>7} {'coexec us/op':>13} {'engine':>7} "
        f"{'coexec':>7}"
    )
    for name, make in (("elementwise", elementwise_program), ("keras-mlp", keras_program)):
        step = make()
        ops = count_ops(step)
        timed(step, 20, "capture")  # warm up
        eager = timed(step, args.iterations, "eager") / ops * 1e6
        captured = timed(step, args.iterations, "capture") / ops * 1e6
        tracing = timed(step, args.iterations, "tracing") / ops * 1e6
        coexec, engine, share = coexec_timed(step, args.iterations)
        print(
            f"{name:<12} {ops:>4} {eager:>12.2f} {captured:>14.2f} "
            f"{(captured / eager - 1) * 100:>6.1f}% {tracing:>14.2f} "
            f"{(tracing / eager - 1) * 100:>6.1f}% {coexec / ops * 1e6:>13.2f} "
            f"{engine / ops * 1e6:>7.2f} {share:>6.0%}"
        )


if __name__ == "__main__":
    main()
