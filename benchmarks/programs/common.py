"""What the paper programs share: their state, one loop iteration, the compared weights, the
blocks several models use (transformer, conv + batch norm) and numpy box operations."""

from __future__ import annotations

import random
from types import ModuleType, SimpleNamespace
from typing import Any

import keras
import numpy as np
import tensorflow as tf

LOG_EVERY = 4  # the loop logs the loss every LOG_EVERY iterations, as the originals print it


class State(SimpleNamespace):
    """Everything a program keeps between iterations. ``models`` and ``optimizers`` hold what
    ``weights`` compares; ``rng`` (numpy) feeds the input pipeline and ``py_rng`` (Python
    ``random``) the step's own random choices; ``logs`` collects the logged losses."""

    models: list
    optimizers: list
    rng: np.random.Generator
    py_rng: random.Random
    logs: list


def new_state(seed: int, **fields: Any) -> State:
    """A State with every random source seeded from ``seed`` (call before building models, so
    that Keras initialisers and seed generators are seeded too)."""
    keras.utils.set_random_seed(seed)
    return State(rng=np.random.default_rng(seed), py_rng=random.Random(seed), logs=[], **fields)


def step(program: ModuleType, state: State, i: int, train=None) -> None:
    """One iteration of the training loop: the input pipeline, the step (``train``, e.g. a
    ``tf.function`` of it, instead of ``program.train_step`` when given), then the loop's Python."""
    inputs = getattr(program, "batch", lambda s, i: ())(state, i)
    out = (train or (lambda *a: program.train_step(state, *a)))(*inputs)
    logger = getattr(program, "log", None)
    if logger is not None:
        logger(state, i, out)
    elif i % LOG_EVERY == 0:
        loss = out["loss"] if isinstance(out, dict) else out
        state.logs.append(float(loss))


def weights(state: State) -> list[np.ndarray]:
    """The values compared across modes: every model weight and optimizer variable."""
    values = [v for m in state.models for v in m.weights]
    values += [v for opt in state.optimizers for v in opt.variables]
    return [np.array(v.numpy()) for v in values]


def apply_gradients(tape: tf.GradientTape, loss, variables: list, optimizer) -> list:
    """``optimizer`` applies the gradients of ``loss`` (recorded on ``tape``); returns them."""
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return grads


def sparse_ce(labels, logits):
    """Mean sparse softmax cross-entropy."""
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


# -- blocks ------------------------------------------------------------------------------------


class TransformerBlock(keras.layers.Layer):
    """Post-norm transformer block (BERT/GPT style): self-attention and a feed-forward layer."""

    def __init__(self, dim: int, heads: int, causal: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.causal = causal
        self.attention = keras.layers.MultiHeadAttention(heads, dim // heads)
        self.ff1 = keras.layers.Dense(2 * dim, activation="gelu")
        self.ff2 = keras.layers.Dense(dim)
        self.norm1 = keras.layers.LayerNormalization()
        self.norm2 = keras.layers.LayerNormalization()

    def call(self, x):
        x = self.norm1(x + self.attention(x, x, use_causal_mask=self.causal))
        return self.norm2(x + self.ff2(self.ff1(x)))


class Embed(keras.layers.Layer):
    """Token plus learned position embeddings, for sequences up to ``max_len``."""

    def __init__(self, vocab: int, dim: int, max_len: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens = keras.layers.Embedding(vocab, dim)
        self.positions = keras.layers.Embedding(max_len, dim)

    def call(self, ids):
        # the length is a Python int read from the (static) shape: one path per length
        return self.tokens(ids) + self.positions(tf.range(ids.shape[1]))


class Encoder(keras.Model):
    """Embeddings and ``layers`` transformer blocks: [batch, length] ids -> [batch, length, dim].
    Built on a dummy batch, so its weights exist before the first step."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, max_len: int,
                 causal: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.embed = Embed(vocab, dim, max_len)
        self.blocks = [TransformerBlock(dim, heads, causal) for _ in range(layers)]
        self(np.ones((1, 2), "int32"))

    def call(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return x


def token_batch(rng: np.random.Generator, batch: int, lengths: tuple, vocab: int) -> np.ndarray:
    """Token ids of a batch whose length is drawn from ``lengths`` (variable length per batch)."""
    length = int(rng.choice(lengths))
    return rng.integers(1, vocab, size=(batch, length)).astype("int32")


def conv_bn(filters: int, kernel: int = 3, stride: int = 1, act: str = "relu") -> keras.Sequential:
    """Conv (no bias) + batch norm + activation, the unit of ResNet and Darknet."""
    layers = [keras.layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False),
              keras.layers.BatchNormalization()]
    if act == "leaky":
        layers.append(keras.layers.LeakyReLU(0.1))
    elif act:
        layers.append(keras.layers.Activation(act))
    return keras.Sequential(layers)


# -- numpy boxes (y1, x1, y2, x2) ------------------------------------------------------------


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes ``a`` [N, 4] and ``b`` [M, 4]: [N, M]."""
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=-1)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=-1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter + 1e-9)


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float = 0.5, top: int = 16) -> np.ndarray:
    """Greedy non-maximum suppression in numpy: indices of the kept boxes, best first."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size and len(keep) < top:
        best, order = order[0], order[1:]
        keep.append(int(best))
        order = order[iou(boxes[best:best + 1], boxes[order])[0] < threshold]
    return np.array(keep, dtype="int64")


def random_boxes(rng: np.random.Generator, n: int, low: float = 0.15,
                 high: float = 0.5) -> np.ndarray:
    """``n`` boxes inside the unit square with sides in [low, high]: [n, 4] float32."""
    size = rng.uniform(low, high, size=(n, 2))
    corner = rng.uniform(0, 1 - size)
    return np.concatenate([corner, corner + size], axis=1).astype("float32")


def class_images(state: State, count: int, side: int, classes: int) -> None:
    """``count`` noisy images whose class sets their colour: ``state.images``, ``state.labels``."""
    labels = state.rng.integers(0, classes, count)
    colour = np.eye(classes, 3, dtype="float32")[labels][:, None, None, :]
    state.images = state.rng.normal(size=(count, side, side, 3)).astype("float32") + colour
    state.labels = labels.astype("int32")


def random_batch(state: State, size: int) -> tuple:
    """A random batch of ``state``'s images and labels."""
    index = state.rng.integers(0, len(state.images), size)
    return state.images[index], state.labels[index]


def box_images(state: State, count: int, side: int, classes: int, max_boxes: int) -> None:
    """``count`` images of 1 to ``max_boxes`` bright boxes on noise, the box's class setting its
    colour: ``state.images``, ``state.boxes`` (unit coordinates), ``state.classes``."""
    state.boxes = [random_boxes(state.rng, int(state.rng.integers(1, max_boxes + 1)))
                   for _ in range(count)]
    state.classes = [state.rng.integers(0, classes, len(b)) for b in state.boxes]
    state.images = state.rng.normal(0, 0.3, (count, side, side, 3)).astype("float32")
    for image, boxes, labels in zip(state.images, state.boxes, state.classes):
        for (y1, x1, y2, x2), c in zip((boxes * side).astype(int), labels):
            image[y1:y2, x1:x2, c] += 1.0
