"""Op capture: every eager op once, complete attrs, fetches, bypass, threads, clean uninstall."""

import gc
import threading

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context, execute
from tensorflow.python.framework import ops

from terra_nb import capture
from terra_nb.capture.location import LocationTable
from terra_nb.capture.recorder import TraceRecorder


class ListSink:
    intercepts = False

    def __init__(self):
        self.ops, self.fetches = [], []

    def on_op(self, op_name, args, attrs, outputs, frame):
        self.ops.append(op_name.decode() if isinstance(op_name, bytes) else op_name)

    def on_fetch(self, tensor):
        self.fetches.append(tensor)

    def on_fast_fallback(self, op_name, args, frame):
        pass


def record(fn):
    """Run fn under a TraceRecorder rooted at this frame; return the trace."""
    import sys

    recorder = TraceRecorder(LocationTable())
    recorder.begin(sys._getframe(0))
    with capture.capturing(recorder):
        fn()
    return recorder.finish(0)


def test_uninstall_restores_tensorflow_exactly():
    for _ in range(3):  # finalizers can free more cycles
        gc.collect()  # placeholders of earlier co-executed tests keep the hooks until collected
    assert not capture.is_installed()
    before = (
        pywrap_tfe.TFE_Py_FastPathExecute,
        execute.execute,
        execute.quick_execute,
        ops._EagerTensorBase.__dict__["_numpy"],
    )
    with capture.capturing(ListSink()):
        with capture.capturing(ListSink()):
            assert pywrap_tfe.TFE_Py_FastPathExecute is not before[0]
        assert capture.is_installed()
    after = (
        pywrap_tfe.TFE_Py_FastPathExecute,
        execute.execute,
        execute.quick_execute,
        ops._EagerTensorBase.__dict__["_numpy"],
    )
    assert after == before
    assert not capture.is_installed()


def test_a_wrapper_installed_over_the_hooks_stays_when_they_go():
    """The hooks go when the last placeholder is collected, at any moment: a wrapper installed
    on top of them meanwhile (a profiler's, the user's) stays in place, and still runs ops."""
    for _ in range(3):
        gc.collect()
    assert not capture.is_installed()
    calls = []
    with capture.capturing(ListSink()):
        hooked = execute.execute

        def wrapper(*args, **kwargs):
            calls.append(args[0])
            return hooked(*args, **kwargs)

        execute.execute = wrapper
    try:
        assert not capture.is_installed() and execute.execute is wrapper
        assert pywrap_tfe.TFE_Py_FastPathExecute is not hooked  # the others were restored
        out = execute.execute("AddV2", 1, [tf.constant(1.0), tf.constant(2.0)],
                              ("T", tf.float32.as_datatype_enum), context.context())
        assert calls == ["AddV2"] and float(out[0]) == 3.0
    finally:
        execute.execute = capture.hooks._originals["execute"]


def test_fast_and_slow_path_ops_recorded_once():
    sink = ListSink()
    a = tf.constant([[1.0, 2.0]])
    v = keras.Variable(np.ones((2,), "float32"))
    with capture.capturing(sink):
        b = a + 1.0  # fast path
        c = tf.nn.bias_add(b, v)  # a Keras variable input: fast path falls back to the slow path
    assert sink.ops == ["AddV2", "ReadVariableOp", "BiasAdd"] or sink.ops == ["AddV2", "BiasAdd"]
    assert sink.ops.count("BiasAdd") == 1
    np.testing.assert_allclose(c.numpy(), [[3.0, 4.0]])


def test_capture_is_off_outside_and_in_bypass_and_other_threads():
    sink = ListSink()
    a = tf.constant(1.0)
    with capture.capturing(sink):
        with capture.bypass():
            _ = a * 2.0
        thread = threading.Thread(target=lambda: a * 3.0)
        thread.start()
        thread.join()
        _ = a - 1.0
    _ = a + 5.0
    assert sink.ops == ["Sub"]


def test_fetches_recorded_for_each_materialisation():
    def program():
        x = tf.constant([1.0, 2.0]) * 2.0
        y = tf.reduce_sum(x)
        float(y)
        bool(y > 0)
        x.numpy()
        np.asarray(x)
        f"{y:.2f}"
        print(x, end="\r")

    trace = record(program)
    fetched = [(op.op_type, op.fetched) for op in trace.ops if op.fetched]
    assert fetched == [("Mul", (0,)), ("Sum", (0,)), ("Greater", (0,))]


def test_attrs_complete_and_equal_on_both_paths():
    x = tf.constant([[1.0, -2.0]])
    w = tf.constant([[1.0], [1.0]])

    def fast():
        tf.matmul(x, w)

    def slow():
        execute.execute(
            b"MatMul",
            1,
            [x, w],
            (
                "transpose_a",
                False,
                "transpose_b",
                False,
                "T",
                tf.float32.as_datatype_enum,
                "grad_a",
                False,
                "grad_b",
                False,
            ),
            tf.compat.v1.get_default_graph()
            and __import__("tensorflow.python.eager.context", fromlist=["context"]).context(),
        )

    (fast_op,) = record(fast).ops
    (slow_op,) = record(slow).ops
    assert fast_op.attrs == slow_op.attrs
    assert dict(fast_op.attrs)["T"] == "float32"
    assert dict(fast_op.attrs)["transpose_a"] is False


def test_lineage_sources():
    v = tf.Variable([1.0, 2.0])
    outside = tf.constant([3.0, 4.0])

    def program():
        y = tf.raw_ops.AddV2(x=v.read_value(), y=np.array([1.0, 1.0], "float32"))
        z = tf.raw_ops.Mul(x=y, y=2.0) + outside
        return z

    trace = record(program)
    kinds = [[s.kind for s in op.inputs] for op in trace.ops]
    assert [op.op_type for op in trace.ops] == [
        "ReadVariableOp",
        "Identity",
        "AddV2",
        "Mul",
        "AddV2",
    ]
    assert kinds == [["var"], ["op"], ["op", "feed"], ["op", "feed"], ["op", "feed"]]
    assert [op.inputs[-1].detail for op in trace.ops[2:]] == ["numpy", "python", "tensor"]
    assert trace.ops[-1].outputs[0].shape == (2,)


def test_keras_layers_losses_optimizers_gradients_random_captured():
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dropout(0.5), keras.layers.Dense(1)]
    )
    opt = keras.optimizers.Adam(0.01)
    x = np.ones((5, 3), "float32")
    y = np.zeros((5, 1), "float32")
    loss_fn = keras.losses.MeanSquaredError()

    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        tf.random.uniform((2,))

    step()  # build optimizer slots outside the capture
    types = {op.op_type for op in record(step).ops}
    assert {"MatMul", "BiasAdd", "ReadVariableOp"} <= types  # layers
    assert "SquaredDifference" in types or "Square" in types  # loss
    assert "BiasAddGrad" in types  # backward ops run by tape.gradient
    assert {"AssignVariableOp", "AssignSubVariableOp"} & types  # optimizer update
    assert any("Random" in t for t in types)  # dropout and tf.random


def test_a_hooked_call_in_flight_survives_the_hooks_removal():
    """A hook already entered (another thread, or a garbage-collection callback that removes the
    hooks mid-call) still reaches TensorFlow after removal: it once raised ``KeyError('fast')``."""
    with capture.installed():
        fast, slow = pywrap_tfe.TFE_Py_FastPathExecute, execute.quick_execute
    assert not capture.is_installed() and fast is not pywrap_tfe.TFE_Py_FastPathExecute
    from tensorflow.python.eager import context

    ctx = context.context()
    a = tf.constant([1.0, 2.0])
    out = fast(ctx, "AddV2", None, a, a)
    assert out.numpy().tolist() == [2.0, 4.0]
    out = slow("AddV2", 1, [a, a], ("T", tf.float32.as_datatype_enum), ctx)
    assert out[0].numpy().tolist() == [2.0, 4.0]


def test_hooks_removed_by_a_collection_during_eager_ops():
    """Placeholders kept only by a reference cycle are collected during later ordinary ops; the
    hooks go with them and those ops still run."""
    from terra_nb import Terra

    v = tf.Variable(1.0)
    with Terra() as terra:
        for _ in terra.loop(range(5)):
            cycle = {"t": v * 2.0}
            cycle["self"] = cycle
            v.assign_add(1.0)
    assert "coexec" in [s.phase for s in terra.stats]
    del cycle
    old = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        for _ in range(100):
            assert float(tf.reduce_sum(tf.constant([1.0, 2.0]) * 3.0)) == 9.0
    finally:
        gc.set_threshold(*old)
    gc.collect()
    assert not capture.is_installed()


def test_eager_constant_is_tf_constant_without_an_op():
    """What the engine makes of fed numpy batches and Python numbers: the tensor tf.constant
    makes (dtype, shape, bits; a cast where asked; a copy, not a view of the array), and no op
    reaches the hooks."""
    batch = np.random.default_rng(0).normal(size=(4, 3))
    values = [(batch, None), (batch, tf.float32), (batch[:, 1], "float32"),
              (np.float32(2.5), None), ([3, 1], tf.int32), (7, tf.int64), (0.1, None)]
    sink = ListSink()
    with capture.capturing(sink):
        made = [capture.eager_constant(v, dtype) for v, dtype in values]
    assert sink.ops == []
    for t, (v, dtype) in zip(made, values):
        want = tf.constant(v, dtype)
        assert type(t) is type(want) and t.dtype == want.dtype and t.shape == want.shape
        assert t.numpy().tobytes() == want.numpy().tobytes()
    batch[0, 0] = 99.0
    assert made[0].numpy()[0, 0] != 99.0
