"""YOLOv3: a Darknet-style backbone (conv + batch norm + leaky ReLU, a residual block) and one
detection scale with three anchors. Targets are matched to anchors and grid cells in numpy in the
input pipeline; the loss ignores predictions overlapping a box; every few steps the loop decodes
the materialised predictions and keeps the detections with numpy NMS."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from .common import LOG_EVERY, State, apply_gradients, box_images, conv_bn, new_state, nms

FUNCTION_WHY = None
BATCH, SIDE, GRID, CLASSES, MAX_BOXES = 8, 32, 8, 3, 3
ANCHORS = np.array([[0.15, 0.15], [0.3, 0.25], [0.45, 0.45]], "float32")  # (h, w)
L = keras.layers


class Darknet(keras.Model):
    """Stride-4 backbone with one residual block and a 1x1 detection head."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stem = keras.Sequential([conv_bn(16, act="leaky"), conv_bn(32, 3, 2, act="leaky")])
        self.residual = keras.Sequential([conv_bn(16, 1, act="leaky"), conv_bn(32, act="leaky")])
        self.down = conv_bn(64, 3, 2, act="leaky")
        self.head = L.Conv2D(len(ANCHORS) * (5 + CLASSES), 1)
        self(np.zeros((1, SIDE, SIDE, 3), "float32"))

    def call(self, x, training=False):
        x = self.stem(x, training=training)
        x = x + self.residual(x, training=training)
        return self.head(self.down(x, training=training))


def make(seed: int) -> State:
    """The model, Adam, and 32 images of 1-3 bright boxes on noise."""
    state = new_state(seed, detections=[])
    state.models = [Darknet()]
    state.optimizers = [keras.optimizers.Adam(1e-3)]
    box_images(state, 32, SIDE, CLASSES, MAX_BOXES)
    return state


def targets(boxes: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """[GRID, GRID, anchors, 5 + CLASSES]: each box at its cell and best-shaped anchor, as
    (cell offset y, x, log size ratio h, w, objectness, one-hot class)."""
    out = np.zeros((GRID, GRID, len(ANCHORS), 5 + CLASSES), "float32")
    size = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    inter = np.prod(np.minimum(size[:, None], ANCHORS[None]), -1)
    shape_iou = inter / (np.prod(size, -1)[:, None] + np.prod(ANCHORS, -1)[None] - inter)
    for box, anchor in enumerate(shape_iou.argmax(1)):
        cy, cx = (centre[box] * GRID).astype(int)
        out[cy, cx, anchor, :2] = centre[box] * GRID - (cy, cx)
        out[cy, cx, anchor, 2:4] = np.log(size[box] / ANCHORS[anchor])
        out[cy, cx, anchor, 4] = 1.0
        out[cy, cx, anchor, 5 + classes[box]] = 1.0
    return out


def batch(state: State, i: int) -> tuple:
    """Images, their grid targets and their boxes padded to MAX_BOXES (zero boxes match none)."""
    index = state.rng.integers(0, len(state.images), BATCH)
    grid = np.stack([targets(state.boxes[k], state.classes[k]) for k in index])
    padded = np.zeros((BATCH, MAX_BOXES, 4), "float32")
    for row, k in enumerate(index):
        padded[row, :len(state.boxes[k])] = state.boxes[k]
    return state.images[index], grid, padded


def _boxes(pred):
    """Predicted boxes (y1, x1, y2, x2) of [b, g, g, a, 5 + C] raw outputs."""
    cells = np.stack(np.meshgrid(np.arange(GRID), np.arange(GRID), indexing="ij"), -1)
    centre = (tf.sigmoid(pred[..., :2]) + cells[:, :, None].astype("float32")) / GRID
    size = tf.exp(tf.clip_by_value(pred[..., 2:4], -4.0, 4.0)) * ANCHORS
    return tf.concat([centre - size / 2, centre + size / 2], -1)


def _ignore(pred_boxes, gt):
    """1 where a prediction overlaps no box by more than 0.5 (its no-object loss counts)."""
    p = tf.reshape(pred_boxes, (BATCH, -1, 1, 4))
    g = gt[:, None]
    inter = tf.reduce_prod(tf.nn.relu(tf.minimum(p[..., 2:], g[..., 2:])
                                      - tf.maximum(p[..., :2], g[..., :2])), -1)
    union = (tf.reduce_prod(p[..., 2:] - p[..., :2], -1)
             + tf.reduce_prod(g[..., 2:] - g[..., :2], -1) - inter)
    best = tf.reduce_max(inter / (union + 1e-9), -1)
    return tf.reshape(tf.cast(best < 0.5, tf.float32), pred_boxes.shape[:-1])


def train_step(state: State, images, grid, gt):
    """The YOLOv3 loss (box, objectness with the ignore mask, class), one Adam step."""
    model, = state.models
    with tf.GradientTape() as tape:
        pred = tf.reshape(model(images, training=True), (BATCH, GRID, GRID, len(ANCHORS), -1))
        obj = grid[..., 4]
        bce = tf.nn.sigmoid_cross_entropy_with_logits
        xy = tf.reduce_sum(bce(labels=grid[..., :2], logits=pred[..., :2]), -1)
        wh = tf.reduce_sum(tf.square(grid[..., 2:4] - pred[..., 2:4]), -1)
        cls = tf.reduce_sum(bce(labels=grid[..., 5:], logits=pred[..., 5:]), -1)
        noobj = (1.0 - obj) * _ignore(_boxes(pred), gt)
        objectness = bce(labels=obj, logits=pred[..., 4]) * (obj + noobj)
        loss = tf.reduce_sum(obj * (xy + wh + cls) + objectness) / BATCH
    apply_gradients(tape, loss, model.trainable_variables, state.optimizers[0])
    return {"loss": loss, "pred": pred}


def log(state: State, i: int, out: dict) -> None:
    """Every LOG_EVERY steps: the loss, and the detections kept by NMS on the first image."""
    if i % LOG_EVERY:
        return
    state.logs.append(float(out["loss"]))
    pred = np.asarray(out["pred"][0])
    scores = (1 / (1 + np.exp(-pred[..., 4]))).reshape(-1)
    boxes = np.asarray(_boxes(out["pred"][:1])).reshape(-1, 4)
    kept = nms(boxes, scores, 0.45)
    state.detections.append(int(np.sum(scores[kept] > 0.3)))
