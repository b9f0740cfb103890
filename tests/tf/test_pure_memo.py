"""A stateless op on real values in a co-executed iteration is answered from the outputs of its
earlier call on the same values (``coexec/pure_memo.py``): an eager op is slow while the graph
runs. Equal to eager, including a gradient taken with respect to one of two equal outputs."""

import numpy as np
import tensorflow as tf
from against_eager import SEGMENTS, compare

from terra_nb.coexec.pure_memo import MAX_ENTRIES, PureOpMemo


def _mean_loss(loop):
    v = tf.Variable(np.linspace(-1.0, 1.0, 8).astype("float32"))
    c = tf.constant(3.0)
    losses = []
    for _ in loop(range(12)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(v * c - 1.0))
        (g,) = tape.gradient(loss, [v])  # reduce_mean's gradient: Reshape, Tile, RealDiv of 1.0
        v.assign_sub(0.1 * g)
        losses.append(float(loss))
    return losses, [v.numpy()]


def _the_same_op_twice(loop):
    v = tf.Variable(2.0)
    c = tf.constant(1.5)
    grads = []
    for _ in loop(range(8)):
        with tf.GradientTape() as tape:
            a = tf.square(c)
            b = tf.square(c)  # the same op on the same value: still a tensor of its own
            tape.watch(a)
            loss = v * a + 3.0 * b
        grads.append(float(tape.gradient(loss, a)))  # v, not v + 3
        v.assign_add(1.0)
    return grads, [v.numpy()]


def _a_tensor_of_its_own(loop):
    """Eager makes a new tensor object every call: one kept by ``ref()`` or marked by Keras
    (``_keras_mask``) in one iteration is not the next iteration's."""
    a = tf.constant([1.0, 2.0])
    v = tf.Variable(0.0)
    refs, marked = set(), []
    for _ in loop(range(10)):
        t = a * 3.0
        refs.add(t.ref())
        marked.append(hasattr(t, "_keras_mask"))
        t._keras_mask = tf.constant([True, False])
        v.assign_add(tf.reduce_sum(t))
    return [len(refs), marked], [v.numpy()]


def _hits(terra) -> int:
    return terra._engine.runner.pure.hits


def test_a_losss_gradient_takes_its_constant_ops_from_the_memo_and_equals_eager():
    terra = compare(_mean_loss, SEGMENTS, last=4)
    coexecuted = [s.phase for s in terra.stats].count("coexec")
    assert _hits(terra) >= 3 * (coexecuted - 1)  # each co-executed iteration after the first


def test_one_memoised_output_is_handed_out_once_per_iteration():
    terra = compare(_the_same_op_twice, SEGMENTS, last=4)
    assert _hits(terra) > 0  # the first square of each iteration; the second ran


def test_each_hit_is_a_tensor_of_its_own():
    terra = compare(_a_tensor_of_its_own, SEGMENTS, last=4)
    assert _hits(terra) >= 4


def _key(memo, *args):
    return memo.key("Mul", args, None, list(args), "")


def test_keys_tell_values_apart_exactly():
    memo = PureOpMemo()
    assert _key(memo, 0.0) != _key(memo, -0.0)
    assert len({_key(memo, 1), _key(memo, 1.0), _key(memo, True)}) == 3
    assert _key(memo, tf.constant([1.0, 2.0])) == _key(memo, tf.constant([1.0, 2.0]))
    assert _key(memo, tf.constant([1.0, 2.0])) != _key(memo, tf.constant([2.0, 1.0]))
    assert _key(memo, tf.constant([1, 2])) != _key(memo, tf.constant([1.0, 2.0]))
    assert _key(memo, tf.zeros((100,))) is None  # too large to key by value
    assert _key(memo, tf.constant("text")) is None
    assert _key(memo, object()) is None


def test_a_list_of_outputs_comes_back_as_a_fresh_list_once_per_iteration():
    memo = PureOpMemo()
    key = _key(memo, tf.constant([1.0, 2.0]))
    parts = tf.unstack(tf.constant([1.0, 2.0]))
    memo.put(key, parts)
    assert memo.get(key) is None  # handed out already, by the op that made it
    memo.new_iteration()
    got = memo.get(key)
    assert got == parts and got is not parts
    got.append("changed by the caller")
    assert memo.get(key) is None
    memo.new_iteration()
    assert len(memo.get(key)) == 2


def test_large_outputs_are_not_kept_and_the_memo_is_bounded():
    memo = PureOpMemo()
    key = _key(memo, 1.0)
    memo.put(key, tf.zeros((5000,)))
    memo.new_iteration()
    assert memo.get(key) is None
    for i in range(MAX_ENTRIES + 10):
        memo.put(_key(memo, float(i)), tf.constant(float(i)))
    assert len(memo._outputs) <= MAX_ENTRIES
