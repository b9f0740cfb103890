"""The two training programs faults are injected into, with their whole state.

Each program is built once per test module (Keras models, optimizers built on their variables)
and reset to its initial state before every run, so a run under terra-nb and its eager
reference start from the same values; ``state()`` is every variable: weights, optimizer slots
and iteration counters, plus ``probe``, which a divergence writes to.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


def _mlp(inputs: int, hidden: int, outputs: int) -> keras.Sequential:
    return keras.Sequential([
        keras.Input((inputs,)), keras.layers.Dense(hidden, activation="tanh"),
        keras.layers.Dense(outputs),
    ])


def _built(optimizer, variables):
    optimizer.build(variables)
    return optimizer


class Program:
    """A training program: ``step(i)`` is one iteration's TensorFlow work on batch ``i``."""

    name = ""

    def __init__(self) -> None:
        self.probe = tf.Variable(0.0, name="probe")
        self._initial = [v.numpy() for v in self.variables]

    @property
    def variables(self) -> list:
        raise NotImplementedError

    @property
    def optimizers(self) -> list:
        raise NotImplementedError

    def step(self, i: int):
        """Run iteration ``i``'s ops; return the loss tensor Python reads."""
        raise NotImplementedError

    def state(self) -> list[np.ndarray]:
        return [v.numpy() for v in self.variables]

    def reset(self) -> None:
        for v, value in zip(self.variables, self._initial):
            v.assign(value)

    def diverge(self, k: int) -> None:
        """A path never seen: read the state mid-step and write it to ``probe`` (what was
        updated before this point, and only that, shows in the value). The ops are issued
        ``k`` calls deep, so each position's are at a location of their own."""
        _nested(k, self._write_probe)

    def _write_probe(self) -> None:
        self.probe.assign_add(tf.add_n([tf.cast(tf.reduce_sum(v), tf.float32)
                                        for v in self.watched]))

    def expected_probe(self, state: list[np.ndarray]) -> np.float32:
        """``probe`` after ``diverge`` ran once from the initial state, seeing ``state``."""
        by_variable = dict(zip((id(v) for v in self.variables), state))
        return np.float32(sum(np.float32(by_variable[id(v)].sum()) for v in self.watched))


def _nested(depth: int, fn) -> None:
    if depth == 0:
        fn()
    else:
        _nested(depth - 1, fn)


class MlpAdam(Program):
    """A Keras MLP (4 -> 8 -> 1, tanh) trained with Adam on batches of 8."""

    name = "mlp"

    def __init__(self) -> None:
        self.model = _mlp(4, 8, 1)
        self.opt = _built(keras.optimizers.Adam(0.01), self.model.trainable_variables)
        rng = np.random.default_rng(0)
        self.batches = [(rng.normal(size=(8, 4)).astype("float32"),
                         rng.normal(size=(8, 1)).astype("float32")) for _ in range(4)]
        self.watched = self.model.trainable_variables + [self.opt.iterations]
        super().__init__()

    @property
    def variables(self) -> list:
        return self.model.weights + list(self.opt.variables) + [self.probe]

    @property
    def optimizers(self) -> list:
        return [self.opt]

    def step(self, i: int):
        x, y = self.batches[i % len(self.batches)]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


class Gan(Program):
    """A GAN: generator 2 -> 8 -> 4 and discriminator 4 -> 8 -> 1, two tapes, two Adams."""

    name = "gan"

    def __init__(self) -> None:
        self.gen, self.disc = _mlp(2, 8, 4), _mlp(4, 8, 1)
        self.g_opt = _built(keras.optimizers.Adam(1e-3), self.gen.trainable_variables)
        self.d_opt = _built(keras.optimizers.Adam(1e-3), self.disc.trainable_variables)
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)
        rng = np.random.default_rng(2)
        self.real = [rng.normal(size=(8, 4)).astype("float32") for _ in range(4)]
        self.noise = [rng.normal(size=(8, 2)).astype("float32") for _ in range(4)]
        self.watched = (self.gen.trainable_variables + self.disc.trainable_variables
                        + [self.g_opt.iterations, self.d_opt.iterations])
        super().__init__()

    @property
    def variables(self) -> list:
        return (self.gen.weights + self.disc.weights + list(self.g_opt.variables)
                + list(self.d_opt.variables) + [self.probe])

    @property
    def optimizers(self) -> list:
        return [self.g_opt, self.d_opt]

    def step(self, i: int):
        real, noise = self.real[i % len(self.real)], self.noise[i % len(self.noise)]
        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
            fake = self.gen(noise)
            real_out, fake_out = self.disc(real), self.disc(fake)
            d_loss = (self.bce(tf.ones_like(real_out), real_out)
                      + self.bce(tf.zeros_like(fake_out), fake_out))
            g_loss = self.bce(tf.ones_like(fake_out), fake_out)
        self.g_opt.apply_gradients(zip(g_tape.gradient(g_loss, self.gen.trainable_variables),
                                       self.gen.trainable_variables))
        self.d_opt.apply_gradients(zip(d_tape.gradient(d_loss, self.disc.trainable_variables),
                                       self.disc.trainable_variables))
        return g_loss + d_loss
