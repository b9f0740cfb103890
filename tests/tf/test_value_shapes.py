"""Shapes are values unless proven static: ops whose output shapes depend on input values.

A user expects ``tf.range(v)``, ``boolean_mask``, ``where``, ``unique``, NMS and
``dynamic_partition`` to give eager's results under co-execution, also when the count changes every
iteration, with no error and no fallback. Each test compares with eager and checks the loop
co-executed (a silent fall back to tracing would pass an equality check alone).
"""

import numpy as np
import pytest
import tensorflow as tf

from terra_nb import Terra
from terra_nb.capture.signature import Entry
from terra_nb.coexec.shapes import value_shaped

N = 6


def run_both(body, setup):
    """``body(i, *state)`` for N iterations eagerly and under coexec, each from ``setup()``."""

    def run(loop):
        state = setup()
        return [body(i, *state) for i in loop(range(N))]

    plain = run(lambda it: it)
    with Terra() as terra:
        co = run(terra.loop)
    return plain, co, terra


def assert_coexecuted(terra, at_least=N - 2):
    phases = [s.phase for s in terra.stats]
    assert phases.count("coexec") >= at_least, phases
    assert not terra.explain(), terra.explain()


def growing():
    return (tf.Variable(3.0),)


def test_range_of_a_tensor_is_not_folded_from_the_trace():
    """The issue's loop: the size of ``tf.range(v)`` grows with v every iteration."""

    def body(i, v):
        r = tf.range(v * 1.0)
        n = tf.cast(tf.size(r), tf.float32)
        s = tf.reduce_sum(r)
        del r
        out = float(s / n)
        v.assign_add(1.0)
        return out

    plain, co, terra = run_both(body, growing)
    assert co == plain == [1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    assert_coexecuted(terra)


def test_boolean_mask_count_read_back_with_shape():
    def body(i, v):
        m = tf.boolean_mask(v * 1.0, v > float(i))
        return int(tf.shape(m)[0]), float(tf.reduce_sum(m)), m.shape.as_list()

    plain, co, terra = run_both(body, lambda: (tf.Variable(np.arange(8, dtype="float32")),))
    assert co == plain
    assert len({c for c, _, _ in plain}) == N  # the count really changed every iteration
    assert_coexecuted(terra)


def test_where_unique_and_dynamic_partition():
    def body(i, v):
        x = v * 1.0 + float(i % 3)
        idx = tf.where(x > 4.0)
        values, _ = tf.unique(tf.cast(x, tf.int32) // 2)
        parts = tf.dynamic_partition(x, tf.cast(x > 5.0, tf.int32), 2)
        return (idx.numpy().tolist(), values.numpy().tolist(),
                [p.numpy().tolist() for p in parts])

    plain, co, terra = run_both(body, lambda: (tf.Variable(np.arange(8, dtype="float32")),))
    assert co == plain
    assert_coexecuted(terra)


def test_non_max_suppression_keeps_a_data_dependent_count():
    rng = np.random.default_rng(0)
    boxes = [rng.uniform(0, 1, (20, 4)).astype("float32") for _ in range(N)]

    def body(i, scores):
        b = tf.sort(tf.constant(boxes[i]), axis=1)
        s = scores * float(1 + i)
        keep = tf.image.non_max_suppression(b, s, 10, iou_threshold=0.2 + 0.1 * i)
        picked = tf.gather(b, keep)
        return keep.shape.as_list(), float(tf.reduce_sum(picked))

    scores = rng.uniform(0, 1, 20).astype("float32")
    plain, co, terra = run_both(body, lambda: (tf.Variable(scores),))
    assert co == plain
    assert len({tuple(k) for k, _ in plain}) > 1
    assert_coexecuted(terra)


def test_ragged_last_batch():
    """A smaller last batch: its shapes come from inference, not the trace."""
    data = np.arange(50, dtype="float32").reshape(25, 2)
    batches = [data[i : i + 4] for i in range(0, 25, 4)]  # 6 of 4 rows, then 1 row

    def run(loop):
        w = tf.Variable([[1.0], [2.0]])
        out = []
        for x in loop(batches):
            y = tf.matmul(x, w * 1.0)
            out.append((y.shape.as_list(), float(tf.reduce_mean(y))))
        return out

    plain = run(lambda it: it)
    with Terra() as terra:
        co = run(terra.loop)
    assert co == plain and co[-1][0] == [1, 1]
    assert [s.phase for s in terra.stats][-1] == "coexec"


def _entries(terra):
    index = terra.learned.index
    return index, {e.uid: e for e in index.entries.values() if type(e) is Entry}


def test_shape_proofs_flag_value_shaped_ops_only():
    """The proof is shape inference, not a list of op names: Range and Where are flagged, the
    arithmetic around them is not."""

    def body(i, v, u):
        r = tf.range(v * 1.0)
        w = tf.where(u * 1.0 > float(i))
        return float(tf.reduce_sum(r * 2.0)), int(tf.size(w))

    plain, co, terra = run_both(body, lambda: growing() + (tf.Variable(np.arange(8.0)),))
    assert co == plain
    index, by_uid = _entries(terra)
    flagged = {by_uid[u].op_type for u, f in index.value_shaped.items() if f and u in by_uid}
    static = {by_uid[u].op_type for u, f in index.value_shaped.items() if not f and u in by_uid}
    assert {"Range", "Where"} <= flagged
    assert "Mul" in static and "Mul" not in flagged


@pytest.mark.parametrize("values, static", [((4,), True), (None, False)])
def test_value_shaped_reads_only_values_the_signature_fixes(values, static):
    """Fill's output shape is its ``dims`` input: static when the signature carries the dims,
    data when it does not."""
    dims = (3, (1,), values) if values else (3, (1,))
    sig = ("Fill", 0, (), (dims, (1, ())))
    entry = Entry(0, 0, "Fill", (), (), (("int32", (1,)), ("float32", ())),
                  ((tf.float32, tf.TensorShape([4]), (1, (4,))),), "single")
    assert value_shaped(entry, sig) is (not static)
