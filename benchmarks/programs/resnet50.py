"""ResNet50, shortened: the bottleneck blocks with batch norm and projection shortcuts of
ResNet-50, one block per stage, on 32x32 synthetic images; SGD with momentum."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from .common import State, apply_gradients, conv_bn, new_state, sparse_ce

FUNCTION_WHY = None
BATCH, SIDE, CLASSES = 16, 32, 10
STAGES = ((8, 1), (16, 2), (32, 2))  # (bottleneck width, stride); the output is 4x the width
L = keras.layers


def _bottleneck(x, width: int, stride: int):
    shortcut = x
    if stride != 1 or x.shape[-1] != 4 * width:
        shortcut = conv_bn(4 * width, 1, stride, act=None)(x)
    y = conv_bn(width, 1)(x)
    y = conv_bn(width, 3, stride)(y)
    y = conv_bn(4 * width, 1, act=None)(y)
    return L.Activation("relu")(L.Add()([y, shortcut]))


def _model() -> keras.Model:
    inputs = keras.Input((SIDE, SIDE, 3))
    x = conv_bn(16, 3)(inputs)
    for width, stride in STAGES:
        x = _bottleneck(x, width, stride)
    outputs = L.Dense(CLASSES)(L.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, outputs)


def make(seed: int) -> State:
    """The model, SGD with momentum, and 64 images whose class sets their colour."""
    state = new_state(seed)
    state.models = [_model()]
    state.optimizers = [keras.optimizers.SGD(0.01, momentum=0.9)]
    labels = state.rng.integers(0, CLASSES, 64)
    colour = np.eye(CLASSES, 3, dtype="float32")[labels][:, None, None, :]
    noise = state.rng.normal(size=(64, SIDE, SIDE, 3)).astype("float32")
    state.images, state.labels = noise + colour, labels.astype("int32")
    return state


def batch(state: State, i: int) -> tuple:
    """A random batch, flipped left-right at random (augmentation in numpy)."""
    index = state.rng.integers(0, len(state.images), BATCH)
    images = state.images[index]
    flip = state.rng.random(BATCH) < 0.5
    images[flip] = images[flip, :, ::-1]
    return images, state.labels[index]


def train_step(state: State, images, labels):
    """Cross-entropy on the batch, batch norm in training mode."""
    model, = state.models
    with tf.GradientTape() as tape:
        loss = sparse_ce(labels, model(images, training=True))
    apply_gradients(tape, loss, model.trainable_variables, state.optimizers[0])
    return loss
