"""What a region's call reads or does that no guard key or watch saw before (an adversarial
review against eager found each as a silent wrong result): a tensor given twice, containers and
objects among the arguments, a tensor made before the call that it is not given (a Keras mask,
``stateless_call``'s weights), a random op with an op seed, a value-dependent shape Python read,
the wall clock and the environment; and a user ``tf.function`` with random ops in a compiled
segment. Each program equals eager bit for bit, and the call formed (and missed when its input
changed) or was refused saying why."""

from __future__ import annotations

import collections
import datetime
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import COEXEC, compare, formed, rows

STEPS = 14


def batches(shape=(3, 4), steps: int = STEPS, seed: int = 0) -> list:
    rs = np.random.RandomState(seed)
    return [tf.constant(rs.rand(*shape).astype("float32")) for _ in range(steps)]


class Mix(keras.layers.Layer):
    def build(self, shapes):
        self.wq = self.add_weight(shape=(4, 2), initializer="glorot_uniform")
        self.wk = self.add_weight(shape=(4, 2), initializer="glorot_uniform")

    def call(self, q, c, cfg=None, transform=None, scales=()):
        out = tf.tanh(q @ self.wq) * (c @ self.wk)
        out = out * (cfg["scale"] if cfg is not None else 1.0)
        out = transform(out) if transform is not None else out
        for s in scales:
            out = out * s.value
        return out


class Scale:
    def __init__(self, value: float) -> None:
        self.value = value


def mixing(arguments):
    """A training loop of ``Mix``; ``arguments(i, x, c)`` gives its call's arguments at step i."""

    def program(loop):
        xs, cs = batches(), batches(seed=1)
        mix = Mix()
        mix.build(None)
        opt = keras.optimizers.SGD(0.1)
        out = []
        for i in loop(range(STEPS)):
            args, kwargs = arguments(i, xs[i], cs[i])
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(mix(*args, **kwargs) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, mix.trainable_variables),
                                    mix.trainable_variables))
            out.append(float(loss))
        return out, [v.numpy() for v in mix.variables]

    return program


CFG = collections.OrderedDict(scale=1.0)
TEMPERATURE = [1.0]
SCALES = [Scale(1.0), Scale(2.0)]


def _tempered(t):
    return t / TEMPERATURE[0]


def _aliased(i, x, c):
    return (x, x if i < 7 else c), {}  # self-attention while it forms, then a context


def _dict_subclass(i, x, c):
    CFG["scale"] = 1.0 if i < 7 else 0.5
    return (x, c), {"cfg": CFG}


def _function(i, x, c):
    TEMPERATURE[0] = 1.0 if i < 7 else 0.5
    return (x, c), {"transform": _tempered}


def _objects_in_a_list(i, x, c):
    SCALES[1].value = 2.0 if i < 7 else 0.5
    return (x, c), {"scales": SCALES}


@pytest.mark.parametrize("arguments", [_aliased, _dict_subclass, _function, _objects_in_a_list])
def test_what_the_arguments_hold_is_guarded(arguments):
    """Step 7 changes what the call is given (which tensor, a dict subclass's item, a function's
    global, an object's attribute in a list): the region misses there and the values stay eager's
    (each formed region answered the old value before)."""
    terra, _, _ = compare(mixing(arguments), COEXEC)
    row = formed(terra, "Mix.__call__")
    assert row.hits >= 3, str(terra.regions)


def train(loop, model, lossf, data: list):
    """Adam on ``lossf(y, model(x))`` over ``data``: (each step's loss, the model's variables)."""
    opt = keras.optimizers.Adam(0.01)
    out = []
    for x, y in loop(data):
        with tf.GradientTape() as tape:
            loss = lossf(y, model(x))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        out.append(float(loss))
    return out, [v.numpy() for v in model.variables]


def masked_loss(loop):
    """Embedding(mask_zero) + Dense, a Keras loss: the loss reads ``y_pred._keras_mask``."""
    rs = np.random.RandomState(0)
    data = []
    for i in range(STEPS):
        t = rs.randint(1, 20, (3, 6))
        if i >= 6:
            t[:, 4:] = 0  # padded batches from step 6 on
        data.append((tf.constant(t), tf.constant(rs.randint(0, 3, (3, 6)))))
    model = keras.Sequential([keras.Input((6,), dtype="int32"),
                              keras.layers.Embedding(20, 4, mask_zero=True),
                              keras.layers.Dense(3)])
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    return train(loop, model, lossf, data)


def softmax_classifier(loop):
    """A softmax head and a cross-entropy on its probabilities: Keras's softmax leaves its logits
    on the output, and the loss computes from them."""
    rs = np.random.RandomState(0)
    data = [(tf.constant(rs.rand(8, 4).astype("float32")),
             tf.constant(np.eye(3, dtype="float32")[rs.randint(0, 3, 8)])) for _ in range(STEPS)]
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    lossf = keras.losses.CategoricalCrossentropy()
    return train(loop, model, lossf, data)


@pytest.mark.parametrize(("program", "loss"), [
    (masked_loss, "SparseCategoricalCrossentropy.__call__"),
    (softmax_classifier, "CategoricalCrossentropy.__call__")])
def test_what_keras_attaches_to_an_output_is_an_argument(program, loss):
    """A Keras mask (``mask_zero``, padded batches from step 6) and a softmax's logits reach the
    loss as tensors attached to its prediction: the loss's region takes them as arguments (the
    padding changes its mask: eager's values), and a model's region attaches its logits again."""
    terra, _, _ = compare(program, COEXEC)
    assert formed(terra, loss).hits >= 8, str(terra.regions)
    if program is softmax_classifier:
        assert formed(terra, "Sequential.__call__").hits >= 8


def snapshots(loop):
    """``model.stateless_call`` on a snapshot of the weights taken every 6 steps."""
    xs = batches((4, 5), 18)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1)
    out = []
    for i in loop(range(18)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(xs[i]) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        if i % 6 == 0:
            snap = [tf.identity(v.value) for v in model.trainable_variables]
        y, _ = model.stateless_call(snap, [], xs[0])
        out.append((float(loss), float(tf.reduce_sum(y))))
    return out, [v.numpy() for v in model.variables]


class Noise(keras.layers.Layer):
    def call(self, x):
        return x + tf.random.uniform(tf.shape(x), 0.0, 0.1, seed=3)


class PositiveMean(keras.layers.Layer):
    def call(self, x):
        n = tf.boolean_mask(x, x > 0).shape[0]  # a value-dependent shape, read in Python
        return x / float(max(n or 1, 1))

    def compute_output_shape(self, shape):
        return shape


class WarmUp(keras.layers.Layer):
    def call(self, x):
        return x * (2.0 if datetime.datetime.now().year > 2000 else 1.0)


class FromEnvironment(keras.layers.Layer):
    def call(self, x):
        return x * float(os.environ.get("TERRA_TEST_SCALE", "1"))


def one_layer(layer, positive: bool = False):
    def program(loop):
        xs = batches()
        if positive:  # 2 of 4 positive while the region forms, then 1 to 4
            xs = [tf.constant(np.where(np.arange(4) < (2 if i < 6 else i % 4 + 1), 1.0 + x,
                                       -1.0).astype("float32")) for i, x in enumerate(xs)]
        model = keras.Sequential([keras.Input((4,)), layer(), keras.layers.Dense(3)])
        opt = keras.optimizers.SGD(0.1)
        out = []
        for x in loop(xs):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))
            out.append(float(loss))
        return out, [v.numpy() for v in model.variables]

    return program


REFUSED = {  # program, the row, words its reason holds
    "stateless_call's weights": (snapshots, "Dense.__call__", "made before the call"),
    "an op-seeded random op": (one_layer(Noise), "Sequential.__call__",
                               "keeps state in its kernel"),
    "a value-dependent shape read": (one_layer(PositiveMean, positive=True), "Sequential.__call__",
                                     "read the output shape of"),
    "the wall clock": (one_layer(WarmUp), "Sequential.__call__", "calls datetime.now"),
    "the environment": (one_layer(FromEnvironment), "Sequential.__call__", "os.__getitem__"),
}


@pytest.mark.parametrize("kind", REFUSED)
def test_a_hidden_input_refuses_the_region(kind):
    program, name, words = REFUSED[kind]
    terra, _, _ = compare(program, COEXEC, at_least=0.4)
    found = rows(terra, name)
    assert found and all(r.state == "refused" and words in r.reason for r in found), \
        str(terra.regions)
    assert found[0].reason in str(terra.explain())


def random_function(loop):
    """A user tf.function drawing from TensorFlow's global random stream."""
    tf.random.set_seed(7)
    w = tf.Variable(tf.ones((3, 2)))

    @tf.function
    def noisy_step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((x @ w + tf.random.uniform((4, 2), 0.0, 0.1)) ** 2)
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss

    out = []
    for x in loop(batches((4, 3), 16)):
        out.append(noisy_step(tf.nn.l2_normalize(x * 2.0 + 1.0, axis=1)))
    return [float(v) for v in out], [w.numpy()]


def test_a_segment_calling_random_ops_is_never_compiled():
    """Compiled, the segment would instantiate the function anew and its random stream would
    start again (eager keeps one); ``compile_after=1`` asks for every segment at once."""
    terra, _, _ = compare(random_function, {**COEXEC, "compile_after": 1})
    assert terra.compiled_segments == 0 and terra.runs_op_by_op > 0
