"""BERT-Q&A: a small BERT encoder predicting answer start and end positions (SQuAD style) on
batches whose sequence length changes; after each update the step decodes the best answer
spans in numpy from the materialised logits (as the original's exact-match bookkeeping)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from .common import Encoder, State, apply_gradients, new_state, sparse_ce, token_batch

FUNCTION_WHY = "third-party call: numpy decodes answer spans from the logits' values"
BATCH, DIM, HEADS, LAYERS, VOCAB = 16, 32, 2, 1, 500
LENGTHS = (16, 24, 32)
MAX_ANSWER = 6


def make(seed: int) -> State:
    """The encoder, a start/end head and AdamW; ``exact`` counts exact-match spans."""
    state = new_state(seed, exact=[])
    head = keras.Sequential([keras.Input((None, DIM)), keras.layers.Dense(2)])
    state.models = [Encoder(VOCAB, DIM, HEADS, LAYERS, max(LENGTHS)), head]
    state.optimizers = [keras.optimizers.AdamW(1e-3)]
    return state


def batch(state: State, i: int) -> tuple:
    """Token ids of a random length and answer spans marked by token 1 (start) and 2 (end)."""
    ids = token_batch(state.rng, BATCH, LENGTHS, VOCAB)
    length = ids.shape[1]
    starts = state.rng.integers(1, length - MAX_ANSWER, BATCH).astype("int32")
    ends = (starts + state.rng.integers(0, MAX_ANSWER, BATCH)).astype("int32")
    ids[np.arange(BATCH), starts], ids[np.arange(BATCH), ends] = 1, 2
    return ids, starts, ends


def best_spans(start_logits: np.ndarray, end_logits: np.ndarray) -> np.ndarray:
    """The (start, end) of each row with the highest score, start <= end < start + MAX_ANSWER."""
    score = start_logits[:, :, None] + end_logits[:, None, :]
    length = score.shape[1]
    offset = np.arange(length)[None, :] - np.arange(length)[:, None]
    score = np.where((offset >= 0) & (offset < MAX_ANSWER), score, -np.inf)
    flat = np.argmax(score.reshape(len(score), -1), axis=1)
    return np.stack([flat // length, flat % length], axis=1)


def train_step(state: State, ids, starts, ends):
    """Start and end cross-entropy, the update, then exact-match spans decoded in numpy."""
    encoder, head = state.models
    variables = encoder.trainable_variables + head.trainable_variables
    with tf.GradientTape() as tape:
        logits = head(encoder(ids))
        start_logits, end_logits = logits[..., 0], logits[..., 1]
        loss = (sparse_ce(starts, start_logits) + sparse_ce(ends, end_logits)) / 2
    apply_gradients(tape, loss, variables, state.optimizers[0])
    spans = best_spans(np.asarray(start_logits), np.asarray(end_logits))
    state.exact.append(int(np.sum((spans[:, 0] == starts) & (spans[:, 1] == ends))))
    return loss
