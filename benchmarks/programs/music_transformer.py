"""MusicTransformer: a causal transformer with relative attention (Huang et al.'s "skewing")
over event sequences whose length changes from batch to batch; the step pulls its batch from
a Python generator of event windows, as the original's data loader is drawn from in the step."""

from __future__ import annotations

from collections.abc import Iterator

import keras
import numpy as np
import tensorflow as tf

from .common import State, apply_gradients, new_state, sparse_ce

FUNCTION_WHY = "generator: next() on the batch stream runs once, when the step is traced"
BATCH, DIM, HEADS, VOCAB, MAX_LEN = 8, 32, 2, 128, 32
LENGTHS = (17, 25, 33)  # windows of length + 1 (inputs and next-event targets)
L = keras.layers


def skew(qe):
    """Relative logits [b, h, l, l] (column m = distance l - 1 - m) to absolute positions."""
    b, h, length, _ = qe.shape
    padded = tf.pad(qe, [[0, 0], [0, 0], [0, 0], [1, 0]])
    return tf.reshape(padded, (b, h, length + 1, length))[:, :, 1:, :]


class RelativeAttention(L.Layer):
    """Causal multi-head self-attention with a learned embedding per relative distance."""

    def __init__(self, dim: int, heads: int, max_len: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.heads, self.depth, self.max_len = heads, dim // heads, max_len
        self.qkv, self.out = L.Dense(3 * dim), L.Dense(dim)
        self.relative = self.add_weight(shape=(max_len, self.depth), name="relative")

    def _split(self, x):
        b, length, _ = x.shape
        return tf.transpose(tf.reshape(x, (b, length, self.heads, self.depth)), (0, 2, 1, 3))

    def call(self, x):
        b, length, dim = x.shape
        q, k, v = (self._split(t) for t in tf.split(self.qkv(x), 3, axis=-1))
        # the embeddings of distances length-1 .. 0: a Python slice by this batch's length
        distances = self.relative[self.max_len - length:]
        logits = tf.matmul(q, k, transpose_b=True) + skew(tf.einsum("bhld,md->bhlm", q, distances))
        causal = np.triu(np.full((length, length), -1e9, "float32"), 1)
        weights = tf.nn.softmax(logits / self.depth ** 0.5 + causal)
        merged = tf.reshape(tf.transpose(tf.matmul(weights, v), (0, 2, 1, 3)), (b, length, dim))
        return self.out(merged)


class MusicTransformer(keras.Model):
    """Event embedding, one relative-attention decoder layer, next-event logits."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.embed = L.Embedding(VOCAB, DIM)
        self.attention = RelativeAttention(DIM, HEADS, MAX_LEN)
        self.norm1, self.norm2 = L.LayerNormalization(), L.LayerNormalization()
        self.ff = keras.Sequential([L.Dense(2 * DIM, activation="relu"), L.Dense(DIM)])
        self.logits = L.Dense(VOCAB)
        self(np.ones((1, 2), "int32"))

    def call(self, ids):
        x = self.embed(ids)
        x = self.norm1(x + self.attention(x))
        return self.logits(self.norm2(x + self.ff(x)))


def windows(rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Endless batches of event windows of a random length from one synthetic piece."""
    piece = (np.cumsum(rng.integers(-3, 4, 4096)) % VOCAB).astype("int32")
    while True:
        length = int(rng.choice(LENGTHS))
        starts = rng.integers(0, len(piece) - length, BATCH)
        yield np.stack([piece[s:s + length] for s in starts])


def make(seed: int) -> State:
    """The model, Adam, and the window stream."""
    state = new_state(seed)
    state.models = [MusicTransformer()]
    state.optimizers = [keras.optimizers.Adam(1e-3)]
    state.stream = windows(state.rng)
    return state


def train_step(state: State):
    """Next-event cross-entropy on the stream's next batch."""
    model, = state.models
    events = next(state.stream)
    with tf.GradientTape() as tape:
        loss = sparse_ce(events[:, 1:], model(events[:, :-1]))
    apply_gradients(tape, loss, model.trainable_variables, state.optimizers[0])
    return loss
