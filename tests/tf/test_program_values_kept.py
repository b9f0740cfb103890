"""Values kept or read later equal eager's: placeholders kept across iterations and read at the
end, values from two or five iterations ago, moving averages carried as placeholders, per-trip
values of loops, fetches of several dtypes read out of order.
"""




import numpy as np
import pytest
import tensorflow as tf
from against_eager import (
    MODES,
    WHOLE,
    compare,
    run,
)
from what_ran import phases, plan_of


def floats(xs):
    return [float(x) for x in xs]


# -- values kept across iterations ----------------------------------------------------------------


def losses_read_at_the_end(loop):
    w = tf.Variable(np.ones(4, np.float32))
    losses = []
    for i in loop(range(14)):
        loss = tf.reduce_mean(tf.square(w - float(i % 3)))
        w.assign_sub(0.05 * (w - float(i % 3)))
        losses.append(loss)
    return floats(losses), [w.numpy()]


def test_placeholders_kept_across_iterations_and_read_at_the_end():
    terra = compare(losses_read_at_the_end)
    assert phases(terra)[-4:] == ["coexec"] * 4, (phases(terra), terra.explain())


def two_iterations_ago(loop):
    w = tf.Variable(np.ones(3, np.float32))
    prev = []
    out = []
    for i in loop(range(14)):
        y = tf.reduce_sum(w * 1.5)
        if len(prev) >= 2:
            w.assign_add(0.01 * prev[-2] * tf.ones(3))
        else:
            w.assign_add(tf.ones(3) * 0.1)
        prev.append(y)
        if i % 5 == 4:
            out.append(float(prev[-3]))
    return out + floats(prev), [w.numpy()]


def test_reading_a_value_from_two_iterations_ago():
    # values kept past the iteration's end and read later: the whole program gives way to
    # segments
    compare(two_iterations_ago, plan="segments")


def ema_carried(loop):
    w = tf.Variable(np.linspace(1.0, 2.0, 3).astype(np.float32))
    ema = tf.constant(0.0)
    for _i in loop(range(16)):
        loss = tf.reduce_sum(w * w)
        ema = 0.9 * ema + 0.1 * loss
        w.assign_sub(0.01 * w)
    return [float(ema)], [w.numpy()]


def test_a_moving_average_carried_as_a_placeholder_across_iterations():
    compare(ema_carried)


def test_a_moving_average_carried_across_iterations_stays_in_the_program():
    _, _, _, terra = run(ema_carried, WHOLE)
    assert plan_of(terra) == "whole"
    assert "coexec" in phases(terra), (phases(terra), terra.explain())


# -- ordering of decisions, between-iteration code, unrolled loops that change --------------------


def mixed_dtype_fetches(loop):
    w = tf.Variable(np.array([1.5, -2.0, 3.0], np.float32))
    c = tf.Variable(0, dtype=tf.int32)
    out = []
    for _i in loop(range(14)):
        idx = tf.argmax(w)
        c.assign_add(tf.cast(idx, tf.int32))
        pos = tf.reduce_sum(tf.cast(w > 0, tf.int32))
        top = tf.reduce_max(w)
        w.assign(w * -0.9 + 0.1)
        # read in another order than issued, across dtypes
        out.append((float(top), int(pos), int(idx), int(c), bool(top > 1.0)))
    return out, [w.numpy(), c.numpy()]


def test_fetches_of_several_dtypes_read_out_of_order():
    compare(mixed_dtype_fetches)


def per_trip_kept_across_iterations(loop):
    """Values of every trip kept in a list across iterations and read two iterations later."""
    w = tf.Variable(np.array([0.5, 0.25], np.float32))
    history = []
    out = []
    for i in loop(range(14)):
        h = w * 1.0
        trips = []
        for _ in range(1 + i % 3):
            h = tf.tanh(h + 0.1)
            trips.append(h)
        w.assign(h)
        history.append(trips)
        if len(history) >= 3:
            out.append([float(tf.reduce_sum(t)) for t in history[-3]])
    return out, [w.numpy()]


def test_per_trip_values_kept_and_read_two_iterations_later():
    compare(per_trip_kept_across_iterations, plan="segments")  # the whole program gives way


# -- values fetched out of order ------------------------------------------------------------------


def kept_and_read_in_reverse(loop):
    w = tf.Variable(np.array([0.5, -0.25], np.float32))
    kept = []
    ints = {}
    for i in loop(range(40)):
        y = tf.reduce_sum(w * w)
        kept.append(y)
        ints[i] = tf.argmax(w)
        w.assign(w * -0.97 + 0.01)
    out = [float(y) for y in reversed(kept)]
    out += [int(ints[i]) for i in sorted(ints, reverse=True)]
    return out, [w.numpy()]


def read_five_back(loop):
    w = tf.Variable(np.array([0.5, -0.25], np.float32))
    kept = []
    out = []
    for i in loop(range(30)):
        a = tf.reduce_sum(w)
        b = tf.reduce_max(w)
        kept.append((a, b))
        w.assign(tf.tanh(w * 1.3 + 0.05))
        if i >= 5 and i % 2:
            old_a, old_b = kept[i - 5]
            out.append((float(old_b), float(old_a), float(kept[i - 1][0])))
    return out, [w.numpy()]


def read_in_a_different_order_each_iteration(loop):
    w = tf.Variable(np.array([0.5, -0.25, 1.0], np.float32))
    out = []
    for i in loop(range(20)):
        xs = [tf.reduce_sum(w * k) for k in (1.0, 2.0, 3.0)]
        w.assign(w * 0.9 + 0.1)
        order = [(i + j) % 3 for j in range(3)]
        if i % 2:
            order.reverse()
        out.append([float(xs[j]) for j in order])
    return out, [w.numpy()]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", [kept_and_read_in_reverse, read_five_back,
                                     read_in_a_different_order_each_iteration],
                         ids=lambda p: p.__name__)
def test_values_read_out_of_order(program, mode):
    compare(program, MODES[mode])

