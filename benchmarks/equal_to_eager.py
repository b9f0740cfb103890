"""The loops that once broke "equal to eager" (issue 11), run eagerly and under Terra.

    python benchmarks/equal_to_eager.py [--modes coexec,lazy]

- ``range``: ``tf.range`` over a variable's value, its size and mean read every iteration (the
  size was once folded from the traced shape: silent wrong results);
- ``boolean_mask``: a mask whose count grows with the data, read with ``int(tf.shape(m)[0])``;
- ``epoch``: six epochs over a shuffled, mapped, batched, prefetched ``tf.data`` pipeline of 20
  batches, a Keras metric updated per batch and read per epoch (it once never left tracing).

Prints, per loop and mode, whether the values (and weights) equal eager's, and the phase of each
iteration (t: tracing, c: co-executed, f: fallback).
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
import tensorflow as tf

import terra_nb


def range_loop(loop) -> list:
    v, out = tf.Variable(3.0), []
    for _ in loop(range(6)):
        r = tf.range(v * 1.0)
        n = tf.cast(tf.size(r), tf.float32)
        s = tf.reduce_sum(r)
        del r
        out.append(float(s / n))
        v.assign_add(1.0)
    return out


def mask_loop(loop) -> list:
    v, out = tf.Variable(np.linspace(-1, 1, 8).astype("float32")), []
    for i in loop(range(8)):
        m = tf.boolean_mask(v, v > 0.3 - 0.1 * i)
        out.append((int(tf.shape(m)[0]), float(tf.reduce_sum(m))))
        v.assign_add(tf.fill([8], 0.01))
    return out


def epoch_loop(loop, epochs: int = 6, batches: int = 20) -> list:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3)])
    opt = keras.optimizers.Adam(1e-2)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    metric = keras.metrics.SparseCategoricalAccuracy()
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((16 * batches, 8)).astype("float32")
    ys = rng.integers(0, 3, 16 * batches)
    ds = (tf.data.Dataset.from_tensor_slices((xs, ys)).shuffle(16 * batches, seed=1)
          .map(lambda x, y: (x * 2.0, y)).batch(16).prefetch(2))
    accuracies = []
    for _ in loop(range(epochs)):
        metric.reset_state()
        for x, y in ds:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            metric.update_state(y, model(x))
        accuracies.append(float(metric.result()))
    return [accuracies, [w.numpy() for w in model.weights]]


LOOPS = {"range": range_loop, "boolean_mask": mask_loop, "epoch": epoch_loop}


def same(a, b) -> bool:
    """Equal values, arrays compared bit for bit."""
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="coexec,lazy", help="comma-separated Terra modes")
    args = parser.parse_args()
    for name, loop_of in LOOPS.items():
        for mode in args.modes.split(","):
            eager = loop_of(lambda it: it)
            with terra_nb.Terra(mode=mode) as terra:
                got = loop_of(terra.loop)
            phases = "".join(s.phase[0] for s in terra.stats)
            shown = got[0] if name == "epoch" else got
            print(f"{name:<13} {mode:<7} equal={same(eager, got)} phases={phases} {shown}",
                  flush=True)


if __name__ == "__main__":
    main()
