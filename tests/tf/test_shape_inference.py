"""Programs around shape inference for new calls, eager interpretation of segments
seen once, readiness by known calls and the switch to eager of loops whose path never repeats
each compared against plain eager execution.

The first five were bugs found by that review (now fixed); the others pin down risky cases.
Each also asserts what ran (what_ran.py): a case about a new shape co-executes every iteration
after the two traced ones, so the new shapes are answered in co-execution, not traced.
"""

import signal
import threading
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.coexec import compile_policy
from terra_nb.coexec import graph_runner as runners

VARIANTS = {
    "coexec": {"mode": "coexec"},
    "compile-at-once": {"mode": "coexec", "compile_after": 1},
    "never-compile": {"mode": "coexec", "compile_after": 10**9},
    "lazy": {"mode": "lazy"},
}


def graph_threads():
    return [t for t in threading.enumerate() if t.name.startswith("terra-graph-")]


def plain_values(x):
    if isinstance(x, tf.Variable) or tf.is_tensor(x):
        return x.numpy().tolist()
    if isinstance(x, (list, tuple)):
        return [plain_values(e) for e in x]
    return x


def both(body, setup, n=8, **options):
    """``body(i, *state)`` run n times plainly and under Terra(**options), each from a fresh
    ``setup()``; returns (outputs, final state) of each run and the Terra. An exception ends
    the run's outputs with its type name."""

    def run(loop):
        state, out = setup(), []
        try:
            for i in loop(range(n)):
                out.append(plain_values(body(i, *state)))
        except Exception as error:  # noqa: BLE001 (compared with eager's)
            out.append(("raised", type(error).__name__))
        return out, [plain_values(s) for s in state]

    plain = run(lambda it: it)
    with Terra(**options) as terra:
        co = run(terra.loop)
    assert not graph_threads()
    return plain, co, terra


def phases(terra):
    return [s.phase for s in terra.stats]


# -- bugs -----------------------------------------------------------------------------------


def test_a_numpy_operand_of_a_new_shape_keeps_its_shape():
    """A call known but for the shape of a numpy operand is inferred with the numpy operand's
    shape taken from the sibling call (shapes.input_specs): ``v - np.ones((5, 1))`` is answered
    with shape (8, 1) (eager: (5, 1)), then the GraphRunner raises a TerraError."""
    sizes = [8, 8, 8, 5, 3, 8]

    def body(i, v):
        y = v * 1.0 - np.ones((sizes[i], 1), np.float32)
        return y.shape.as_list(), float(tf.reduce_sum(y))

    plain, co, terra = both(body, lambda: (tf.Variable(tf.ones((1, 1))),), n=len(sizes))
    assert co == plain
    assert_coexecuted(terra, last=4)  # sizes 5 and 3 (iterations 3 and 4) co-executed


def test_a_variable_whose_shape_grows_is_read_with_its_shape():
    """A variable of shape (None, 2) grows each iteration. Every call has a sibling, so the loop
    co-executes (before this change it stayed in tracing), but ReadVariableOp's signature holds
    the variable, not its shape: the read is answered with the traced shape and the GraphRunner
    raises 'op output shape (4, 2) differs from the traced (1, 2)'."""

    def body(i, buf):
        buf.assign(tf.pad(buf * 1.0, [[0, 1], [0, 0]], constant_values=float(i)))
        return float(tf.reduce_sum(buf))

    def setup():
        return (tf.Variable(tf.zeros((1, 2)), shape=tf.TensorShape([None, 2])),)

    plain, co, terra = both(body, setup)
    assert co == plain
    # A read of a variable whose shape may change runs for real, and so does every op on what
    # it returns: here that is every op, so the loop co-executes with nothing for the graph
    # (the plan "none"): its phase says eager, no graph work. Iteration 1's pad value (1.0) was
    # a new call, so 2 still traced.
    assert phases(terra) == ["tracing"] * 3 + ["eager"] * 5
    assert_coexecuted(terra, last=5, plan="none")


def test_a_non_utf8_string_attr_keeps_its_bytes():
    """Pre-existing: attrs._plain turns bytes that are not UTF-8 into their hex text, so the
    segment (compiled or interpreted) joins with separator 'ff' instead of b'\\xff'."""

    def body(i, v):
        return tf.strings.join([tf.strings.as_string(v * 1.0), "a"], separator=b"\xff")

    plain, co, terra = both(body, lambda: (tf.Variable([1.0, 2.0]),), n=4)
    assert "coexec" in phases(terra)
    assert co == plain
    assert_coexecuted(terra, last=2)


def test_a_segment_tensorflow_cannot_compile_runs_op_by_op(monkeypatch):
    """Pre-existing in the compiled path: the scalar
    shape argument of RaggedTensorToTensor (-1) becomes a function argument of unknown value,
    and graph construction raises 'Received a shape scalar with unknown static value' (eager
    and the interpreted first run are fine)."""

    def body(i, v):
        return tf.RaggedTensor.from_row_splits(v * 1.0, [0, 2, 6]).to_tensor()

    # compiles cost nothing: each segment is compiled at its second sight (compile_after)
    monkeypatch.setattr(compile_policy, "COMPILE_BASE_S", 0.0)
    monkeypatch.setattr(compile_policy, "COMPILE_PER_OP_S", 0.0)
    plain, co, terra = both(body, lambda: (tf.Variable(tf.range(6.0)),), n=4)
    assert co == plain
    assert_coexecuted(terra, last=2)
    # the segment ran op by op both times: first by choice (compile_after), then because its
    # compilation, tried on the second sight, failed: nothing compiled
    assert terra.compiled_segments == 0 and terra.runs_op_by_op == 2


def test_the_concat_gradient_through_placeholders():
    """Pre-existing: the gradient of ConcatV2 calls pywrap_tfe.TFE_Py_TensorShapeSlice on the
    op's inputs, which must be EagerTensors: tape.gradient raises TypeError 'Expected a list of
    EagerTensors but element 0 has type "Placeholder"' in the first co-executed iteration."""

    def body(i, v):
        with tf.GradientTape() as tape:
            s = tf.concat([v * 1.0, v * 2.0], axis=0)
            loss = tf.reduce_sum(s * s)
        v.assign_sub(0.001 * tape.gradient(loss, v))
        return float(loss)

    plain, co, terra = both(body, lambda: (tf.Variable([1.0, 2.0]),), n=4)
    assert co == plain and "coexec" in phases(terra)
    assert_coexecuted(terra, last=2)


# -- risky cases that equal eager -----------------------------------------------------------


def _matrix():
    return (tf.Variable(tf.reshape(tf.range(24.0), (4, 6))),)


SHAPE_CASES = {
    "reshape_minus_one": lambda i, v: tf.reduce_sum(tf.reshape(v[: i % 4 + 1] * 1.0, [-1, 2]), 0),
    "tile_new_multiples": lambda i, v: tf.tile(v[:1] * 1.0, [i % 4 + 1, 1]),
    "gather_new_index_shape": lambda i, v: tf.gather(v * 1.0, tf.zeros((i % 3 + 1, 2), tf.int32)),
    "stack_of_a_growing_list": lambda i, v: tf.stack([v[0] * float(k) for k in range(i % 4 + 2)]),
    "one_hot_new_depth": lambda i, v: tf.one_hot(tf.cast(v[0, :2], tf.int32), i + 3) * v[0, 0],
    "range_new_limit": lambda i, v: tf.range(i + 2, dtype=tf.float32) * v[0, 1],
    "split_of_a_new_size": lambda i, v: tf.split(v[:, : 2 * (i % 3 + 1)] * 1.0, 2, axis=1),
    "unstack_of_a_new_size": lambda i, v: tf.unstack(v[: i % 4 + 1] * 1.0),  # Unpack's num
    "split_into_a_new_count": lambda i, v: tf.split(v * 1.0, [1, 2, 3][i % 3], axis=1),
    "image_resize_new_size": lambda i, v: tf.image.resize(
        tf.reshape(v * 1.0, (1, 4, 6, 1)), (i % 3 + 2, 3)
    ),
    "image_flip_new_height": lambda i, v: tf.image.flip_left_right(
        tf.reshape(v[: i % 4 + 1] * 1.0, (1, -1, 6, 1))
    ),
}


@pytest.mark.parametrize("case", list(SHAPE_CASES))
def test_new_shapes_equal_eager(case):
    plain, co, terra = both(SHAPE_CASES[case], _matrix)
    assert co == plain and "coexec" in phases(terra)
    assert_coexecuted(terra, last=6)  # every new shape from iteration 2 on, co-executed


def _image():
    values = tf.reshape(tf.range(2 * 6 * 6 * 3, dtype=tf.float32) / 100.0, (2, 6, 6, 3))
    return (tf.Variable(values),)


K = tf.ones((3, 3, 3, 2)) * 0.1
ATTR_CASES = {  # list(int), string, shape with None, float, bool, list(type) attrs
    "conv2d_explicit_padding": lambda x: tf.nn.conv2d(
        x, K, strides=1, padding=[[0, 0], [1, 1], [2, 0], [0, 0]]
    ),
    "fused_batch_norm": lambda x: tf.compat.v1.nn.fused_batch_norm(
        x, tf.ones(3), tf.zeros(3), epsilon=0.01, is_training=True
    )[0],
    "ensure_shape_none_dims": lambda x: tf.ensure_shape(x, [None, 6, None, 3]),
    "fake_quant": lambda x: tf.quantization.fake_quant_with_min_max_args(
        x, min=-0.5, max=1.5, num_bits=6, narrow_range=True
    ),
    "top_k_unsorted": lambda x: tf.math.top_k(tf.reshape(x, [-1]), 3, sorted=False)[1],
    "cumsum_exclusive_reverse": lambda x: tf.math.cumsum(x, axis=2, exclusive=True, reverse=True),
    "identity_n": lambda x: tf.identity_n([x, tf.cast(x, tf.int32)])[1],
    "bitcast": lambda x: tf.bitcast(x, tf.int32),
    "leaky_relu_numpy_alpha": lambda x: tf.nn.leaky_relu(x - 1.0, alpha=np.float32(0.3)),
    "reduce_numpy_bool_keepdims": lambda x: tf.reduce_sum(x, axis=1, keepdims=np.bool_(True)),
    "static_regex_replace": lambda x: tf.raw_ops.StaticRegexReplace(
        input=tf.strings.as_string(x[0, 0]), pattern="0+", rewrite="Z", replace_global=False
    ),
}


@pytest.mark.parametrize("case", list(ATTR_CASES))
def test_interpreted_attrs_equal_eager(case):
    """Every segment is run eagerly, op by op, from normalised attrs (never compiled)."""
    op = ATTR_CASES[case]
    plain, co, terra = both(lambda i, x: op(x * 1.0), _image, n=4, compile_after=10**9)
    assert co == plain and "coexec" in phases(terra) and terra.compiled_segments == 0
    assert_coexecuted(terra, last=2)


@pytest.mark.parametrize("variant", ["coexec", "never-compile"])
def test_gradient_through_a_stack_of_a_growing_list(variant):
    """Pack and AddN answered by inference (N from the new list length) under a tape."""

    def body(i, v):
        with tf.GradientTape() as tape:
            xs = [v * float(k + 1) for k in range(i % 5 + 2)]
            loss = tf.reduce_sum(tf.stack(xs) ** 2) + tf.reduce_sum(tf.add_n(xs))
        g = tape.gradient(loss, v)
        v.assign_sub(0.001 * g)
        return float(loss), g

    plain, co, terra = both(body, lambda: (tf.Variable([1.0, 2.0]),), n=9, **VARIANTS[variant])
    assert co == plain and "coexec" in phases(terra)
    assert_coexecuted(terra, last=7)  # the new lengths from iteration 2 on, by inference


def test_gradient_through_tile_and_reshape_of_new_sizes():
    def body(i, v):
        with tf.GradientTape() as tape:
            tiled = tf.tile(v * 2.0, [i % 4 + 1])
            loss = tf.reduce_sum(tiled**2) + tf.reduce_sum(tf.reshape(tiled, [-1, 2]))
        g = tape.gradient(loss, v)
        v.assign_sub(0.01 * g)
        return float(loss), g

    plain, co, terra = both(body, lambda: (tf.Variable([1.0, 2.0]),), n=9)
    assert co == plain and phases(terra)[2:] == ["coexec"] * 7
    assert_coexecuted(terra, last=7)


@pytest.mark.parametrize("variant", ["coexec", "never-compile"])
def test_keras_smaller_last_batch_with_batchnorm_and_dropout(variant):
    """The batch of 5 after batches of 8 co-executes by inference. (A Dense bias right before
    BatchNormalization has a gradient that is rounding noise, which Adam blows up to lr-sized
    steps: compiled and eager rounding differ there, so that layer has no bias.)"""
    x = np.random.RandomState(0).randn(21, 4).astype("float32")
    y = np.random.RandomState(1).randn(21, 1).astype("float32")
    batches = [(x[j : j + 8], y[j : j + 8]) for j in range(0, 21, 8)] * 3

    def run(loop):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input((4,)), keras.layers.Dense(8, use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.3), keras.layers.Dense(1),
        ])
        opt = keras.optimizers.Adam(0.01)
        losses = []
        for xb, yb in loop(batches):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(xb, training=True) - tf.constant(yb)) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            losses.append(float(loss))
        return losses, [w.numpy() for w in model.variables + opt.variables]

    plain_losses, plain_state = run(lambda it: it)
    # op by op: the model's ops are answered by inference (a region is keyed by batch size)
    with Terra(**VARIANTS[variant], regions=False) as terra:
        losses, state = run(terra.loop)
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5)
    for a, b in zip(state, plain_state):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert phases(terra)[2:] == ["coexec"] * 7 and not terra.explain()
    assert_coexecuted(terra, last=7)  # the batches of 5 (iterations 2, 5, 8) co-executed


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_failing_op_in_a_segment_read_inside_try(variant):
    def body(i, v, w):
        try:
            y = tf.gather(v * 1.0, i % 5)  # 3 and 4 are out of range
            w.assign_add(1.0)
            z = float(y)
        except tf.errors.InvalidArgumentError:
            return "caught"
        w.assign_add(10.0)
        return z

    plain, co, terra = both(
        body, lambda: (tf.Variable([1.0, 2.0, 3.0]), tf.Variable(0.0)), n=10, **VARIANTS[variant]
    )
    assert co == plain and "coexec" in phases(terra)
    assert_coexecuted(terra, last=8)  # the failing reads (3, 4, 8, 9) caught, co-executed


def test_interrupt_while_a_segment_is_interpreted(monkeypatch):
    """Ctrl-C inside an interpreted segment: the segment (ops Python issued) completes, the
    KeyboardInterrupt surfaces at the read that flushed it, as in eager at that line."""
    run_segment, calls = runners.run_segment, []

    def interrupted(segment, args, handles, *timings):
        calls.append(1)
        if len(calls) == 4:
            signal.raise_signal(signal.SIGINT)
        return run_segment(segment, args, handles, *timings)

    monkeypatch.setattr(runners, "run_segment", interrupted)
    v, out = tf.Variable(0.0), []
    with pytest.raises(KeyboardInterrupt), Terra(compile_after=10**9) as terra:
        for _ in terra.loop(range(8)):
            v.assign_add(1.0)
            out.append(float(v * 2.0))
    assert out == [2.0, 4.0, 6.0, 8.0, 10.0] and float(v) == 6.0
    assert phases(terra) == ["tracing"] * 2 + ["coexec"] * 4 and not graph_threads()
    assert_coexecuted(terra, last=4)


@pytest.mark.parametrize("variant", ["coexec", "lazy"])
def test_switch_to_eager_keeps_a_tape_and_placeholders_across_iterations(variant):
    """A loop whose path never repeats goes eager mid-loop; a tape opened before the loop, the
    per-iteration sums Python held (placeholders) and the variable still equal eager's."""

    def run(loop):
        v, w, held = tf.Variable(tf.fill((3, 3), 0.5)), tf.Variable(1.0), []
        with tf.GradientTape() as tape:
            for trips in loop(range(1, 16)):
                h = v * w
                for _ in range(trips):
                    h = tf.tanh(h) * 1.1
                held.append(tf.reduce_sum(h))
                v.assign(h * 0.9)
            total = tf.add_n(held)
        return [float(x) for x in held], float(tape.gradient(total, w)), v.numpy().tolist()

    plain = run(lambda it: it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with Terra(**VARIANTS[variant]) as terra:
            co = run(terra.loop)
    assert co == plain
    assert phases(terra) == ["tracing"] * 2 + ["coexec"] * 10 + ["eager"] * 3
    assert not graph_threads()
    assert_coexecuted(terra, at_least=10 / 15)  # in segments, before going eager
    assert not terra.explain()
