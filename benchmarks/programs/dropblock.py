"""DropBlock: a CNN regularised by DropBlock, whose keep probability and block size the step
schedules from Python by step number, writing them onto the layers (Python object mutation)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from .common import (
    State,
    apply_gradients,
    class_images,
    conv_bn,
    new_state,
    random_batch,
    sparse_ce,
)

FUNCTION_WHY = ("Python object mutation: the step counter and the scheduled keep probability "
                "are read once, when the step is traced")
BATCH, SIDE, CLASSES = 16, 24, 10
RAMP_STEPS, FINAL_KEEP = 16, 0.8
L = keras.layers


class DropBlock(L.Layer):
    """Drops contiguous ``block_size`` squares of a feature map with rate set by ``keep_prob``
    (Ghiasi et al. 2018); both are plain Python attributes the training loop schedules."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keep_prob, self.block_size = 1.0, 3
        self.seeds = keras.random.SeedGenerator(7)

    def call(self, x, training=False):
        if not training or self.keep_prob >= 1.0:
            return x
        _, h, w, _ = x.shape
        size = self.block_size
        gamma = (1 - self.keep_prob) / size ** 2 * h * w / ((h - size + 1) * (w - size + 1))
        drop = tf.cast(keras.random.uniform(tf.shape(x), seed=self.seeds) < gamma, x.dtype)
        keep = 1.0 - tf.nn.max_pool2d(drop, size, 1, "SAME")
        return x * keep * tf.cast(tf.size(keep), x.dtype) / (tf.reduce_sum(keep) + 1e-6)


class DropBlockNet(keras.Model):
    """Conv + batch norm stages with DropBlock after the last two."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.convs = [conv_bn(16), conv_bn(32, stride=2), conv_bn(32), conv_bn(32)]
        self.drops = [DropBlock(), DropBlock()]
        self.head = L.Dense(CLASSES)
        self(np.zeros((1, SIDE, SIDE, 3), "float32"))

    def call(self, x, training=False):
        for index, conv in enumerate(self.convs):
            x = conv(x, training=training)
            if index >= 2:
                x = self.drops[index - 2](x, training=training)
        return self.head(tf.reduce_mean(x, axis=(1, 2)))


def make(seed: int) -> State:
    """The network, Adam, the step counter and 64 images whose class sets their colour."""
    state = new_state(seed, step=0)
    state.models = [DropBlockNet()]
    state.optimizers = [keras.optimizers.Adam(1e-3)]
    class_images(state, 64, SIDE, CLASSES)
    return state


def batch(state: State, i: int) -> tuple:
    """A random batch of images and labels."""
    return random_batch(state, BATCH)


def train_step(state: State, images, labels):
    """Schedule DropBlock (keep probability ramps down, blocks grow), then one Adam step."""
    model, = state.models
    state.step += 1
    ramp = min(1.0, state.step / RAMP_STEPS)
    for drop in model.drops:
        drop.keep_prob = 1.0 - (1.0 - FINAL_KEEP) * ramp
        drop.block_size = 3 if ramp < 0.5 else 5
    with tf.GradientTape() as tape:
        loss = sparse_ce(labels, model(images, training=True))
    apply_gradients(tape, loss, model.trainable_variables, state.optimizers[0])
    return loss
