"""SDPoint: a residual CNN that, at every iteration, draws with Python ``random`` a stochastic
downsampling point (the block before which the feature map is shrunk) and ratio, or none."""

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

FUNCTION_WHY = "Python random: the downsampling point drawn when traced is used in every call"
BATCH, SIDE, CLASSES, WIDTH, BLOCKS = 16, 24, 10, 16, 3
CHOICES = (None, (1, 0.5), (2, 0.5), (1, 0.75))  # (block index, downsampling ratio)
L = keras.layers


class SDPointNet(keras.Model):
    """A stem and residual conv + batch norm blocks; ``call(x, point)`` downsamples at ``point``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stem = conv_bn(WIDTH)
        self.blocks = [keras.Sequential([conv_bn(WIDTH), conv_bn(WIDTH, act=None)])
                       for _ in range(BLOCKS)]
        self.head = L.Dense(CLASSES)
        self(np.zeros((1, SIDE, SIDE, 3), "float32"))

    def call(self, x, point=None, training=False):
        x = self.stem(x, training=training)
        for index, block in enumerate(self.blocks):
            if point is not None and point[0] == index:
                side = int(round(x.shape[1] * point[1]))
                x = tf.image.resize(x, (side, side), method="bilinear")
            x = tf.nn.relu(x + block(x, training=training))
        return self.head(tf.reduce_mean(x, axis=(1, 2)))


def make(seed: int) -> State:
    """The network, SGD with momentum, and 64 images whose class sets their colour."""
    state = new_state(seed)
    state.models = [SDPointNet()]
    state.optimizers = [keras.optimizers.SGD(0.05, momentum=0.9)]
    class_images(state, 64, SIDE, CLASSES)
    return state


def batch(state: State, i: int) -> tuple:
    """A random batch of images and labels."""
    return random_batch(state, BATCH)


def train_step(state: State, images, labels):
    """Cross-entropy with a downsampling point drawn by Python ``random`` for this step."""
    model, = state.models
    point = state.py_rng.choice(CHOICES)
    with tf.GradientTape() as tape:
        loss = sparse_ce(labels, model(images, point=point, training=True))
    apply_gradients(tape, loss, model.trainable_variables, state.optimizers[0])
    return loss
