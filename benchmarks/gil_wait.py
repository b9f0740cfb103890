"""How long a GraphRunner-like thread's function call takes beside a busy loop thread (not a test).

    python benchmarks/gil_wait.py [--calls N]

Co-execution ran compiled functions on a second Python thread while the loop's thread ran the
user's Python (until issue 39: the graph now runs on TensorFlow's asynchronous executor, whose C++
thread needs no GIL; ``benchmarks/overlap.py`` measures that). TensorFlow releases the GIL while a
call runs; to return, the calling thread needs
it back, and a thread running pure Python gives it up only when the interpreter's switch interval
(``sys.getswitchinterval()``, 5 ms by default) asks it to. A thread running TensorFlow ops gives
it up at each op. This prints milliseconds per call of one small function (60 matmul-tanh steps
on 16x64, ~0.5 ms of compute) made on a second thread: alone, beside a thread running pure Python,
and beside one converting numpy batches to tensors, for two switch intervals.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def small_function():
    w = tf.Variable(tf.random.normal((64, 64), seed=0) * 0.1)

    @tf.function
    def steps(h):
        for _ in range(60):
            h = tf.tanh(h @ w + 1.0) * 0.5
        return h

    h = tf.random.normal((16, 64), seed=1)
    return steps.get_concrete_function(h), h


def busy(kind: str, stop: threading.Event) -> None:
    """The loop thread: pure Python, or a TensorFlow call at every step."""
    batch, n = np.ones((16, 64), "float32"), 0
    while not stop.is_set():
        if kind == "python":
            n += 1
        else:
            tf.constant(batch)


def ms_per_call(call, calls: int, beside: str | None) -> float:
    """Milliseconds per ``call()`` made on a second thread, the main thread ``beside`` it."""
    stop, out = threading.Event(), []

    def caller() -> None:
        start = time.perf_counter()
        for _ in range(calls):
            call()
        out.append((time.perf_counter() - start) / calls * 1e3)
        stop.set()

    thread = threading.Thread(target=caller)
    thread.start()
    if beside is None:
        thread.join()
    else:
        busy(beside, stop)
        thread.join()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    function, h = small_function()
    call = lambda: function(h)  # noqa: E731
    for _ in range(20):
        call()
    saved = sys.getswitchinterval()
    print(f"{'switch interval':>16} {'alone':>8} {'beside Python':>14} {'beside TF ops':>14}")
    try:
        for interval in (saved, 0.0005):
            sys.setswitchinterval(interval)
            cells = [ms_per_call(call, args.calls, beside) for beside in (None, "python", "tf")]
            print(f"{interval * 1e3:>13.1f} ms " + " ".join(f"{c:>11.2f} ms" for c in cells))
    finally:
        sys.setswitchinterval(saved)


if __name__ == "__main__":
    main()
