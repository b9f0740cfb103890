"""BERT-CLS: a small BERT encoder classifying sequences from the first token; the sequence
length changes from batch to batch (padding to the longest in the batch, as the original)."""

from __future__ import annotations

import keras
import tensorflow as tf

from .common import Encoder, State, apply_gradients, new_state, sparse_ce, token_batch

FUNCTION_WHY = None
BATCH, DIM, HEADS, LAYERS, VOCAB = 16, 32, 2, 1, 500
LENGTHS = (16, 24, 32)


def make(seed: int) -> State:
    """The encoder, a pooler + classifier head, and AdamW."""
    state = new_state(seed)
    head = keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(DIM, activation="tanh"),
                             keras.layers.Dense(2)])
    state.models = [Encoder(VOCAB, DIM, HEADS, LAYERS, max(LENGTHS)), head]
    state.optimizers = [keras.optimizers.AdamW(1e-3)]
    return state


def batch(state: State, i: int) -> tuple:
    """Token ids of a random length; the label says whether token 1 is below VOCAB/2."""
    ids = token_batch(state.rng, BATCH, LENGTHS, VOCAB)
    return ids, (ids[:, 1] < VOCAB // 2).astype("int32")


def train_step(state: State, ids, labels):
    """Cross-entropy of the classifier on the first token's encoding."""
    encoder, head = state.models
    variables = encoder.trainable_variables + head.trainable_variables
    with tf.GradientTape() as tape:
        loss = sparse_ce(labels, head(encoder(ids)[:, 0]))
    apply_gradients(tape, loss, variables, state.optimizers[0])
    return loss
