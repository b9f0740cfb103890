"""Forward mode (``tf.autodiff.ForwardAccumulator``) gets eager's JVPs, and a gradient through a
JVP is eager's bit for bit (the closing review's G1 and G2).

- An accumulator computes each op's JVP as the op runs. An op answered with a placeholder ran
  later, in a graph no accumulator saw: when an iteration fell back in the middle of the
  accumulator's block (a new JVP function), the ops before the fallback had no tangent, and the
  JVP was wrong (a Keras model) or None (raw ops). Now, while one records, nothing is answered:
  the iteration leaves its plan at the first op under it, and explain() says so.
- An accumulator entered before the loop is counted too: every iteration runs for real.
- An op run for real on a placeholder under a tape (after such a fallback) was taped on the
  placeholder's value behind an identity link eager's tape lacks, which changed the order its
  gradients were summed in (an ulp apart). It now takes the slow path, which tapes the op on
  the placeholder itself.
Every test compares with eager bit for bit, with and without regions, and asserts what ran.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import compare
from what_ran import phases

from terra_nb.capture import forward_mode

MODES = {
    "regions": {"mode": "coexec", "regions": True},
    "no regions": {"mode": "coexec", "regions": False},
    "whole program": {"mode": "coexec", "regions": False, "program": "whole"},
}
X = np.arange(12, dtype="float32").reshape(4, 3) / 10.0


def small_model() -> keras.Model:
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(2)])


def flat(*values) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(v, dtype="float32")) for v in values])


def accumulator_each_step(loop, steps: int = 10):
    """A new accumulator each step; two model calls on one line, the loss on the next (a
    fallback at the second line left the first line's ops without tangents)."""
    model, x = small_model(), tf.constant(X)
    out = []
    for _ in loop(range(steps)):
        with tf.autodiff.ForwardAccumulator(primals=x, tangents=tf.ones((4, 3))) as acc:
            y = model(x); z = model(x * 2.0)  # noqa: E702 (one line, as the review's program)
            loss = tf.reduce_sum(y ** 2) + tf.reduce_sum(z)
        out.append(flat(acc.jvp(loss), acc.jvp(y), acc.jvp(z), loss))
    return out, [v.numpy() for v in model.weights]


def raw_ops(loop, steps: int = 10):
    """The same on raw ops over two variables (``acc.jvp(y)`` came back None)."""
    rng = np.random.default_rng(20)
    w1 = tf.Variable(rng.normal(size=(3, 4)).astype("float32"))
    w2 = tf.Variable(rng.normal(size=(4, 2)).astype("float32"))
    x = tf.constant(X)
    out = []
    for _ in loop(range(steps)):
        with tf.autodiff.ForwardAccumulator(primals=x, tangents=tf.ones((4, 3))) as acc:
            y = tf.matmul(tf.tanh(tf.matmul(x, w1)), w2); z = tf.matmul(tf.tanh(tf.matmul(x * 2.0, w1)), w2)  # noqa: E501, E702
            loss = tf.reduce_sum(y ** 2) + tf.reduce_sum(z)
        jvps = [acc.jvp(t) for t in (loss, y, z)]
        assert all(j is not None for j in jvps), "an accumulator lost a JVP"
        out.append(flat(*jvps, loss))
    return out, [w1.numpy(), w2.numpy()]


def step_then_jvp(loop, steps: int = 12):
    """A training step on a tape, then the model's JVP: the accumulator comes mid-iteration."""
    model, opt = small_model(), keras.optimizers.SGD(0.05)
    data = tf.constant(np.random.default_rng(3).normal(size=(16, 3)).astype("float32"))
    out = []
    for i in loop(range(steps)):
        a = data[(i % 4) * 4:(i % 4) * 4 + 4]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(a) ** 2)
        grads = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights))
        with tf.autodiff.ForwardAccumulator(primals=a, tangents=tf.ones((4, 3))) as acc:
            y = model(a)
            penalty = tf.reduce_sum(y ** 2)
        out.append(flat(acc.jvp(penalty), acc.jvp(y), loss))
    return out, [v.numpy() for v in model.weights]


def accumulator_around_the_loop(loop, steps: int = 8):
    """One accumulator entered before the loop."""
    model, x = small_model(), tf.constant(X)
    out = []
    with tf.autodiff.ForwardAccumulator(primals=x, tangents=tf.ones((4, 3))) as acc:
        for _ in loop(range(steps)):
            y = model(x); z = model(x * 2.0)  # noqa: E702
            loss = tf.reduce_sum(y ** 2) + tf.reduce_sum(z)
            out.append(flat(acc.jvp(loss), acc.jvp(y), loss))
    return out, [v.numpy() for v in model.weights]


def jvp_in_the_loss(loop, steps: int = 8):
    """Two model calls on a tape, a third under an accumulator inside it, and the JVP in the
    loss: the fallback iterations' kernel gradient was an ulp off."""
    model = small_model()
    data = tf.constant(np.random.default_rng(8).normal(size=(16, 3)).astype("float32"))
    out = []
    for i in loop(range(steps)):
        a = data[(i % 4) * 4:(i % 4) * 4 + 4]
        with tf.GradientTape() as tape:
            first = tf.reduce_sum(model(a) ** 2) + tf.reduce_sum(model(a + 1.0))
            with tf.autodiff.ForwardAccumulator(primals=a, tangents=tf.ones((4, 3))) as acc:
                y = model(a)
            loss = first + tf.reduce_sum(y) + 0.01 * tf.reduce_sum(acc.jvp(y) ** 2)
        grads = tape.gradient(loss, model.trainable_weights)
        out.append(flat(loss, *grads))
    return out, [v.numpy() for v in model.weights]


def assert_forward_mode_ran_for_real(terra, at: str) -> None:
    """Iterations fell back for the accumulator, each at an op of the line ``at`` (its first
    under the accumulator), and none co-executed under one."""
    falls = terra.explain()
    assert falls, phases(terra)
    for fall in falls:
        assert fall.reason == forward_mode.REASON and at in fall.location, str(fall)
    assert "coexec" not in phases(terra), phases(terra)


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
@pytest.mark.parametrize("program, at", [
    (accumulator_each_step, "y = model(x); z = model(x * 2.0)"),
    (raw_ops, "y = tf.matmul"),
    (step_then_jvp, "y = model(a)"),
    (jvp_in_the_loss, "y = model(a)"),
], ids=["each step", "raw ops", "after a step", "jvp in the loss"])
def test_an_accumulator_sees_every_op_as_eager(program, at, options):
    terra, _, _ = compare(program, options, at_least=0.0)
    assert_forward_mode_ran_for_real(terra, at)


def test_the_step_before_the_accumulator_still_coexecutes():
    # the fallback comes at the accumulator's first op: the training step before it was
    # answered with placeholders and ran in the graph, and its tape's gradient went through them
    terra, _, _ = compare(step_then_jvp, MODES["no regions"], at_least=0.0)
    falls = {f.iteration for f in terra.explain()}
    graph_work = {s.of_iteration for s in terra.spans if s.runner == "graph" and s.kind == "exec"}
    assert len(falls) >= 3 and falls <= graph_work, (falls, graph_work, phases(terra))


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
def test_an_accumulator_entered_before_the_loop(options):
    terra, _, _ = compare(accumulator_around_the_loop, options, at_least=0.0)
    assert "coexec" not in phases(terra), phases(terra)
    assert not forward_mode.recording()  # the count went back to zero with the block


def mask_on_a_tape(loop, steps: int = 12):
    """``tf.boolean_mask`` on a tape: its ``Where`` runs for real on a placeholder."""
    rng = np.random.default_rng(1)
    w = tf.Variable(rng.normal(size=(3, 4)).astype("float32"))
    x = tf.constant(rng.normal(size=(8, 3)).astype("float32"))
    out = []
    for _ in loop(range(steps)):
        with tf.GradientTape() as tape:
            h = tf.tanh(x @ w)
            loss = tf.reduce_sum(tf.boolean_mask(h, h[:, 0] > 0.0) ** 2) + tf.reduce_sum(h)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        out.append(float(loss))
    return out, [w.numpy()]


def test_an_op_run_for_real_on_a_placeholder_keeps_coexecuting():
    # under a tape it takes the slow path, whose call the runner runs for real too: no fallback
    terra, _, _ = compare(mask_on_a_tape, MODES["no regions"])
    assert phases(terra)[2:] == ["coexec"] * 10, phases(terra)
