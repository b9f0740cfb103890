"""Variables, tapes and optimizers equal eager: writes mixed with reads in one iteration, reads
after writes never fetched, gradient tapes through loops with Adam slots, Keras dropout with
alternating ``training``, persistent tapes alive across the iteration's end.
"""




import keras
import numpy as np
import tensorflow as tf
from against_eager import (
    WHOLE,
    compare,
    run,
)
from what_ran import phases, plan_of

# -- variables ------------------------------------------------------------------------------------


def variable_mix(loop):
    v = tf.Variable(np.array([1.0, 2.0], np.float32))
    c = tf.Variable(0, dtype=tf.int64)
    out = []
    for i in loop(range(14)):
        before = v.read_value()
        v.assign(v * 0.5 + 1.0)
        mid = v + 0.0
        v.assign_add(before * 0.1)
        if i % 2:
            v.assign_sub(mid * 0.01)
        c.assign_add(1)
        after = v.read_value()
        out.append((float(before[0]), float(mid[1]), float(after[0]), int(c)))
    return out, [v.numpy(), c.numpy()]


def test_variable_writes_mixed_with_reads_in_one_iteration():
    compare(variable_mix)


def test_variable_writes_mixed_with_reads_stay_in_the_program():
    _, _, _, terra = run(variable_mix, WHOLE)
    assert plan_of(terra) == "whole"
    assert "coexec" in phases(terra), (phases(terra), terra.explain())


def written_var_read_unfetched(loop):
    """Reads after writes whose values are never fetched mid-iteration, only at the end."""
    v = tf.Variable(np.array([1.0, 2.0], np.float32))
    u = tf.Variable(np.zeros(2, np.float32))
    for i in loop(range(14)):
        v.assign(v * 0.9)
        u.assign(v + u)  # reads v after its write
        v.assign_add(u * 0.01)
        if i % 3 == 0:
            u.assign(u * 0.5)
    return [], [v.numpy(), u.numpy()]


def test_reads_of_a_variable_after_its_write_in_the_same_iteration():
    terra = compare(written_var_read_unfetched)
    assert phases(terra)[-3:] == ["coexec"] * 3


# -- tapes, optimizers, keras ---------------------------------------------------------------------


def tape_through_loop(loop):
    w = tf.Variable(np.array([[0.5, -0.2], [0.1, 0.3]], np.float32))
    b = tf.Variable(np.zeros(2, np.float32))
    opt = keras.optimizers.Adam(0.01)
    out = []
    for i in loop(range(14)):
        x = tf.constant([[1.0, 2.0]])
        with tf.GradientTape() as tape:
            h = x
            for t in range(1 + i % 3):
                h = tf.tanh(h @ w + b)
                if t % 2:
                    h = h * 0.5
            loss = tf.reduce_sum(h * h)
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        out.append(float(loss))
    return out, [w.numpy(), b.numpy()] + [v.numpy() for v in opt.variables]


def test_gradient_tape_through_a_loop_with_adam_slots():
    compare(tape_through_loop)


def keras_branchy(loop):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dropout(0.2, seed=3), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(0.01)
    rng = np.random.default_rng(5)
    out = []
    for i in loop(range(14)):
        x = rng.normal(size=(8, 4)).astype("float32")
        y = x.sum(axis=1, keepdims=True)
        with tf.GradientTape() as tape:
            pred = model(x, training=i % 2 == 0)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, model.trainable_variables)
        if i % 3 == 0:
            grads = [g * 0.5 for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append(float(loss))
    return out, [v.numpy() for v in model.weights] + [v.numpy() for v in opt.variables]


def test_keras_dropout_alternating_training_with_branchy_gradients():
    compare(keras_branchy)


def persistent_tape(loop):
    w = tf.Variable(np.array([0.5, -0.5], np.float32))
    out = []
    for _i in loop(range(12)):
        with tf.GradientTape(persistent=True) as tape:
            a = tf.reduce_sum(w * w)
            b = tf.reduce_sum(tf.sin(w))
        ga = tape.gradient(a, w)
        gb = tape.gradient(b, w)
        w.assign_sub(0.1 * (ga + gb))
        out.append(float(a))
    return out, [w.numpy()]


def test_persistent_tape_alive_across_the_iteration_end():
    compare(persistent_tape)

