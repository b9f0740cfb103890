"""Stateful ops other than variable reads and writes equal eager: ``tf.random`` with op seeds
(on every path or on some), ``tf.random.Generator``, ``tf.print``. The whole program cannot hold
them: the tests also assert the fallback that is expected (segments, or a fallback explained).
"""

import sys

import keras
import numpy as np
import tensorflow as tf
from against_eager import (
    WHOLE,
    assert_same_variables,
    compare,
    run,
)
from test_coexec import graph_threads
from what_ran import assert_coexecuted, phases

# -- stateful ops ---------------------------------------------------------------------------------


def random_ops(loop):
    tf.random.set_seed(7)
    w = tf.Variable(np.zeros(3, np.float32))
    out = []
    for _i in loop(range(10)):
        noise = tf.random.uniform([3], seed=11)
        w.assign_add(noise * 0.1)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_tf_random_uniform_with_op_seeds():
    terra = compare(random_ops, plan="segments")
    # stateful on every path: the whole loop runs in segments, with a warning naming the op
    assert terra.program is None
    assert any("RandomUniform" in w for w in terra.caught_warnings), terra.caught_warnings


def random_on_some_paths(loop):
    tf.random.set_seed(7)
    w = tf.Variable(np.zeros(3, np.float32))
    out = []
    for i in loop(range(14)):
        w.assign(w * 0.9 + 0.1)
        if i % 4 == 3:
            w.assign_add(tf.random.uniform([3], seed=11) * 0.1)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_tf_random_on_some_paths_falls_back_and_is_explained():
    terra = compare(random_on_some_paths)
    assert terra.program is not None
    assert "coexec" in phases(terra)
    assert any("RandomUniform" in f.op_type for f in terra.explain()), terra.explain()


def generator_random(loop):
    gen = tf.random.Generator.from_seed(3)
    w = tf.Variable(np.zeros(3, np.float32))
    out = []
    for _i in loop(range(10)):
        w.assign_add(gen.normal([3]) * 0.1)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_tf_random_generator():
    terra = compare(generator_random, plan="segments")
    assert terra.program is None and terra.caught_warnings


def tf_print_loop(loop):
    w = tf.Variable(np.ones(2, np.float32))
    for _i in loop(range(8)):
        w.assign(w * 1.5)
        tf.print("w", w, output_stream=sys.stderr)
    return [], [w.numpy()]


def test_tf_print_equals_eager_and_is_explained(capfd):
    values, variables, _, _ = run(tf_print_loop, None)
    eager_err = capfd.readouterr().err
    values2, variables2, _, terra = run(tf_print_loop, WHOLE)
    whole_err = capfd.readouterr().err
    assert_same_variables(variables, variables2)
    assert [line for line in whole_err.splitlines() if line.startswith("w")] == \
        [line for line in eager_err.splitlines() if line.startswith("w")]
    assert terra.program is None  # PrintV2 on every path: segments, with a warning
    assert any("PrintV2" in w for w in terra.caught_warnings), terra.caught_warnings
    assert not graph_threads()
    assert_coexecuted(terra, plan="segments")



def check_numerics_step(loop):
    """A Keras step whose gradients pass through ``tf.debugging.check_numerics`` (never
    non-finite): an op Python runs for real, which the whole program cannot hand over."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.01)
    rng = np.random.RandomState(25)
    out = []
    for _i in loop(range(12)):
        x = rng.randn(8, 4).astype("float32")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_weights)
        grads = [tf.debugging.check_numerics(g, "bad grad") for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_weights))
        out.append(float(loss))
    return out, [w.numpy() for w in model.weights]


def test_check_numerics_leaves_the_program_and_goes_on_in_segments():
    """Each iteration leaves the program at CheckNumerics; once a leaving run had gone ahead of
    Python's checks, the next flush met its closed queue and raised ``CancelledError`` out of
    the user's line (the review's r10): now the iteration leaves the program, and after the
    fallbacks the loop goes on in segments, equal to eager."""
    terra = compare(check_numerics_step, WHOLE, at_least=0.4, last=4, plan="segments")
    assert any("segments from now on" in w for w in terra.caught_warnings), terra.caught_warnings
    fallbacks = [str(f) for f in terra.explain()]
    assert fallbacks and all("CheckNumerics" in f or "ahead of Python" in f for f in fallbacks), \
        fallbacks
