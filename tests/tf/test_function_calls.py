"""A ``tf.function`` called in the loop is one op, a function call, that the graph runs like any
other: Python gets placeholders and does not wait, and the tape records the call as eager does.
Equal to eager, with the function calls seen in the compiled graph segments."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from against_eager import SEGMENTS, WHOLE, compare, run
from programs import batches

from terra_nb.capture.functions import function_def


def graph_function_calls(terra) -> int:
    """How many function-call ops the compiled graph segments hold."""
    return sum(function_def(op.op_type) is not None for seg in terra.programs for op in seg.ops)


def keras_step_functions(loop):
    """Forward, loss, gradient scaling and apply_gradients are tf.functions; the loss is read
    every third step."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(0.01)
    forward = tf.function(lambda x: model(x, training=True))
    loss_of = tf.function(lambda y, p: tf.reduce_mean((p - y) ** 2))
    scale = tf.function(lambda gs: [g / (tf.norm(g) + 1.0) for g in gs])
    apply = tf.function(lambda gs: opt.apply_gradients(zip(gs, model.trainable_variables)))
    values = []
    for i, (x, y) in enumerate(loop(batches(n=12))):
        with tf.GradientTape() as tape:
            loss = loss_of(y, forward(x))
        apply(scale(tape.gradient(loss, model.trainable_variables)))
        if i % 3 == 0:
            values.append(float(loss))
    return values, [v.numpy() for v in model.variables + opt.variables]


def test_tf_function_calls_run_in_the_graph():
    terra = compare(keras_step_functions, SEGMENTS, at_least=0.6, last=4)
    assert graph_function_calls(terra) >= 4  # forward, backward, scale, apply at least


def test_a_whole_program_leaves_function_calls_to_segments():
    # the whole program cannot hold a function's effects back to its commit
    terra = compare(keras_step_functions, WHOLE, at_least=0.6, plan="segments")
    assert graph_function_calls(terra) >= 4


def value_shaped_function(loop):
    """The output shape of the function depends on the values (unique): it runs for real."""
    v = tf.Variable([1.0, 2.0, 3.0, 4.0])
    uniq = tf.function(lambda t: tf.unique(tf.floor(t))[0])
    sizes = []
    for i in loop(range(8)):
        u = uniq(v * (0.5 * (i % 4)))
        sizes.append(int(tf.size(u)))
        v.assign_add(tf.ones(4) * 0.01)
    return sizes, [v.numpy()]


def test_a_function_with_value_dependent_output_shapes_equals_eager():
    values, _, _, _ = run(value_shaped_function, None)
    assert len(set(values)) > 1  # the size really changes
    compare(value_shaped_function, SEGMENTS, at_least=0.5)


def relaxed_shapes(loop):
    """A function traced for any batch size (None dims): its output shapes are not static."""
    w = tf.Variable(tf.ones((3, 2)))
    f = tf.function(lambda x: tf.matmul(x, w), input_signature=[tf.TensorSpec((None, 3))])
    out = []
    for i in loop(range(8)):
        y = f(tf.ones((2 + i % 3, 3)) * float(i))
        out.append(float(tf.reduce_sum(y)))
        w.assign_add(tf.ones((3, 2)) * 0.1)
    return out, [w.numpy()]


def test_a_function_traced_for_any_batch_size_equals_eager():
    compare(relaxed_shapes, SEGMENTS, at_least=0.5)


@pytest.mark.parametrize("mode", ["lazy", "trace"])
def test_function_calls_in_other_modes_equal_eager(mode):
    values, variables, _, _ = run(keras_step_functions, None)
    values2, variables2, _, terra = run(keras_step_functions, {"mode": mode})
    assert values2 == values
    for a, b in zip(variables, variables2):
        np.testing.assert_array_equal(a, b)


def iterator_into_a_function(loop):
    """A tf.data iterator handed to a tf.function: its resource handle carries no handle data."""
    it = iter(tf.data.Dataset.range(20).map(lambda z: tf.cast(z, tf.float32)))
    f = tf.function(lambda it, s: next(it) * s)
    out = [float(f(it, 2.0)) for _ in loop(range(6))]
    return out, [np.float32(f.experimental_get_tracing_count())]


@pytest.mark.parametrize("regions", [True, False])
def test_an_iterator_handed_to_a_function_equals_eager(regions):
    # every value is read at once: the calls run for real (plan "none")
    compare(iterator_into_a_function, {**SEGMENTS, "regions": regions}, at_least=0.3, plan="none")
