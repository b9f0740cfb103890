"""DCGAN: a generator and a discriminator, two tapes and two optimizers, batch norm in the
generator, dropout in the discriminator; "real" images are synthetic blobs."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from .common import State, apply_gradients, new_state

FUNCTION_WHY = None
LATENT, BATCH, SIDE = 16, 16, 16
L = keras.layers


def _generator() -> keras.Sequential:
    return keras.Sequential([
        keras.Input((LATENT,)),
        L.Dense(4 * 4 * 32, use_bias=False), L.BatchNormalization(), L.LeakyReLU(0.2),
        L.Reshape((4, 4, 32)),
        L.Conv2DTranspose(16, 4, 2, padding="same", use_bias=False), L.BatchNormalization(),
        L.LeakyReLU(0.2),
        L.Conv2DTranspose(1, 4, 2, padding="same", activation="tanh"),
    ])


def _discriminator() -> keras.Sequential:
    return keras.Sequential([
        keras.Input((SIDE, SIDE, 1)),
        L.Conv2D(16, 4, 2, padding="same"), L.LeakyReLU(0.2), L.Dropout(0.3),
        L.Conv2D(32, 4, 2, padding="same"), L.LeakyReLU(0.2), L.Dropout(0.3),
        L.Flatten(), L.Dense(1),
    ])


def _blobs(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` images of one Gaussian blob each, in [-1, 1]."""
    grid = np.linspace(0, 1, SIDE)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    centre = rng.uniform(0.25, 0.75, size=(n, 2, 1, 1))
    d2 = (yy - centre[:, 0]) ** 2 + (xx - centre[:, 1]) ** 2
    return (2 * np.exp(-d2 / 0.02) - 1)[..., None].astype("float32")


def make(seed: int) -> State:
    """Both models, both Adam optimizers and 128 real images."""
    state = new_state(seed)
    state.models = [_generator(), _discriminator()]
    state.optimizers = [keras.optimizers.Adam(2e-4, beta_1=0.5),
                        keras.optimizers.Adam(2e-4, beta_1=0.5)]
    state.images = _blobs(state.rng, 128)
    return state


def batch(state: State, i: int) -> tuple:
    """A random batch of real images and the generator's noise."""
    real = state.images[state.rng.integers(0, len(state.images), BATCH)]
    return real, state.rng.normal(size=(BATCH, LATENT)).astype("float32")


def _bce(labels_value: float, logits):
    labels = tf.fill(tf.shape(logits), labels_value)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


def train_step(state: State, real, noise) -> dict:
    """One GAN step: both losses under their own tape, each model updated by its optimizer."""
    gen, disc = state.models
    gen_opt, disc_opt = state.optimizers
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        fake = gen(noise, training=True)
        real_logits = disc(real, training=True)
        fake_logits = disc(fake, training=True)
        gen_loss = _bce(1.0, fake_logits)
        disc_loss = _bce(1.0, real_logits) + _bce(0.0, fake_logits)
    apply_gradients(gen_tape, gen_loss, gen.trainable_variables, gen_opt)
    apply_gradients(disc_tape, disc_loss, disc.trainable_variables, disc_opt)
    return {"loss": disc_loss, "gen_loss": gen_loss}
