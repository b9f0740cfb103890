"""A fast-path call that repeats, at its location, the call answered there last (same op, attrs,
input dtypes and shapes, same variables) is answered without building its signature
(``coexec/repeat_calls.py``); any difference goes to the full signature. Equal to eager, and the
repeats really were answered so (``hits``)."""

import numpy as np
import tensorflow as tf
from against_eager import SEGMENTS, compare


def _hits(terra) -> int:
    return terra._engine.runner.repeats.hits


def _elementwise(loop):
    v = tf.Variable(np.linspace(-1.0, 1.0, 16).reshape(4, 4).astype("float32"))
    b = tf.constant(np.full((4, 4), 0.5, "float32"))
    out = []
    for _ in loop(range(12)):
        x = v * 1.0
        for _ in range(4):
            x = tf.tanh(x * b + 0.25)
        v.assign(x)
        out.append(float(tf.reduce_sum(x)))
    return out, [v.numpy()]


def _shapes_alternate(loop):
    """One location, a batch of 2 or 3 rows in turn: each call differs from the last one there
    in an input shape, so the remembered answer (the other shape) must not be taken."""
    w = tf.Variable(np.arange(12, dtype="float32").reshape(4, 3) / 10)
    batches = [tf.constant(np.ones((n, 4), "float32") * n) for n in (2, 3)]
    out = []
    for i in loop(range(12)):
        y = tf.matmul(batches[i % 2], w) * 2.0
        w.assign_sub(w * tf.reduce_mean(y) * 1e-3)
        out.append(np.asarray(y).tolist())
    return out, [w.numpy()]


def _attrs_alternate(loop):
    """One location, ``transpose_b`` true or false in turn: the same inputs, other attrs."""
    w = tf.Variable(np.arange(9, dtype="float32").reshape(3, 3) / 10)
    a = tf.constant(np.eye(3, dtype="float32") + 1.0)
    out = []
    for i in loop(range(12)):
        y = tf.matmul(a, w * 1.0, transpose_b=i % 2 == 1)
        w.assign_add(y * 0.01)
        out.append(np.asarray(y).tolist())
    return out, [w.numpy()]


def test_repeated_calls_are_answered_without_a_signature_and_equal_eager():
    terra = compare(_elementwise, SEGMENTS, last=6)
    coexecuted = [s.phase for s in terra.stats].count("coexec")
    # every op but the first read of v each co-executed iteration: 13 of them repeat
    assert coexecuted >= 6
    assert _hits(terra) >= 12 * coexecuted


def test_a_call_with_another_input_shape_is_not_taken_for_the_last_one():
    terra = compare(_shapes_alternate, SEGMENTS, last=4)
    assert [s.phase for s in terra.stats[-4:]] == ["coexec"] * 4


def test_a_call_with_other_attrs_is_not_taken_for_the_last_one():
    terra = compare(_attrs_alternate, SEGMENTS, last=4)
    assert [s.phase for s in terra.stats[-4:]] == ["coexec"] * 4
