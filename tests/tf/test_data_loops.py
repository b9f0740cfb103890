"""Nested data loops: the usual epoch loop over a ``tf.data`` pipeline co-executes.

A user expects ``for epoch in range(E): for x, y in dataset: ...`` under terra-nb to give eager's
weights and metrics, to co-execute from its third epoch (a new iterator every epoch is no new
path), and to record the inner loop's real trip count even though the backward pass and the
optimizer run between its trips. A loop that stays in tracing says why.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from terra_nb import Terra

EPOCHS, BATCHES = 5, 10


def train(loop, program="segments"):
    """Train a small MLP for ``EPOCHS`` epochs over a shuffled, mapped, batched, prefetched
    dataset; ``loop`` wraps the epoch range. Returns per-epoch accuracies and the weights."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3)])
    opt = keras.optimizers.Adam(1e-2)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    metric = keras.metrics.SparseCategoricalAccuracy()
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((16 * BATCHES, 8)).astype("float32")
    ys = rng.integers(0, 3, 16 * BATCHES)
    ds = (tf.data.Dataset.from_tensor_slices((xs, ys)).shuffle(160, seed=1)
          .map(lambda x, y: (x * 2.0, y)).batch(16).prefetch(2))
    accuracies = []
    for _ in loop(range(EPOCHS)):
        metric.reset_state()
        for x, y in ds:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            metric.update_state(y, model(x))
        accuracies.append(float(metric.result()))
    return accuracies, [w.numpy() for w in model.weights + opt.variables]


@pytest.mark.parametrize(("program", "learning"), [("segments", 0), ("whole", 1)])
def test_epoch_loop_over_tf_data_coexecutes_from_epoch_three(program, learning):
    """In segments from epoch 3; the whole program first learns, with one fallback, that a
    value (the last batch's loss) outlives the epoch."""
    plain_acc, plain_w = train(lambda it: it)
    with Terra(program=program) as terra:
        co_acc, co_w = train(terra.loop)
    assert co_acc == plain_acc
    for a, b in zip(plain_w, co_w):
        np.testing.assert_array_equal(a, b)
    phases = [s.phase for s in terra.stats]
    assert phases[2 + learning :] == ["coexec"] * (EPOCHS - 2 - learning), (phases,
                                                                           terra.explain())
    assert all("outlives" in f.reason for f in terra.explain())
    assert (terra.program is not None) is (program == "whole")
    loops = [n for n in terra.graph.nodes if n.kind == "loop"]
    assert [sorted(n.trip_counts) for n in loops] == [[BATCHES]]


def test_a_loop_still_tracing_when_covered_says_why():
    """A new variable every iteration: the TraceGraph covers the iteration, yet the reads of a
    variable never seen cannot be answered; explain() names the op and line."""
    out_plain, out_co = [], []
    for i in range(4):
        out_plain.append(float(tf.Variable(float(i)) * 2.0))
    with Terra() as terra:
        for i in terra.loop(range(4)):
            out_co.append(float(tf.Variable(float(i)) * 2.0))
    assert out_co == out_plain
    assert [s.phase for s in terra.stats] == ["tracing"] * 4
    notes = [f for f in terra.explain() if f.reason.startswith("still tracing")]
    assert notes and all("test_data_loops.py" in f.location for f in notes), terra.explain()


def test_a_loop_whose_attributes_change_every_iteration_says_why_it_still_traces():
    """An op whose attributes change every iteration (a precision from the loop's counter) is a
    new call each time, so the TraceGraph never covers an iteration; explain() said "no
    fallbacks" for such a loop. From the third traced iteration it names the op and line."""
    x = tf.constant([1.5, 2.25])
    out_plain = [tf.strings.as_string(x, precision=i).numpy().tolist() for i in range(5)]
    with Terra() as terra:
        out_co = [tf.strings.as_string(x, precision=i).numpy().tolist()
                  for i in terra.loop(range(5))]
    assert out_co == out_plain
    assert [s.phase for s in terra.stats] == ["tracing"] * 5
    said = [(f.iteration, f.reason, f.op_type) for f in terra.explain()]
    assert said == [(i, "still tracing: the iteration made a call not seen before (new "
                        "attributes)", "AsString") for i in (2, 3, 4)], said
    assert all("test_data_loops.py" in f.location for f in terra.explain())
