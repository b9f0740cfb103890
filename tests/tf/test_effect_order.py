"""What a compiled segment orders (``coexec/effect_order.py``): a write waits for the earlier ops
that can fail, not for those that cannot, and an unread op that cannot fail is pruned, while an
unread op that can fail still runs and stops the writes issued after it, as in eager."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.coexec.effect_order import cannot_fail
from terra_nb.coexec.lower import Segment, SegmentOp, compile_segment

F32 = (("T", tf.float32),)


def _graph_tensors():
    """(static float, float of unknown batch, int placeholder, ShapeN of the static float)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (4, 3))
        loose = tf.compat.v1.placeholder(tf.float32, (None, 3))
        sizes = tf.compat.v1.placeholder(tf.int32, (2,))
        shapes = tf.raw_ops.ShapeN(input=[x, x])[0]
    return x, loose, sizes, shapes


def test_an_op_cannot_fail_when_the_graph_knows_what_its_kernel_checks():
    x, loose, sizes, shapes = _graph_tensors()
    assert cannot_fail("Mul", [x, x])
    assert cannot_fail("Reshape", [x, shapes])  # sizes from the shapes of known values
    assert cannot_fail("Reshape", [x, np.array([3, 4], np.int32)])  # a constant's array
    assert not cannot_fail("Reshape", [x, sizes])  # sizes Python fed: may not fit
    assert not cannot_fail("Mul", [loose, loose])  # a shape not known
    assert not cannot_fail("GatherV2", [x, shapes, shapes])  # checks index values
    assert not cannot_fail("CheckNumerics", [x])


def test_an_op_on_tensor_lists_can_fail():
    """A TensorList is a variant scalar, its shape known, its length not: ``AddN`` of two lists
    fails when their lengths differ (review p09)."""
    graph = tf.Graph()
    with graph.as_default():
        size = tf.compat.v1.placeholder(tf.int32, ())
        lists = [tf.raw_ops.TensorListReserve(element_shape=[2], num_elements=n,
                                              element_dtype=tf.float32) for n in (3, size)]
    assert not cannot_fail("AddN", lists)


def _segment():
    """x * x, nobody reads it; reshape(x, sizes) with ``sizes`` from Python, nobody reads it;
    then v += x."""
    return Segment(
        ops=(
            SegmentOp(0, "Mul", F32, (("arg", 0, 0), ("arg", 0, 0)), 1),
            SegmentOp(1, "Reshape", F32 + (("Tshape", tf.int32),),
                      (("arg", 0, 0), ("arg", 1, 0)), 1),
            SegmentOp(2, "AssignAddVariableOp", (("dtype", tf.float32),),
                      (("var", 1, 0), ("arg", 0, 0)), 0),
        ),
        args=(("float32", (2, 2)), ("int32", (2,))),
        returns=(),
    )


def _reachable(function) -> set[str]:
    """The names of the ops a call of ``function`` runs (the rest is pruned)."""
    graph = function.graph
    todo = [t.op for t in function.outputs] + list(graph.control_outputs)
    seen: set[str] = set()
    while todo:
        op = todo.pop()
        if op.name not in seen:
            seen.add(op.name)
            todo += [t.op for t in op.inputs] + list(op.control_inputs)
    return seen


def test_an_unread_op_runs_when_it_can_fail_and_is_pruned_when_it_cannot():
    v = tf.Variable(tf.zeros((2, 2)))
    function = compile_segment(_segment(), {1: v.handle})
    control = {op.name: {c.name for c in op.control_inputs}
               for op in function.graph.get_operations()}
    assert control["terra_node_2"] == {"terra_node_1"}  # the write waits for the reshape only
    ran = _reachable(function)
    assert "terra_node_1" in ran and "terra_node_0" not in ran
    x = tf.ones((2, 2))
    function(x, tf.constant([4, 1]))
    np.testing.assert_array_equal(v.numpy(), np.ones((2, 2)))
    with pytest.raises(tf.errors.InvalidArgumentError):  # eager raises at the reshape ...
        function(x, tf.constant([3, 1]))
    np.testing.assert_array_equal(v.numpy(), np.ones((2, 2)))  # ... and adds nothing


def test_a_write_issued_before_a_failing_op_has_taken_effect():
    """w = x @ x @ x (slow), then a gather of Python-fed indices: when the gather fails, eager
    has assigned w, and so has the failed run. The gather runs after the write by construction
    (TensorFlow's executor also finishes the work that does not wait for a failed op, so the
    gather's failing first leaves the write done, too)."""
    mm = F32 + (("transpose_a", False), ("transpose_b", False), ("grad_a", False),
                ("grad_b", False))
    gather = (("Tparams", tf.float32), ("Tindices", tf.int32), ("Taxis", tf.int32),
              ("batch_dims", 0))
    segment = Segment(
        ops=(
            SegmentOp(0, "MatMul", mm, (("arg", 0, 0), ("arg", 0, 0)), 1),
            SegmentOp(1, "MatMul", mm, (("op", 0, 0), ("arg", 0, 0)), 1),
            SegmentOp(2, "AssignVariableOp", (("dtype", tf.float32), ("validate_shape", False)),
                      (("var", 1, 0), ("op", 1, 0)), 0),
            SegmentOp(3, "GatherV2", gather, (("arg", 1, 0), ("arg", 2, 0), ("arg", 3, 0)), 1),
        ),
        args=(("float32", (800, 800)), ("float32", (4,)), ("int32", (2,)), ("int32", ())),
        returns=(),
    )
    w = tf.Variable(tf.zeros((800, 800)))
    function = compile_segment(segment, {1: w.handle})
    x = tf.random.stateless_uniform((800, 800), (1, 2)) * 0.05
    with pytest.raises(tf.errors.InvalidArgumentError):
        function(x, tf.ones(4), tf.constant([1, 9]), tf.constant(0))
    np.testing.assert_array_equal(w.numpy(), (x @ x @ x).numpy())


def test_an_op_that_can_fail_runs_when_only_a_pruned_op_reads_it():
    """``gather_nd(v * 1.0, idx) * 2.0``, nobody reads the product, and no write follows in the
    segment (a read of another value ends it): the gather still runs, and fails as in eager
    (review p14: it was pruned with the product, and the loop went on)."""

    def program(loop):
        v = tf.Variable(tf.ones((4, 3)))
        sums = []
        try:
            for i in loop(range(40)):
                tf.gather_nd(v * 1.0, [[1], [2 if i < 39 else 9]]) * 2.0
                sums.append(float(tf.reduce_sum(v * 3.0)))
                v.assign_add(tf.ones((4, 3)))
        except tf.errors.InvalidArgumentError:
            sums.append(("raised", i))
        return sums, v.numpy()

    sums, v = program(lambda items: items)
    with Terra() as terra:
        got_sums, got_v = program(terra.loop)
    assert got_sums == sums and sums[-1] == ("raised", 39)
    np.testing.assert_array_equal(got_v, v)
    assert_coexecuted(terra, at_least=0.6)


def _cnn_fit(loop_options: dict | None):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((12, 12, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
        keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(3)])
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 12, 12, 3)).astype("float32"), rng.integers(0, 3, 64)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    if loop_options is None:
        history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
        return history.history, model.get_weights(), None
    with Terra(**loop_options) as terra:
        history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    return history.history, model.get_weights(), terra


def test_a_cnn_step_region_skips_the_gradient_of_its_input_image():
    """Eager's tape computes the first convolution's input gradient, which no one reads; the
    step's region does not run it, and its values are eager's, bit for bit."""
    history, weights, _ = _cnn_fit(None)
    got_history, got_weights, terra = _cnn_fit({})
    assert got_history == history
    for mine, theirs in zip(got_weights, weights):
        np.testing.assert_array_equal(mine, theirs)
    assert_coexecuted(terra, at_least=0.6)
    (step,) = [r for r in terra._interception.regions.table.values()
               if r.name.endswith(".train_step")]
    function = step.forward.cf
    backprops = [op for op in function.graph.get_operations()
                 if op.type == "Conv2DBackpropInput"]
    ran = _reachable(function)
    assert len(backprops) == 2 and [op.name in ran for op in backprops] == [True, False]


def gan_steps(loop, steps: int = 30):
    """A GAN step (adversarial review, adv14 r17): D's update, then the generator's loss through D,
    with noise from a ``tf.random.Generator``. The generator's loss reads D's weights after
    D's update."""
    keras.utils.set_random_seed(0)
    real = np.random.RandomState(17).randn(steps, 32, 2).astype("float32")
    g = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2)])
    d = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1)])
    og, od = keras.optimizers.Adam(2e-3), keras.optimizers.Adam(2e-3)
    noise = tf.random.Generator.from_seed(5)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    losses = []
    for i in loop(range(steps)):
        with tf.GradientTape() as tape:
            fake = g(noise.normal((32, 4)), training=True)
            d_real, d_fake = d(tf.constant(real[i]), training=True), d(fake, training=True)
            d_loss = bce(tf.ones_like(d_real), d_real) + bce(tf.zeros_like(d_fake), d_fake)
        od.apply_gradients(zip(tape.gradient(d_loss, d.trainable_variables),
                               d.trainable_variables))
        with tf.GradientTape() as tape:
            g_loss = bce(tf.ones_like(d_fake), d(g(noise.normal((32, 4)), training=True)))
        og.apply_gradients(zip(tape.gradient(g_loss, g.trainable_variables),
                               g.trainable_variables))
        losses.append(g_loss)
    return [float(x) for x in losses], [w.numpy() for w in d.weights + g.weights]


def test_a_call_fed_by_a_call_reads_variables_after_the_writes_before_both():
    """``d(g(z))`` after D's update, compiled: TensorFlow leaves out the control input of the
    ``d`` call on the ``g`` call, as its data input orders it; but both calls are inlined, and
    the inlined ``d`` read D's weights before the update (the review found the generator's loss
    of one step in 80 computed with D's weights before the step's update). Every call with
    control inputs waits on a no-op now, which inlining keeps."""
    eager_losses, eager_weights = gan_steps(lambda it: it)
    with Terra(compile_after=1) as terra:
        losses, weights = gan_steps(terra.loop)
    assert losses == eager_losses
    assert all(np.array_equal(a, b) for a, b in zip(weights, eager_weights))
    assert_coexecuted(terra, last=10)
    assert terra.compiled_segments >= 1
    ordered = []
    for fn in terra._engine.runner.graph._cache.values():
        for op in getattr(getattr(fn, "cf", None), "graph", tf.Graph()).get_operations():
            if op.type == "StatefulPartitionedCall" and "Sequential" in op.get_attr("f").name:
                ordered.append(any(c.type == "NoOp" for c in op.control_inputs))
    assert ordered and all(ordered[1:]), ordered  # every call after the first waits on a no-op
