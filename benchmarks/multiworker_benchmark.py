"""Two ``MultiWorkerMirroredStrategy`` workers on 127.0.0.1, eager against co-executed.

    python benchmarks/multiworker_benchmark.py [--warmup W] [--steps N] [--repeats R]

Each round starts two worker processes (``TF_CONFIG`` on two free loopback ports) per mode;
each worker runs the README's custom loop (``strategy.run`` of a Keras MLP step on a
distributed dataset, ``strategy.reduce`` read every step) for W + N steps, plainly or under a
``Terra``, and reports the steps/s of its last N steps. The table shows, per mode, the median
over R alternating rounds of the slower worker's rate (the cluster runs at its pace), and
whether the co-executed workers' weights equal the eager workers' bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from worker_cluster import free_ports, run_workers

WORKER = r"""
import json, os, sys, time
index, ports, mode, warmup, steps = sys.argv[1:6]
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports.split(",")]},
    "task": {"type": "worker", "index": int(index)}})
import keras, numpy as np, tensorflow as tf
from terra_nb import Terra

strategy = tf.distribute.MultiWorkerMirroredStrategy()
keras.utils.set_random_seed(0)
with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)
rng = np.random.RandomState(0)
x = rng.normal(size=(1024, 64)).astype("float32")
y = rng.normal(size=(1024, 1)).astype("float32")
batches = iter(strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)))

def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((model(xb) - yb) ** 2) / 32.0
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

ends = []
def train(loop):
    for _ in loop(range(int(warmup) + int(steps))):
        loss = strategy.reduce("SUM", strategy.run(step, args=next(batches)), axis=None)
        float(loss)
        ends.append(time.perf_counter())

if mode == "eager":
    train(lambda it: it)
else:
    with Terra() as terra:
        train(terra.loop)
timed = ends[int(warmup) - 1:]
print(json.dumps({"rate": (len(timed) - 1) / (timed[-1] - timed[0]),
                  "weights": [w.numpy().tolist() for w in model.weights]}))
"""


def cluster(mode: str, warmup: int, steps: int, timeout: float = 600) -> list[dict]:
    """Two workers in ``mode``; their results (each stopped at ``timeout``)."""
    ports = ",".join(map(str, free_ports(2)))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = run_workers(lambda i: [sys.executable, "-c", WORKER, str(i), ports, mode,
                                  str(warmup), str(steps)], count=2, env=env, timeout=timeout)
    for worker in done:
        if worker.returncode != 0:
            raise RuntimeError(worker.stderr[-3000:])
    return [json.loads(worker.stdout.strip().splitlines()[-1]) for worker in done]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"eager": [], "coexec": []}
    weights: dict[str, list] = {}
    start = time.perf_counter()
    for r in range(args.repeats):
        for mode in ("eager", "coexec") if r % 2 == 0 else ("coexec", "eager"):
            results = cluster(mode, args.warmup, args.steps)
            rates[mode].append(min(w["rate"] for w in results))
            weights.setdefault(mode, [w["weights"] for w in results])
    eager, coexec = (statistics.median(rates[m]) for m in ("eager", "coexec"))
    equal = weights["eager"] == weights["coexec"]
    print(f"two workers on 127.0.0.1, {args.warmup} warm-up + {args.steps} timed steps, "
          f"medians of {args.repeats} alternating rounds ({time.perf_counter() - start:.0f} s)")
    print(f"eager {eager:.1f} steps/s, co-executed {coexec:.1f} steps/s "
          f"({coexec / eager:.2f}x), weights equal: {equal}")


if __name__ == "__main__":
    main()
