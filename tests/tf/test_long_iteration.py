"""One long traced iteration costs the engine work linear in its ops.

``%%terra`` on a cell without a loop of its own, or a ``fit`` run in one iteration, traces
thousands of ops that repeat at the same locations with no user loop around them (here: a
step called from ``map``, a loop in C, as Keras's own loop is library code). The engine's
Python per op must not grow with the iteration's length: 51x slower than plain was measured
for a 3-epoch ``fit`` before. Counted in lines of terra-nb's files run, not timed.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf
from work_count import assert_linear, lines_run

import terra_nb

ENGINE = os.path.dirname(terra_nb.__file__) + os.sep


def _engine_lines(steps: int, budget: int | None) -> int:
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.01)
    x, y = np.ones((2, 4), "float32"), np.zeros((2, 1), "float32")

    def step(_):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))

    step(0)  # the variables exist before the iteration
    with terra_nb.Terra(regions=False) as terra:
        def one_iteration():
            with terra.step():
                list(map(step, range(steps)))  # no user loop: one chain of repeated ops
        lines = lines_run(one_iteration, lambda name: name.startswith(ENGINE), budget)
    assert terra.stats[0].ops > 30 * steps
    return lines


def test_one_long_traced_iteration_costs_linear_engine_work():
    small, large = assert_linear(_engine_lines, n=6)
    assert large > 3 * small  # the count does see the ops
