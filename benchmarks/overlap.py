"""How much of an iteration's graph work co-execution hides behind its Python (not a test).

    python benchmarks/overlap.py [--graph-ms 1 2 4] [--python-ms 2] [--iterations 60]
                                 [--rounds 3]

Each iteration issues X ms of graph work (one user ``tf.function``: matmul-tanh steps on
128 x 128, calibrated to X ms) and its result, runs Y ms of pure Python (a busy loop holding the
GIL, as Keras's and the loop's own Python do), then reads the result (the loss of a step read
after its logging, say; co-execution hands the step to the graph when the op Python read in the
last iteration is issued). Eager runs them one after the other
(X + Y); co-execution issues the graph work into TensorFlow's asynchronous executor and goes on
with the Python, so an iteration should take about max(X, Y); lazy mode runs the graph only at
the read (X + Y again). Prints milliseconds per iteration (median of alternating rounds, after
10 warm-up iterations) and co-execution's ratio to max(X, Y). Each part also runs alone, eagerly:
the graph part (the step's ops and X, no busy Python) and the Python part (the same ops, the
function run for no trips, and Y). Each holds the step's own op dispatch, which no plan hides
(Python issues the ops before the graph can run them, and reads the result each iteration):
co-execution's ideal is the longer part, ``coexec / max(parts)``. The same probe with the graph run
on a Python thread took 2.87 ms for X = 0.75, Y = 2.0 (issue 39; ``benchmarks/gil_wait.py``
shows why: the thread waits for the GIL to return from each call).

Co-execution keeps the loop's thread and the executor's thread on cores of their own
(``terra_nb/coexec/cores.py``; without that, the scheduler ran the executor's work on the loop
thread's core and preempted the loop's Python for it). ``--pin`` also gives TensorFlow's other
threads (its pools) the second core, in co-executed and lazy runs alike: the benchmark's doing,
not terra-nb's.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from terra_nb import Terra  # noqa: E402

SIDE = 128


def graph_work(ms: float):
    """A tf.function of about ``ms`` milliseconds (calibrated here) and its input."""
    w = tf.constant(np.eye(SIDE, dtype="float32") * 0.5)

    @tf.function(autograph=False)
    def steps(h, n):
        return tf.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tf.tanh(h @ w) * 2.0),
                             (0, h))[1]

    h = tf.ones((SIDE, SIDE))
    steps(h, tf.constant(10)).numpy()
    trial = 200
    start = time.perf_counter()
    for _ in range(5):
        steps(h, tf.constant(trial)).numpy()
    per_step = (time.perf_counter() - start) / 5 / trial
    return steps, max(1, round(ms / 1e3 / per_step))


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def loop(iterate, steps, n: int, python_s: float, count: int) -> float:
    """Seconds per iteration of the last ``count`` iterations (10 warm-up before)."""
    v = tf.Variable(tf.ones((SIDE, SIDE)))
    times = []
    for _ in iterate(range(10 + count)):
        times.append(time.perf_counter())
        h = steps(v * 1.0, tf.constant(n))
        v.assign(h)
        loss = tf.reduce_sum(h)  # the step's result, read after the Python below
        busy(python_s)
        float(loss)
    times.append(time.perf_counter())
    return (times[-1] - times[10]) / count


PIN = {"on": False}


def pin_threads(on: bool) -> None:
    """With ``--pin``: the loop's thread on core 0, TensorFlow's threads (the executor's, its
    pools) on core 1, so that each has a core whatever else the machine runs (the benchmark's
    doing, not terra-nb's). Off: every thread on every core."""
    if not PIN["on"]:
        return
    python = {t.native_id for t in threading.enumerate()}
    for task in glob.glob("/proc/self/task/*"):
        tid = int(os.path.basename(task))
        if tid == threading.get_native_id():
            os.sched_setaffinity(tid, {0} if on else set(range(os.cpu_count())))
        elif tid not in python:
            os.sched_setaffinity(tid, {1} if on else set(range(os.cpu_count())))


def run(mode: str, steps, n: int, python_s: float, count: int) -> float:
    if mode == "graph part":  # eager, the Python work left out: X and the step's dispatch
        return loop(lambda it: it, steps, n, 0.0, count)
    if mode == "Python part":  # eager, the graph work left out (no trips): Y and the dispatch
        return loop(lambda it: it, steps, 0, python_s, count)
    if mode == "eager":
        return loop(lambda it: it, steps, n, python_s, count)
    with Terra(mode=mode) as terra:
        pin_threads(True)  # the Terra's executor thread exists now
        try:
            seconds = loop(terra.loop, steps, n, python_s, count)
        finally:
            pin_threads(False)
    assert [s.phase for s in terra.stats][-count:] == ["coexec"] * count, "did not co-execute"
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph-ms", type=float, nargs="+", default=[0.75, 2.0, 4.0])
    parser.add_argument("--python-ms", type=float, nargs="+", default=[2.0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pin", action="store_true",
                        help="coexec and lazy: the loop's thread on core 0, all of TensorFlow's "
                             "threads on core 1")
    args = parser.parse_args()
    PIN["on"] = args.pin
    modes = ("graph part", "Python part", "eager", "coexec", "lazy")
    print("| graph X ms | Python Y ms | graph part alone | Python part alone | eager ms/it | "
          "coexec ms/it | lazy ms/it | coexec / max(X, Y) | coexec / max(parts) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for graph_ms in args.graph_ms:
        steps, n = graph_work(graph_ms)
        for python_ms in args.python_ms:
            got: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(args.rounds):  # alternating: the machine's noise hits every mode
                for mode in modes:
                    got[mode].append(run(mode, steps, n, python_ms / 1e3, args.iterations))
            ms = {m: statistics.median(v) * 1e3 for m, v in got.items()}
            parts = max(ms["graph part"], ms["Python part"])
            print(f"| {graph_ms:g} | {python_ms:g} | {ms['graph part']:.2f} | "
                  f"{ms['Python part']:.2f} | {ms['eager']:.2f} | {ms['coexec']:.2f} | "
                  f"{ms['lazy']:.2f} | {ms['coexec'] / max(graph_ms, python_ms):.2f} | "
                  f"{ms['coexec'] / parts:.2f} |", flush=True)


if __name__ == "__main__":
    main()
