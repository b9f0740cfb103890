"""Training loops for the co-execution corpus. Each takes ``loop`` (identity for plain eager,
``terra.loop`` under terra-nb) and returns (Python values, variables) to compare across modes.

They use Python features ``tf.function`` cannot convert or gets wrong: numpy on materialised
values, branches on ``float(loss)``, generators, object mutation, try/except, data-dependent
loops, break/continue, optional None arguments, recursion, two tapes, dropout, ragged last batches.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


def mlp(inputs=4, hidden=8, outputs=1, dropout=0.0):
    layers = [keras.Input((inputs,)), keras.layers.Dense(hidden, activation="tanh")]
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    layers.append(keras.layers.Dense(outputs))
    return keras.Sequential(layers)


def batches(n=8, batch=8, features=4, last=None, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        size = last if (last and i == n - 1) else batch
        x = rng.normal(size=(size, features)).astype("float32")
        yield x, (x.sum(axis=1, keepdims=True) * 0.5).astype("float32")


def train_step(model, opt, x, y, training=False):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=training) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def state(model, opt):
    return [v.numpy() for v in model.weights] + [v.numpy() for v in opt.variables]


def numpy_on_loss(loop):
    model, opt = mlp(), keras.optimizers.Adam(0.01)
    logs = []
    for x, y in loop(batches()):
        loss = train_step(model, opt, x, y)
        logs.append(float(np.log1p(loss.numpy())))
        print(f"loss {float(loss):.4f}")
    return logs, state(model, opt)


def branch_on_loss(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)
    taken = []
    for x, y in loop(batches(10)):
        loss = train_step(model, opt, x, y)
        if float(loss) > 0.5:
            model.layers[-1].kernel.assign(model.layers[-1].kernel * 0.99)
            taken.append("shrink")
        else:
            taken.append("keep")
    return taken, state(model, opt)


def generator_batches(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)

    def stream():
        for x, y in batches(6):
            yield tf.constant(x), y * 2.0

    losses = [float(train_step(model, opt, x, y)) for x, y in loop(stream())]
    return losses, state(model, opt)


class CountingDense(keras.layers.Dense):
    """Mutates Python state in call(): a counter and the last activation norm."""

    def build(self, shape):
        super().build(shape)
        self.calls = 0
        self.norms = []

    def call(self, x):
        out = super().call(x)
        self.calls += 1
        self.norms.append(float(tf.norm(out)))
        return out


def mutation_in_model(loop):
    layer = CountingDense(3)
    model = keras.Sequential([keras.Input((4,)), layer, keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    flags = []
    for x, y in loop(batches()):
        train_step(model, opt, x, y)
        flags.append(layer.calls % 2 == 0 and layer.norms[-1] > 1.0)
    return [layer.calls, flags, layer.norms], state(model, opt)


def try_except(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)
    caught = []
    for i, (x, y) in enumerate(loop(batches())):
        try:
            loss = train_step(model, opt, x, y)
            if i % 3 == 2:
                raise ValueError(f"bad batch {i}")
            caught.append(round(float(loss), 5))
        except ValueError as error:
            caught.append(str(error))
    return caught, state(model, opt)


def rnn_variable_length(loop, lengths=(3, 5, 2, 5, 3, 4, 3, 5)):
    cell = keras.layers.SimpleRNNCell(6)
    head = keras.layers.Dense(1)
    cell.build((None, 3))
    head.build((None, 6))
    variables = cell.trainable_variables + head.trainable_variables
    opt = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(1)
    seqs = [rng.normal(size=(2, n, 3)).astype("float32") for n in lengths]
    out = []
    for seq in loop(seqs):
        with tf.GradientTape() as tape:
            h = [tf.zeros((2, 6))]
            for t in range(seq.shape[1]):  # a data-dependent Python loop
                _, h = cell(seq[:, t, :], h)
            loss = tf.reduce_mean(tf.square(head(h[0])))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        out.append(float(loss))
    return out, [v.numpy() for v in variables]


def periodic_and_late_branch(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)
    extra = tf.Variable(0.0)
    for i, (x, y) in enumerate(loop(batches(14))):
        loss = train_step(model, opt, x, y)
        if i % 3 == 0:  # a branch taken periodically
            extra.assign_add(loss)
        if i >= 10:  # a path first taken late: falls back mid-training
            extra.assign(extra * 0.5 + tf.reduce_max(model.layers[0].kernel))
    return [float(extra)], state(model, opt) + [extra.numpy()]


def break_and_continue(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)
    seen = []
    for i, (x, y) in enumerate(loop(batches(12))):
        if i % 4 == 1:
            continue
        loss = train_step(model, opt, x, y)
        seen.append(i)
        if i == 9:
            break
    return [seen, float(loss)], state(model, opt)


def scaled(x, scale=None):
    return x if scale is None else x * scale


def optional_none(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)
    for i, (x, y) in enumerate(loop(batches())):
        with tf.GradientTape() as tape:
            pred = scaled(model(x), None if i % 2 else tf.constant(0.5))
            loss = tf.reduce_mean(tf.square(pred - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
    return [], state(model, opt)


def deep(x, depth):
    return x if depth == 0 else deep(tf.tanh(x) * 1.1, depth - 1)


def recursion(loop):
    w = tf.Variable(tf.ones((4, 1)))
    opt = keras.optimizers.SGD(0.05)
    out = []
    for i, (x, y) in enumerate(loop(batches())):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(deep(x, 1 + i % 3) @ w - y))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        out.append(float(loss))
    return out, [w.numpy()]


def gan(loop):
    gen, disc = mlp(2, 8, 4), mlp(4, 8, 1)
    g_opt, d_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    rng = np.random.default_rng(2)
    history = []
    for real, _ in loop(batches(6)):
        noise = rng.normal(size=(8, 2)).astype("float32")
        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
            fake = gen(noise)
            real_out, fake_out = disc(real), disc(fake)
            d_loss = bce(tf.ones_like(real_out), real_out) + bce(tf.zeros_like(fake_out), fake_out)
            g_loss = bce(tf.ones_like(fake_out), fake_out)
        g_opt.apply_gradients(zip(g_tape.gradient(g_loss, gen.trainable_variables),
                                  gen.trainable_variables))
        d_opt.apply_gradients(zip(d_tape.gradient(d_loss, disc.trainable_variables),
                                  disc.trainable_variables))
        history.append((float(g_loss), float(d_loss)))
    return history, state(gen, g_opt) + state(disc, d_opt)


def dropout_seeded(loop):
    model, opt = mlp(dropout=0.3), keras.optimizers.Adam(0.01)
    losses = [float(train_step(model, opt, x, y, training=True)) for x, y in loop(batches())]
    return losses, state(model, opt)


def smaller_last_batch(loop):
    model, opt = mlp(), keras.optimizers.SGD(0.05)
    shapes, losses = [], []
    for x, y in loop(batches(7, last=3)):
        loss = train_step(model, opt, x, y)
        shapes.append(tuple(model(x).shape))
        losses.append(float(loss))
    return [shapes, losses], state(model, opt)


CORPUS = [
    numpy_on_loss, branch_on_loss, generator_batches, mutation_in_model, try_except,
    rnn_variable_length, periodic_and_late_branch, break_and_continue, optional_none, recursion,
    gan, dropout_seeded, smaller_last_batch,
]
