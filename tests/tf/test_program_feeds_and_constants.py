"""Values Python feeds equal eager's: Python floats that change occasionally, -0.0 and NaN,
ints and bools, numbers of mixed types, arrays mutated in place, inputs fed some iterations and
computed others; the whole program holds unchanging small values as constants and must notice
every change.
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

# -- constants, feeds -----------------------------------------------------------------------------


def occasional_constant(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for i in loop(range(20)):
        lr = 0.1 if i < 5 else (0.05 if i < 11 else (0.1 if i < 15 else 0.02))
        w.assign_sub(lr * w)
        out.append(float(w[1]))
    return out, [w.numpy()]


def test_python_floats_that_change_only_occasionally():
    terra = compare(occasional_constant)
    assert phases(terra)[-3:] == ["coexec"] * 3


def signed_zero_constant(loop):
    v = tf.Variable(2.0)
    out = []
    for i in loop(range(10)):
        # numpy, not Python floats: TF's own scalar cache already conflates 0.0 and -0.0
        s = np.array([0.0 if i < 6 else -0.0], np.float32)
        out.append(float(1.0 / (v * s)[0]))
    return out, [v.numpy()]


def test_a_constant_zero_that_becomes_minus_zero():
    compare(signed_zero_constant)


def int_and_bool_feeds(loop):
    w = tf.Variable(np.arange(1, 5, dtype=np.float32))
    out = []
    for i in loop(range(16)):
        flag = i % 4 == 0
        k = i % 4
        y = tf.where(flag, w * 2.0, w)
        picked = tf.gather(y, k)
        n = tf.cast(i, tf.float32)  # a fed int converted in the program
        w.assign(w * 0.95 + 0.01 * picked + 0.001 * n)
        out.append(float(picked))
    return out, [w.numpy()]


def test_int_and_bool_feeds():
    compare(int_and_bool_feeds)


def fed_sometimes_node_other_time(loop):
    """The scale of ``w * s`` is a fed tensor (always 0.5, so held as a constant) or the value
    of node ``a``; once it is the value of node ``b``, computed every iteration but never fed
    there before."""
    v = tf.Variable(1.0)
    w = tf.Variable(1.0)
    out = []
    for i in loop(range(14)):
        a = v * 0.75
        b = v + 0.25
        s = a if i % 2 == 0 else tf.constant(0.5)
        if i == 11:
            s = b
        w.assign(w * s + 0.5)
        out.append(float(w))
    return out, [w.numpy(), v.numpy()]


def test_an_input_held_as_constant_then_fed_from_another_node():
    compare(fed_sometimes_node_other_time)


def value_fetched_then_used(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for _i in loop(range(12)):
        loss = tf.reduce_sum(w * w)
        if float(loss) > 1.0:
            w.assign_sub(0.01 * loss * w)  # the fetched value is also an op input
        out.append(float(loss))
    return out, [w.numpy()]


def test_a_value_read_mid_iteration_then_used_as_an_input_equals_eager():
    compare(value_fetched_then_used)


def test_a_value_read_mid_iteration_then_used_stays_in_the_program():
    _, _, _, terra = run(value_fetched_then_used, WHOLE)
    assert plan_of(terra) == "whole"
    assert phases(terra)[-4:] == ["coexec"] * 4, (phases(terra), terra.explain())


# -- constants of several Python types ------------------------------------------------------------


def mixed_number_types(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    kinds = [1, 1.0, np.float32(1.0), np.float64(1.0), np.int64(1), 2, 0.5]
    out = []
    for i in loop(range(40)):
        c = kinds[0] if i < 12 else kinds[i % len(kinds)]
        w.assign(w * 0.99 + c * 0.01)
        out.append(float(w[0]))
    return out, [w.numpy()]


def nan_constant(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    m = tf.Variable(np.zeros(2, np.float32))
    out = []
    for i in loop(range(30)):
        c = float("nan") if i < 20 else 0.25
        m.assign(tf.maximum(w * 0.0 + c, -1.0))  # NaN then 0.25
        w.assign(w * 0.9 + 0.1)
        out.append(float(m[0]))
    return out, [w.numpy(), m.numpy()]


def value_changes_after_many_iterations(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    out = []
    for i in loop(range(70)):
        lr = 0.1 if i < 55 else 0.01
        scale = np.array([1.0, 2.0], np.float32) if i < 60 else np.array([2.0, 1.0], np.float32)
        w.assign(w - lr * (w - scale))
        if i % 5 == 0:
            out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def bool_and_int_flags(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    c = tf.Variable(0, dtype=tf.int64)
    out = []
    for i in loop(range(36)):
        flag = i < 25 or i % 2 == 0
        y = tf.where(tf.constant(flag), w * 2.0, w * 0.5)
        w.assign(y * 0.7 + 0.1)
        c.assign_add(int(flag) * 3)
        out.append((float(w[1]), int(c)))
    return out, [w.numpy(), c.numpy()]


def int_then_float_same_value(loop):
    """The same number fed as an int (int32 tensor) and as a float; via ``tf.cast`` both end as
    float32, but eager converts them to different dtypes."""
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    out = []
    for i in loop(range(30)):
        c = 3 if i < 15 or i % 3 else 3.5
        w.assign(w * 0.9 + tf.cast(c, tf.float32) * 0.01)
        out.append(float(w[0]))
    return out, [w.numpy()]


def small_array_constant_mutated_in_place(loop):
    """A numpy array fed every iteration and mutated in place by Python after 20 iterations."""
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    scale = np.array([0.5, 0.25], np.float32)
    out = []
    for i in loop(range(30)):
        if i == 20:
            scale[0] = 2.0  # same object, new content
        w.assign(w * 0.9 + tf.constant(scale) * 0.1)
        y = w * scale
        out.append(float(tf.reduce_sum(y)))
    return out, [w.numpy()]


CONSTANTS = [mixed_number_types, nan_constant, value_changes_after_many_iterations,
             bool_and_int_flags, int_then_float_same_value, small_array_constant_mutated_in_place]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", CONSTANTS, ids=lambda p: p.__name__)
def test_constants_equal_eager(program, mode):
    compare(program, MODES[mode])

