"""Forward mode (``tf.autodiff.ForwardAccumulator``) gets eager's JVPs, and a gradient through a
JVP is eager's bit for bit (the closing review's G1 and G2).

- An accumulator computes each op's JVP as the op runs. An op answered with a placeholder ran
  later, in a graph no accumulator saw: when an iteration fell back in the middle of the
  accumulator's block (a new JVP function), the ops before the fallback had no tangent, and the
  JVP was wrong (a Keras model) or None (raw ops). Now, while one records, its ops run for real
  (no placeholder, no memoised pure op, no region hit) and the rest of the iteration co-executes.
- An accumulator entered before the loop is counted too.
- An op run for real on a placeholder under a tape (after a fallback, or one whose shapes are
  values) was taped on the placeholder's value behind an identity link eager's tape lacks, which
  changed the order its gradients were summed in (an ulp apart). It now takes the slow path,
  which tapes the op on the placeholder itself.
Every test compares with eager bit for bit, with and without regions and in the whole program,
and asserts what ran.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import compare
from what_ran import coexecuted, phases, ran_at

from terra_nb.capture import forward_mode
from terra_nb.modes import NO_GRAPH_WORK

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


def assert_ran_for_real_and_coexecuted(terra) -> None:
    """No iteration fell back, and every one from the first co-executed on co-executed (one
    whose every op is under an accumulator ran none in the graph: "no graph work")."""
    assert not terra.explain(), [str(f) for f in terra.explain()]
    done = [coexecuted(s) for s in terra.stats]
    assert all(done[done.index(True):]), phases(terra)


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
@pytest.mark.parametrize("program", [accumulator_each_step, raw_ops, accumulator_around_the_loop],
                         ids=["each step", "raw ops", "around the loop"])
def test_ops_under_an_accumulator_run_for_real(program, options):
    terra, _, _ = compare(program, options)
    assert_ran_for_real_and_coexecuted(terra)
    assert {s.why for s in terra.stats[2:]} == {NO_GRAPH_WORK}, phases(terra)
    assert not forward_mode.recording()  # the count went back to zero with the block


@pytest.mark.parametrize("options", MODES.values(), ids=MODES.keys())
@pytest.mark.parametrize("program", [step_then_jvp, jvp_in_the_loss],
                         ids=["after a step", "jvp in the loss"])
def test_the_rest_of_the_iteration_coexecutes(program, options):
    terra, _, _ = compare(program, options)
    assert_ran_for_real_and_coexecuted(terra)
    if not options["regions"]:  # (with regions, the step's model call is one region op)
        seen = terra.seen
        assert set(ran_at(terra, seen, "y = model(a)", "MatMul").values()) == {0}
        assert min(ran_at(terra, seen, "model(a) ** 2", "MatMul").values()) >= 1, seen


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
