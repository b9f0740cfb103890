"""What keeping the executor's thread off the loop thread's core buys (``coexec/cores.py``).

1. The issue probe: a compiled function of K small ops issued from the loop's thread into an
   idle asynchronous executor, as co-execution issues a segment, then 0.5 ms of Python: how long
   the call held the loop's thread, and how long after the call began the run ended (its end
   stamp). Without the split the call returns only near the run's end: nothing overlaps.
2. The co-execution benchmark's loops in coexec mode with regions, ``split_cores`` on and off
   (and lazy mode for reference), alternating within each round; medians of ``--repeats``.

    python benchmarks/core_split.py [--only mlp-small cnn] [--repeats 3] [--iterations 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorflow as tf  # noqa: E402
from coexec_benchmark import LOOPS, READ, items, read_last  # noqa: E402
from tensorflow.python.eager import executor  # noqa: E402

from terra_nb import Terra  # noqa: E402
from terra_nb.coexec.completion import issuing_into, read, stamp  # noqa: E402
from terra_nb.coexec.cores import CoreSplit  # noqa: E402
from terra_nb.coexec.function_call import FunctionCall  # noqa: E402


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def issue_probe(ops: int, split: bool, runs: int = 250) -> tuple[float, float]:
    """Median ms the call held the loop's thread, and from the call's start to the run's end."""
    cores = CoreSplit(split)
    ex = cores.started(lambda: executor.new_executor(enable_async=True))
    w = tf.Variable(tf.random.normal((32, 32), seed=1))

    @tf.function
    def segment(x):
        for _ in range(ops):
            x = tf.nn.relu(x @ w)
        return tf.reduce_mean(x)

    x = tf.random.normal((16, 32), seed=2)
    call = FunctionCall(segment.get_concrete_function(x))
    offset = time.time() - time.perf_counter()
    held, ended = [], []
    for _ in range(runs):
        busy(0.0005)
        cores.follow()
        start = time.perf_counter()
        with issuing_into(ex):
            call(x)
        held.append(time.perf_counter() - start)
        end = stamp(ex)
        busy(0.0005)
        ended.append(read(end) - offset - start)
    ex.wait()
    return 1e3 * float(np.median(held[50:])), 1e3 * float(np.median(ended[50:]))


def loop_rate(name: str, n: int, mode: str, split: bool) -> float:
    data, body, _ = LOOPS[name]()
    with Terra(mode=mode, regions=True, split_cores=split) as terra:
        for i, item in enumerate(terra.loop(items(data, 10 + n))):
            if i == 10:
                start = time.perf_counter()
            body(item)
        read_last()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=["mlp-small", "attention", "cnn",
                                                      "rnn-varlen"], choices=sorted(LOOPS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--read", choices=("every", "end"), default="every")
    args = parser.parse_args()
    READ["every"] = args.read == "every"
    print(f"usable cores: {sorted(os.sched_getaffinity(0))}")
    print("issue probe (ms): ops   split: call held / run ended   shared: call held / run ended")
    for ops in (3, 30, 100):
        on, off = issue_probe(ops, True), issue_probe(ops, False)
        print(f"{'':18}{ops:4d}   {on[0]:8.3f} / {on[1]:.3f}   {off[0]:14.3f} / {off[1]:.3f}")
    variants = (("coexec", True), ("coexec", False), ("lazy", False))
    print(f"\nloops (it/s, --read {args.read}, medians of {args.repeats}): "
          "coexec split, coexec shared, lazy")
    for name in args.only:
        rates = {v: [] for v in variants}
        for _ in range(args.repeats):
            for mode, split in variants:
                rates[(mode, split)].append(loop_rate(name, args.iterations, mode, split))
        med = [float(np.median(r)) for r in rates.values()]
        print(f"{name:<12} {med[0]:8.1f} {med[1]:8.1f} {med[2]:8.1f}   split/shared "
              f"{med[0] / med[1]:.2f}, split/lazy {med[0] / med[2]:.2f}", flush=True)


if __name__ == "__main__":
    main()
