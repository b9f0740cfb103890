"""Memory soak: a Keras MLP trained with Adam while the loop keeps every loss tensor.

    python benchmarks/memory_soak.py [--iterations 550] [--modes eager,coexec] [--repeats 3]

Each run is its own process (a clean heap); the modes alternate, ``--repeats`` times, and the
medians are printed per mode: RSS growth over the loop (after a warm-up of 50 iterations), growth
per iteration, whether a capture hook is still installed after the loop while the losses are kept,
and the cost of an ordinary eager op then (against the same op before the loop).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

WARMUP = 50


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _op_cost_us(tf, n: int = 3000) -> float:
    a = tf.constant(1.0)
    start = time.perf_counter()
    for _ in range(n):
        tf.add(a, a)
    return (time.perf_counter() - start) / n * 1e6


def soak(mode: str, iterations: int) -> dict:
    """Run the soak in this process; return its measurements."""
    import keras
    import numpy as np
    import tensorflow as tf

    import terra_nb
    from terra_nb import capture

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 256)).astype("float32")
    y = rng.integers(0, 10, 256)
    before_cost = _op_cost_us(tf)
    losses, marks = [], {}

    def loop(batches):
        for i in batches:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            losses.append(loss)  # the habit under test: every loss tensor kept
            if i == WARMUP:
                marks["start"] = _rss_mb()

    if mode == "eager":
        loop(range(iterations))
        phases = ["eager"] * iterations
    else:
        with terra_nb.Terra(mode=mode) as terra:
            loop(terra.loop(range(iterations)))
        phases = [s.phase for s in terra.stats]
    float(losses[-1])
    end = _rss_mb()
    return {
        "mode": mode,
        "rss_growth_mb": round(end - marks["start"], 1),
        "per_iteration_kb": round((end - marks["start"]) * 1024 / (iterations - WARMUP), 1),
        "hook_installed_after": capture.is_installed(),
        "op_cost_before_us": round(before_cost, 1),
        "op_cost_after_us": round(_op_cost_us(tf), 1),
        "coexec_iterations": phases.count("coexec"),
    }


def _median(runs: list[dict]) -> dict:
    """One row: the median of each number over the runs (any hook left counts)."""
    row = dict(runs[0])
    for key, value in row.items():
        if isinstance(value, bool):
            row[key] = any(r[key] for r in runs)
        elif isinstance(value, (int, float)):
            row[key] = round(statistics.median(r[key] for r in runs), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=550)
    parser.add_argument("--modes", default="eager,coexec")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(soak(args.child, args.iterations)))
        return
    runs: dict[str, list[dict]] = {mode: [] for mode in args.modes.split(",")}
    for repeat in range(args.repeats):
        for mode, done in runs.items():
            print(f"soak: {mode}, {args.iterations} iterations, run {repeat + 1} of "
                  f"{args.repeats} ...", file=sys.stderr)
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--iterations",
                                  str(args.iterations)], capture_output=True, text=True,
                                 check=True)
            done.append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = [_median(done) for done in runs.values()]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
