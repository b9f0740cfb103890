"""Compiled graphs give eager's bits: no graph rewrite may change a value.

- TensorFlow's oneDNN graph pass (on by default on x86) fuses a ``BiasAddGrad`` with the
  ``Conv2DBackpropFilter`` of the same gradient, and the fused kernel sums the bias gradient in
  another order than eager's ``BiasAddGrad``: 1e-8 on an Adam moment at first, 2e-3 on a GAN's
  weights twenty steps later. Neither kind of compiled function lets the pass see the pair.
- A region's functions are inlined into the compiled segments that call them (``graph_callee``),
  which run without grappler as the regions do; a user's ``tf.function`` is called through a copy
  never inlined, so it keeps the grappler passes its eager call gets.
- Grappler's constant folding turns a division by a constant into a multiplication by its
  reciprocal: ``x / 6`` (the gradient of a mean over 6 values, attention's scaling) is 1 ulp off
  eager's. Compiled functions run without it (``function_call.eager_equal_config``).
- A graph's ``AddN`` accumulates into an input no other op still needs, swapped to the front, so
  it sums in another order than eager's (which never reuses an input Python holds). The engine's
  graphs sum three or more terms in eager's order (``coexec/graph_sums.py``).
"""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.capture import functions

pytest.importorskip("tensorflow")


def train(loop, n: int = 8, normalised: bool = False, on_gradients=None) -> list[np.ndarray]:
    """A Conv2D (with bias), LeakyReLU, Dense model trained with Adam; ``normalised``: with
    BatchNormalization and Dropout too; ``on_gradients``: applied to the gradients first."""
    keras.utils.set_random_seed(0)
    L = keras.layers
    inner = [L.BatchNormalization(), L.LeakyReLU(0.2), L.Flatten(), L.Dropout(0.25)] \
        if normalised else [L.LeakyReLU(0.2), L.Flatten()]
    model = keras.Sequential([keras.Input((8, 8, 1)), L.Conv2D(8, 3, 2, padding="same"), *inner,
                              L.Dense(1)])
    opt = keras.optimizers.Adam(1e-2)
    rng = np.random.default_rng(0)
    for _ in loop(range(n)):
        x = rng.normal(size=(16, 8, 8, 1)).astype("float32")
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        if on_gradients is not None:
            grads = on_gradients(grads)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        float(loss)
    return [v.numpy() for v in model.variables + opt.variables]


@pytest.mark.parametrize("regions", [False, True])
def test_a_conv_layer_with_bias_trains_to_eager_bits(regions):
    eager = train(lambda it: it)
    with Terra(regions=regions) as terra:
        co = train(terra.loop)
    assert_coexecuted(terra, last=3)
    assert bool(terra.regions.rows) == regions  # the model call and the optimizer, or none
    for a, b in zip(eager, co):
        np.testing.assert_array_equal(a, b)


def divide_by_constants(loop, n: int = 6) -> list[np.ndarray]:
    """A mean over 6 and over 9 values and its gradient, and a division by 6 (not a power of
    two: its reciprocal is inexact)."""
    v = tf.Variable(np.random.default_rng(1).normal(size=(4, 8)).astype("float32"))
    rng = np.random.default_rng(0)
    out = []
    for _ in loop(range(n)):
        x = tf.constant(rng.normal(size=(4, 6, 8)).astype("float32"))
        with tf.GradientTape() as tape:
            h = tf.reduce_mean(x * v[:, None, :], axis=1) / 6.0
            loss = tf.reduce_sum(h * h) + tf.reduce_mean(tf.tile(h, [1, 9]))
        (grad,) = tape.gradient(loss, [v])
        v.assign_sub(0.1 * grad)
        out.append(float(loss))
    return out + [v.numpy()]


@pytest.mark.parametrize("program", ["segments", "whole"])
def test_a_division_by_a_constant_keeps_eager_bits(program):
    eager = divide_by_constants(lambda it: it)
    with Terra(program=program) as terra:
        co = divide_by_constants(terra.loop)
    assert_coexecuted(terra, last=3)
    assert co[:-1] == eager[:-1]
    np.testing.assert_array_equal(co[-1], eager[-1])


@tf.function
def scaled(grads):
    """A user's function on the gradients: called through a copy never inlined."""
    return [g / 6.0 for g in grads]


def test_region_calls_inlined_into_compiled_segments_keep_eager_bits():
    program = functools.partial(train, normalised=True, on_gradients=scaled)
    eager = program(lambda it: it)
    with Terra(compile_after=1) as terra:  # every segment compiled at its first run
        co = program(terra.loop)
    assert_coexecuted(terra, last=3)
    called = {op.op_type for segment in terra.programs for op in segment.ops
              if functions.function_def(op.op_type) is not None}
    regions = {name for name in called if functions.confirmed(name)}
    assert regions and called - regions  # the regions' functions and the user's
    assert terra.compiled_segments >= 1
    for name in called:
        callee = functions.function_def(functions.graph_callee(name))
        assert callee.attr["_noinline"].b == (name not in regions), name
    for a, b in zip(eager, co):
        np.testing.assert_array_equal(a, b)


def read_then_written(loop, n: int = 40) -> tuple[list, np.ndarray]:
    """A Dense call (a region, its F inlined into the segment) reads the kernel; the kernel is
    written next, and the call's value reaches Python only through an op issued after the write:
    the call, the write and the read land in one segment."""
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(4, kernel_initializer="ones", use_bias=False)
    x = tf.ones((2, 3))
    layer(x)
    out = []
    for _ in loop(range(n)):
        y = layer(x)
        layer.kernel.value.assign_add(tf.ones((3, 4)))
        out.append(float((y * 1.0)[0, 0]))
    return out, layer.kernel.numpy()


def test_a_write_after_an_inlined_region_call_waits_for_the_calls_reads():
    # F orders its own effects (no automatic control dependencies): its reads are control
    # outputs, so once inlined, a write the segment orders after the call waits for them (without
    # that, 78-90 of 100 iterations read the kernel already written, one increment too high)
    eager = read_then_written(lambda it: it)
    with Terra(compile_after=1) as terra:
        co = read_then_written(terra.loop)
    assert_coexecuted(terra, at_least=0.8)
    assert terra.compiled_segments >= 1
    assert any(functions.confirmed(op.op_type)  # the region's call ran in a compiled segment
               for segment in terra.programs for op in segment.ops)
    assert co[0] == eager[0] and np.array_equal(co[1], eager[1])


def test_a_call_op_made_directly_is_the_generated_wrappers():
    """``lower._function_rule`` makes a function's call op itself (the generated wrapper's Python
    checks cost most of a compile of region calls): the op, its attrs and its values are the
    wrapper's, and eager's."""
    from tensorflow.python.ops import gen_functional_ops

    from terra_nb.coexec.lower import Segment, SegmentOp, compile_segment

    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    f = tf.function(lambda x: (tf.matmul(x, v), x + 1.0))
    x = tf.constant([[1.0, 0.5], [0.25, 2.0]])
    eager = f(x)
    name = f.get_concrete_function(x).name.decode()
    config = b"\x10\x01"  # a config_proto its eager call could have had
    segment = Segment(
        ops=(SegmentOp(0, name, (("config_proto", config), ("executor_type", "")),
                       (("arg", 0, 0), ("var", 1, 0)), 2),),
        args=(("float32", (2, 2)),), returns=((0, 0), (0, 1)))
    compiled = compile_segment(segment, {1: v.handle})
    (call,) = [op for op in compiled.graph.get_operations() if op.name == "terra_node_0"]
    with tf.Graph().as_default():
        a = tf.compat.v1.placeholder(tf.float32, (2, 2))
        h = tf.compat.v1.placeholder(tf.resource, ())
        wrapped = gen_functional_ops.stateful_partitioned_call(
            [a, h], [tf.float32, tf.float32], call.get_attr("f").name, config_proto=config,
            executor_type="")[0].op
    assert call.type == wrapped.type == "StatefulPartitionedCall"
    assert call.node_def.attr == wrapped.node_def.attr
    for mine, theirs in zip(compiled(x), eager):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def summed_in_a_graph(add_n, n_terms: int, draws: int = 400) -> int:
    """How many of ``draws`` sums of ``n_terms`` float32 terms, built by ``add_n`` in a compiled
    function (the first two terms its arguments, the rest made inside it), differ from eager's
    ``AddN`` of the same terms."""
    from terra_nb.coexec.function_call import FunctionCall

    def body(*xs):
        return add_n([*xs[:2], *(x * 1.0 for x in xs[2:])])

    spec = [tf.TensorSpec([3], tf.float32)] * n_terms
    compiled = FunctionCall(tf.function(body, autograph=False).get_concrete_function(*spec))
    rng = np.random.default_rng(n_terms)
    differ = 0
    for _ in range(draws):
        xs = [tf.constant(rng.normal(size=3) * 10.0 ** rng.integers(-3, 3), tf.float32)
              for _ in range(n_terms)]
        eager = tf.raw_ops.AddN(inputs=xs).numpy()
        differ += not np.array_equal(compiled(*xs)[0].numpy(), eager)
    return differ


@pytest.mark.parametrize("n_terms", [5, 11, 17])
def test_a_graph_sums_its_terms_in_eagers_order(n_terms):
    from terra_nb.coexec.graph_sums import add_n

    # TensorFlow's own AddN in the same graph does not (the test would fail without graph_sums)
    assert summed_in_a_graph(lambda xs: tf.raw_ops.AddN(inputs=xs), n_terms) > 0
    assert summed_in_a_graph(add_n, n_terms) == 0


def test_a_graph_sum_refuses_unequal_shapes_as_addn_does():
    from terra_nb.coexec.graph_sums import add_n

    spec = [tf.TensorSpec(None, tf.float32)] * 3
    f = tf.function(lambda a, b, c: add_n([a, b, c]), autograph=False).get_concrete_function(*spec)
    with pytest.raises(tf.errors.InvalidArgumentError):
        f(tf.ones([3]), tf.ones([1]), tf.ones([3]))


def four_calls_and_a_penalty(loop, n: int = 30) -> list:
    """A model called on four batches and its weight penalty written out: every weight's gradient
    is an ``AddN`` of five terms, two of them the arguments of the compiled segment that sums."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)
    x = np.random.default_rng(0).normal(size=(64, 32)).astype("float32")
    out = []
    for i in loop(range(n)):
        a, b = x[(i % 4) * 16:(i % 4) * 16 + 16], x[::4]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(a) ** 2) + tf.reduce_mean((model(b) - 1.0) ** 2) \
                + tf.reduce_mean(model(a * 2.0)) + tf.reduce_mean(model(b + 1.0))
            loss += 1e-3 * tf.add_n([tf.reduce_sum(w ** 2) for w in model.weights])
        grads = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights))
        out.append((float(loss), grads))  # the gradients read at the end
    return [[loss] + [g.numpy() for g in grads] for loss, grads in out] + \
        [[v.numpy() for v in model.weights]]


@pytest.mark.parametrize("regions", [False, True])
def test_gradients_summed_in_compiled_segments_keep_eager_bits(regions):
    # without graph_sums: the last bias gradient 1 ulp off eager from the fourth step
    eager = four_calls_and_a_penalty(lambda it: it)
    with Terra(regions=regions, compile_after=1) as terra:
        co = four_calls_and_a_penalty(terra.loop)
    assert_coexecuted(terra, last=3)
    assert terra.compiled_segments >= 1 and bool(terra.regions.rows) == regions
    assert any(op.op_type == "AddN" for segment in terra.programs for op in segment.ops)
    for mine, theirs in zip(co, eager):
        for a, b in zip(mine, theirs):
            np.testing.assert_array_equal(a, b)
