"""GPT2: a small causal transformer language model on batches whose length changes, trained
with dynamic loss scaling as in mixed-precision GPT-2 training: the step reads the gradient
norm, skips the update and halves the scale when it is not finite, and doubles the scale after
a run of good steps (Python state the step mutates)."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from .common import Encoder, State, new_state, sparse_ce, token_batch

FUNCTION_WHY = "tensor materialisation: float() of the gradient norm decides the update"
BATCH, DIM, HEADS, LAYERS, VOCAB = 16, 32, 2, 1, 500
LENGTHS = (17, 25, 33)  # one more than the model sees: the targets are the next tokens
GROWTH_INTERVAL = 4


def make(seed: int) -> State:
    """The decoder, its output projection, Adam and the loss scale."""
    state = new_state(seed, scale=2.0 ** 10, good_steps=0, skipped=0)
    head = keras.Sequential([keras.Input((None, DIM)), keras.layers.Dense(VOCAB)])
    state.models = [Encoder(VOCAB, DIM, HEADS, LAYERS, max(LENGTHS), causal=True), head]
    state.optimizers = [keras.optimizers.Adam(1e-3)]
    return state


def batch(state: State, i: int) -> tuple:
    """Token ids of a random length (repeating pairs, so there is something to learn)."""
    ids = token_batch(state.rng, BATCH, LENGTHS, VOCAB)
    ids[:, 1::2] = ids[:, 0:-1:2] % 7
    return (ids,)


def _unscale(grad, scale: float):
    """``grad / scale``; an embedding's gradient stays sparse."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / scale, grad.indices, grad.dense_shape)
    return grad / scale


def train_step(state: State, ids):
    """Next-token cross-entropy, scaled; the update only when the gradient norm is finite."""
    decoder, head = state.models
    variables = decoder.trainable_variables + head.trainable_variables
    with tf.GradientTape() as tape:
        logits = head(decoder(ids[:, :-1]))
        loss = sparse_ce(ids[:, 1:], logits)
        scaled = loss * state.scale
    grads = [_unscale(g, state.scale) for g in tape.gradient(scaled, variables)]
    norm = tf.linalg.global_norm(grads)
    if math.isfinite(float(norm)):
        grads, _ = tf.clip_by_global_norm(grads, 1.0, use_norm=norm)
        state.optimizers[0].apply_gradients(zip(grads, variables))
        state.good_steps += 1
        if state.good_steps % GROWTH_INTERVAL == 0:
            state.scale *= 2.0
    else:
        state.scale, state.good_steps, state.skipped = state.scale / 2, 0, state.skipped + 1
    return loss
