"""tf.distribute programs for ``test_distribute.py``, run as a script in a process of their own
(logical devices must be set up before TensorFlow starts):

    python distribute_programs.py PROGRAM          # mirrored programs, two logical CPUs
    python distribute_programs.py worker I PORTS   # one MultiWorkerMirroredStrategy worker

Each program runs plainly and then under a ``Terra`` in the same process (a worker runs
``--mode``'s one: eager or coexec) and prints one JSON line: both results, and what ran (the
phase and label of every iteration, explain(), the notes, the op types and devices of the graph
segments run).
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import sys

DEADLINE = 240  # seconds: a process stuck longer dumps its threads and exits on its own


def data(n: int = 64):
    import numpy as np

    rng = np.random.RandomState(0)
    x = rng.normal(size=(n, 8)).astype("float32")
    return x, (x @ rng.normal(size=(8, 1))).astype("float32")


def model_and_optimizer(strategy):
    import keras

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(1)])
        return model, keras.optimizers.SGD(0.05)


def step_fn(model, optimizer, global_batch: int):
    import tensorflow as tf

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((model(xb) - yb) ** 2) / global_batch
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def epoch_loop(strategy, loop):
    """Six epochs over a distributed dataset, no value read inside: the replicas' reads of
    the variables must wait for the graph's updates of the step before."""
    import tensorflow as tf

    model, optimizer = model_and_optimizer(strategy)
    x, y = data()
    dist = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(16))
    step = step_fn(model, optimizer, 16)
    losses = []
    for _ in loop(range(6)):
        for xb, yb in dist:
            losses.append(strategy.reduce("SUM", strategy.run(step, args=(xb, yb)), axis=None))
    return [float(v) for v in losses], model


def run_and_reduce(strategy, loop):
    """A custom loop: ``strategy.run``, then ``strategy.reduce`` (SUM and MEAN) read every
    step, a Python branch on the value, a print every fourth step."""
    import tensorflow as tf

    model, optimizer = model_and_optimizer(strategy)
    x, y = data()
    batches = iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)))
    step = step_fn(model, optimizer, 16)
    seen = []
    for i in loop(range(16)):
        per_replica = strategy.run(step, args=next(batches))
        total = float(strategy.reduce("SUM", per_replica, axis=None))
        mean = float(strategy.reduce("MEAN", per_replica, axis=None))
        seen.append((total, mean, "high" if total > 1.0 else "low"))
        if i % 4 == 0:
            print(f"step {i}: {total:.6f}")
    return seen, model


def fit(strategy, loop):
    """``fit(run_eagerly=True)`` under the strategy (the Terra, if any, is open around it)."""
    import keras

    model, _ = model_and_optimizer(strategy)
    with strategy.scope():
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", run_eagerly=True)
    x, y = data()
    history = model.fit(x, y, batch_size=16, epochs=4, verbose=0)
    return history.history, model


PROGRAMS = {"epoch_loop": epoch_loop, "run_and_reduce": run_and_reduce, "fit": fit,
            "epoch_loop_xla": epoch_loop}
OPTIONS = {"epoch_loop_xla": {"xla": True}}  # Terra's options, by program


def run(program, strategy, mode: str, options: dict | None = None) -> dict:
    """``program`` plainly (mode "eager") or under ``Terra(**options)``: its values, weights,
    printed text and what ran."""
    from terra_nb import Terra

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if mode == "eager":
            values, model = program(strategy, lambda it: it)
            terra = None
        else:
            with Terra(**(options or {})) as terra:
                values, model = program(strategy, terra.loop)
    result = {"values": values, "weights": [w.numpy().tolist() for w in model.weights],
              "printed": out.getvalue()}
    if terra is not None:
        result.update(
            phases=[s.phase for s in terra.stats], labels=[s.label for s in terra.stats],
            explain=[str(f) for f in terra.explain()], notes=list(terra.notes),
            placed=sorted({(op.op_type, op.device) for s in terra.programs for op in s.ops}))
    return result


def two_logical_cpus():
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def worker(index: int, ports: list[str], mode: str) -> dict:
    """One worker of a two-worker cluster on 127.0.0.1, running ``run_and_reduce``."""
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": index}})
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return run(run_and_reduce, strategy, mode)


def terra_in_replica(strategy) -> dict:
    """A Terra opened inside ``strategy.run``'s function: the error the user gets."""
    from terra_nb import Terra

    def replica_fn():
        with Terra():
            pass

    try:
        strategy.run(replica_fn)
    except Exception as error:  # noqa: BLE001 - reported to the test
        return {"error": type(error).__name__, "message": str(error)}
    return {"error": None}


def main(argv: list[str]) -> None:
    faulthandler.dump_traceback_later(DEADLINE, exit=True)  # never outlives its test
    if argv[0] == "worker":
        result = worker(int(argv[1]), argv[2].split(","), argv[3])
    elif argv[0] == "terra_in_replica":
        result = terra_in_replica(two_logical_cpus())
    else:
        strategy = two_logical_cpus()
        program = PROGRAMS[argv[0]]
        result = {"eager": run(program, strategy, "eager"),
                  "coexec": run(program, strategy, "coexec", OPTIONS.get(argv[0]))}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
