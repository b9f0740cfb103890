"""FasterRCNN: a conv backbone, a region proposal network over anchors, and a box head on
crop-and-resized regions. As in the original, the step materialises the RPN's outputs mid-step:
proposals are decoded, suppressed (NMS) and matched to the ground truth in numpy, and the sampled
regions go back into the model."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from .common import State, apply_gradients, box_images, conv_bn, iou, new_state, nms, sparse_ce

FUNCTION_WHY = "tensor materialisation: proposals are decoded, NMS'd and matched in numpy"
BATCH, SIDE, GRID, CLASSES, ROIS = 4, 32, 8, 3, 8
SIZES = (0.2, 0.35, 0.5)  # anchor sides (fractions of the image), one anchor per size per cell
L = keras.layers


def _anchors() -> np.ndarray:
    centres = (np.arange(GRID) + 0.5) / GRID
    cy, cx, side = np.meshgrid(centres, centres, SIZES, indexing="ij")
    half = side.reshape(-1) / 2
    cy, cx = cy.reshape(-1), cx.reshape(-1)
    return np.stack([cy - half, cx - half, cy + half, cx + half], 1).astype("float32")


ANCHORS = _anchors()


def encode(boxes: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Box regression targets of ``targets`` relative to ``boxes`` (dy, dx, dh, dw)."""
    size, tsize = boxes[:, 2:] - boxes[:, :2], targets[:, 2:] - targets[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    tcentre = (targets[:, :2] + targets[:, 2:]) / 2
    return np.concatenate([(tcentre - centre) / size, np.log(tsize / size)], 1).astype("float32")


def decode(boxes: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Boxes moved by ``deltas`` (the inverse of ``encode``), clipped to the image."""
    size = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2 + deltas[:, :2] * size
    size = size * np.exp(np.clip(deltas[:, 2:], -2, 2))
    return np.clip(np.concatenate([centre - size / 2, centre + size / 2], 1), 0, 1)


def make(seed: int) -> State:
    """Backbone, RPN, box head, SGD, and 32 images of 1-3 bright boxes on noise."""
    state = new_state(seed)
    backbone = keras.Sequential([keras.Input((SIDE, SIDE, 3)), conv_bn(16), conv_bn(32, 3, 2),
                                 conv_bn(32, 3, 2)])
    rpn = keras.Sequential([keras.Input((GRID, GRID, 32)), L.Conv2D(32, 3, padding="same",
                            activation="relu"), L.Conv2D(5 * len(SIZES), 1)])
    head = keras.Sequential([keras.Input((4, 4, 32)), L.Flatten(), L.Dense(64, activation="relu"),
                             L.Dense(CLASSES + 1 + 4)])
    state.models = [backbone, rpn, head]
    state.optimizers = [keras.optimizers.SGD(0.02, momentum=0.9)]
    box_images(state, 32, SIDE, CLASSES, max_boxes=3)
    return state


def batch(state: State, i: int) -> tuple:
    """Images and, from their boxes, the anchors' RPN labels (1, 0, -1 = ignored) and targets."""
    index = state.rng.integers(0, len(state.images), BATCH)
    labels = np.full((BATCH, len(ANCHORS)), -1, "float32")
    deltas = np.zeros((BATCH, len(ANCHORS), 4), "float32")
    for row, k in enumerate(index):
        overlap = iou(ANCHORS, state.boxes[k])
        best = overlap.max(1)
        labels[row, best < 0.3] = 0
        labels[row, best >= 0.5] = 1
        labels[row, overlap.argmax(0)] = 1  # every box gets its best anchor
        deltas[row] = encode(ANCHORS, state.boxes[k][overlap.argmax(1)])
    return state.images[index], labels, deltas, index


def _smooth_l1(diff):
    diff = tf.abs(diff)
    return tf.reduce_sum(tf.where(diff < 1.0, 0.5 * diff ** 2, diff - 0.5), -1)


def _rpn_loss(objectness, deltas, labels, targets):
    valid = tf.cast(labels >= 0, tf.float32)
    ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.maximum(labels, 0.0),
                                                 logits=objectness)
    positive = tf.cast(labels > 0, tf.float32)
    box = tf.reduce_sum(_smooth_l1(deltas - targets) * positive) / tf.reduce_sum(positive)
    return tf.reduce_sum(ce * valid) / tf.reduce_sum(valid) + box


def sample_rois(state: State, boxes: np.ndarray, scores: np.ndarray, k: int) -> tuple:
    """Proposals of one image after NMS plus its ground truth, matched and sampled in numpy:
    (ROIS boxes, class labels with 0 = background, regression targets)."""
    gt, classes = state.boxes[k], state.classes[k]
    big = np.all(boxes[:, 2:] - boxes[:, :2] > 0.05, 1)  # drop tiny proposals, as the original
    boxes, scores = boxes[big], scores[big]
    proposals = np.concatenate([boxes[nms(boxes, scores, 0.7, top=12)], gt])
    overlap = iou(proposals, gt)
    match = overlap.argmax(1)
    labels = np.where(overlap.max(1) >= 0.5, classes[match] + 1, 0)
    pick = state.rng.choice(len(proposals), ROIS, replace=len(proposals) < ROIS)
    chosen = proposals[pick]
    return chosen, labels[pick].astype("int32"), encode(chosen, gt[match[pick]])


def train_step(state: State, images, rpn_labels, rpn_targets, index):
    """RPN losses, then regions from the materialised proposals, then the box head's losses."""
    backbone, rpn, head = state.models
    variables = [v for m in state.models for v in m.trainable_variables]
    with tf.GradientTape() as tape:
        features = backbone(images, training=True)
        out = tf.reshape(rpn(features), (BATCH, -1, 5))
        objectness, deltas = out[..., 0], out[..., 1:]
        loss = _rpn_loss(objectness, deltas, rpn_labels, rpn_targets)
        scores, moved = objectness.numpy(), deltas.numpy()
        rois = [sample_rois(state, decode(ANCHORS, moved[b]), scores[b], int(index[b]))
                for b in range(BATCH)]
        boxes, labels, targets = (np.concatenate(part) for part in zip(*rois))
        crops = tf.image.crop_and_resize(features, boxes, np.repeat(np.arange(BATCH), ROIS), (4, 4))
        pred = head(crops)
        foreground = tf.cast(labels > 0, tf.float32)
        box = tf.reduce_sum(_smooth_l1(pred[:, CLASSES + 1:] - targets) * foreground)
        loss += sparse_ce(labels, pred[:, :CLASSES + 1]) + box / (tf.reduce_sum(foreground) + 1)
    apply_gradients(tape, loss, variables, state.optimizers[0])
    return loss
