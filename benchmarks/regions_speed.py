"""Steps/s of a small Keras MLP + Adam loop (``float(loss)`` read every step): plain eager,
``Terra(mode="eager", regions=True)``, ``Terra(regions=True)`` (coexec) and, for reference,
``Terra()`` (coexec without regions).

    PYTHONPATH=. python benchmarks/regions_speed.py [--steps N] [--warmup W] [--rounds R]

Each run builds fresh objects and runs W + N steps in one loop; the last N are timed (steady
state: regions formed, co-execution begun). Modes alternate within a round; the table gives the
median of R rounds, and whether the weights equal eager's bit for bit.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from terra_nb import Terra  # noqa: E402

MODES = {"eager": None, "eager+regions": {"mode": "eager", "regions": True},
         "coexec+regions": {"regions": True}, "coexec": {}}


def build():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    return model, keras.optimizers.Adam(1e-3), \
        keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def batches(n: int) -> list:
    rs = np.random.RandomState(1)
    data = [(tf.constant(rs.rand(32, 32).astype("float32")),
             tf.constant(rs.randint(0, 10, 32).astype("int64"))) for _ in range(8)]
    return [data[i % 8] for i in range(n)]


def run(options, warmup: int, steps: int) -> tuple[float, list]:
    model, opt, lossf = build()
    marks = {}
    context = contextlib.nullcontext() if options is None else Terra(**options)
    with context as terra:
        loop = (lambda it: it) if terra is None else terra.loop
        for i, (x, y) in enumerate(loop(batches(warmup + steps))):
            if i == warmup:
                marks["start"] = time.perf_counter()
            with tf.GradientTape() as tape:
                loss = lossf(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            float(loss)
        marks["end"] = time.perf_counter()
    weights = [v.numpy() for v in model.variables + opt.variables]
    return steps / (marks["end"] - marks["start"]), weights


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    speeds = {m: [] for m in MODES}
    same = {}
    for _ in range(args.rounds):
        ref = None
        for mode, options in MODES.items():
            gc.collect()
            speed, weights = run(options, args.warmup, args.steps)
            speeds[mode].append(speed)
            ref = weights if ref is None else ref
            same[mode] = all(np.array_equal(a, b) for a, b in zip(ref, weights))
    base = statistics.median(speeds["eager"])
    print(f"TF {tf.__version__}, Keras {keras.__version__}; MLP 32-64-64-10, batch 32, Adam; "
          f"{args.warmup} warm-up + {args.steps} timed steps, median of {args.rounds} rounds")
    for mode, values in speeds.items():
        median = statistics.median(values)
        print(f"  {mode:15s} {median:8.1f} steps/s  {median / base:5.2f}x eager  "
              f"weights bit-identical to eager: {same[mode]}  (runs: "
              + ", ".join(f"{v:.0f}" for v in values) + ")")


if __name__ == "__main__":
    main()
