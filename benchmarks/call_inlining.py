"""What calling a function costs the runtime, against inlining it (not a test).

    python benchmarks/call_inlining.py [--calls N]

The compile policy (``terra_nb/coexec/compile_policy.py``) rents ``CALL_GAIN_S`` per function call
of an interpreted segment: a compiled segment inlines its callees, so its run saves what calling
them costs. This measures that on a Keras MLP training step: its gradient and its Adam update as
two function calls, against one function that calls both (inlined when traced), and the gradient
alone. Each is called by its name with its captured inputs, as an interpreted segment calls a
function (not through ``tf.function``'s Python). Best of three alternating rounds of N calls
each, microseconds per step.
"""

from __future__ import annotations

import argparse
import os
import timeit

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.eager import context, execute  # noqa: E402


def build():
    """(gradient, update, both) functions of one Keras MLP step and its batch."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    optimizer = keras.optimizers.Adam(1e-3)
    variables = model.trainable_variables
    optimizer.build(variables)

    @tf.function
    def gradient(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        return tape.gradient(loss, variables)

    @tf.function
    def update(grads):
        optimizer.apply_gradients(zip(grads, variables))

    @tf.function
    def both(x, y):
        update(gradient(x, y))

    batch = (tf.constant(np.ones((32, 32), "float32")), tf.constant(np.zeros((32, 10), "float32")))
    grads = gradient(*batch)
    update(grads), both(*batch)  # traced and registered with the runtime
    return by_name(gradient, *batch), by_name(update, grads), by_name(both, *batch), batch


def by_name(function, *args):
    """``function`` (traced for ``args``) called as the op named after it."""
    concrete = function.get_concrete_function(*args)
    signature = concrete.function_def.signature
    captured, ctx = list(concrete.captured_inputs), context.context()

    def call(*values):  # (holds ``function``: the runtime forgets a collected one's functions)
        return execute.execute(signature.name, len(signature.output_arg),
                               tf.nest.flatten(values) + captured, (), ctx)

    call.function = function
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    gradient, update, both, batch = build()
    steps = {
        "two calls (gradient, update)": lambda: update(gradient(*batch)),
        "one call (both inlined)": lambda: both(*batch),
        "gradient alone": lambda: gradient(*batch),
    }
    for step in steps.values():  # instantiate every function first
        step()
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(3):  # rounds alternate the steps: a busy spell slows all of them alike
        for name, step in steps.items():
            best[name] = min(best[name], timeit.timeit(step, number=args.calls) / args.calls)
    for name, seconds in best.items():
        print(f"{name:<30} {seconds * 1e6:8.0f} us")


if __name__ == "__main__":
    main()
