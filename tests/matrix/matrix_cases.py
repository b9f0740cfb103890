"""The pieces the differential matrix is generated from: data, models, layers, losses,
metrics, optimizers and optimizer options, and the one training loop every case runs.

Every builder makes a fresh object, so that a program builds all its state after
``keras.utils.set_random_seed`` and the eager run and each Terra run start from the same bits.
Shapes are tiny: a case is about its Python and its ops, not its arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

L = keras.layers
# 20 steps: a region that misses its guard forms again from co-executed runs, and a wrong branch
# there (ab99a81's optimizers with accumulation, EMA or loss scaling) showed only at step 15 on
STEPS = 20
BATCH = 8
CLASSES = 4
SEQ = 5  # time steps of a sequence input


# -- data -----------------------------------------------------------------------------------

def inputs(kind: str, rs: np.random.RandomState) -> np.ndarray:
    """One batch of ``kind`` inputs: vec f32[8, 8], seq f32[8, 5, 3], img f32[8, 6, 6, 2]
    (centred, so ReLUs see zeros and negatives) or tokens int64[8, 6] below 20."""
    if kind == "tokens":
        return rs.randint(0, 20, (BATCH, 6)).astype("int64")
    shape = {"vec": (8,), "seq": (SEQ, 3), "img": (6, 6, 2)}[kind]
    return (rs.rand(BATCH, *shape) - 0.5).astype("float32")


def targets(kind: str, rs: np.random.RandomState) -> np.ndarray:
    """One batch of ``kind`` targets: classes int64[8], onehot / dist / regress f32[8, 4],
    binary f32[8, 1] of 0 and 1."""
    if kind == "classes":
        return rs.randint(0, CLASSES, BATCH).astype("int64")
    if kind == "onehot":
        return np.eye(CLASSES, dtype="float32")[rs.randint(0, CLASSES, BATCH)]
    if kind == "binary":
        return rs.randint(0, 2, (BATCH, 1)).astype("float32")
    if kind == "dist":
        e = np.exp(rs.randn(BATCH, CLASSES))
        return (e / e.sum(-1, keepdims=True)).astype("float32")
    return rs.randn(BATCH, CLASSES).astype("float32")  # regress


def batches(x_kind: str, y_kind: str, steps: int = STEPS, seed: int = 1) -> list:
    rs = np.random.RandomState(seed)
    return [(tf.constant(inputs(x_kind, rs)), tf.constant(targets(y_kind, rs)))
            for _ in range(steps)]


# -- layers and models ----------------------------------------------------------------------

@tf.custom_gradient
def reverse_gradient(x):
    """Gradient reversal: the forward pass is the identity, the backward pass is -dy."""

    def grad(dy):
        return -dy

    return tf.identity(x), grad


class GradientReversal(keras.layers.Layer):
    """A custom layer whose gradient is a ``tf.custom_gradient``."""

    def call(self, x):
        return reverse_gradient(x)


class MaskedAttention(keras.Model):
    """Self-attention over a sequence with an attention mask: causal, and keys whose first
    feature is below -0.3 hidden (a mask that changes with the data)."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = L.MultiHeadAttention(num_heads=2, key_dim=4)
        self.flat, self.out = L.Flatten(), L.Dense(CLASSES)

    def call(self, x, training=None):
        causal = np.tril(np.ones((SEQ, SEQ), bool))
        mask = tf.logical_and(causal, (x[:, :, 0] > -0.3)[:, None, :])
        h = self.attention(x, x, attention_mask=mask, training=training)
        return self.out(self.flat(h))


# name -> (input kind, the layers between the input and the classifier head)
LAYERS: dict[str, tuple[str, Callable[[], list]]] = {
    "dense": ("vec", lambda: [L.Dense(8, activation="relu")]),
    "conv1d": ("seq", lambda: [L.Conv1D(4, 2, activation="relu"), L.Flatten()]),
    "conv2d": ("img", lambda: [L.Conv2D(4, 3, activation="relu"), L.Flatten()]),
    "batchnorm": ("vec", lambda: [L.Dense(8), L.BatchNormalization(), L.ReLU()]),
    "layernorm": ("vec", lambda: [L.Dense(8), L.LayerNormalization()]),
    "groupnorm": ("vec", lambda: [L.Dense(8), L.GroupNormalization(groups=2)]),
    "dropout": ("vec", lambda: [L.Dense(8, activation="relu"), L.Dropout(0.3)]),
    "spatialdropout1d": ("seq", lambda: [L.Conv1D(4, 2), L.SpatialDropout1D(0.3), L.Flatten()]),
    "spatialdropout2d": ("img", lambda: [L.Conv2D(4, 3), L.SpatialDropout2D(0.3), L.Flatten()]),
    "gaussiannoise": ("vec", lambda: [L.GaussianNoise(0.1), L.Dense(8, activation="relu")]),
    "embedding": ("tokens", lambda: [L.Embedding(20, 4), L.GlobalAveragePooling1D()]),
    "lstm": ("seq", lambda: [L.LSTM(4)]),
    "gru": ("seq", lambda: [L.GRU(4)]),
    "lstm-cell": ("seq", lambda: [L.RNN(L.LSTMCell(4))]),
    "gru-cell": ("seq", lambda: [L.RNN(L.GRUCell(4))]),
    "bidirectional": ("seq", lambda: [L.Bidirectional(L.LSTM(3))]),
    "timedistributed": ("seq", lambda: [L.TimeDistributed(L.Dense(4, activation="relu")),
                                        L.Flatten()]),
    "mha-mask": ("seq", None),  # MaskedAttention
    "activity-regularizer": ("vec", lambda: [
        L.Dense(8, activation="relu", activity_regularizer=keras.regularizers.L2(1e-2))]),
    "kernel-constraint": ("vec", lambda: [
        L.Dense(8, activation="relu", kernel_constraint=keras.constraints.MaxNorm(0.5))]),
    "custom-gradient": ("vec", lambda: [L.Dense(8, activation="relu"), GradientReversal(),
                                        L.Dense(8, activation="relu")]),
}


def layer_model(name: str) -> keras.Model:
    """The small classifier of layer ``name``: its input, its layers, a Dense(4) of logits."""
    x_kind, body = LAYERS[name]
    if body is None:
        return MaskedAttention()
    shape = {"vec": (8,), "seq": (SEQ, 3), "img": (6, 6, 2), "tokens": (6,)}[x_kind]
    dtype = "int64" if x_kind == "tokens" else "float32"
    return keras.Sequential([keras.Input(shape, dtype=dtype), *body(), L.Dense(CLASSES)])


def mlp(head: str = "logits") -> keras.Model:
    """Dense(8, relu) and a head: logits (4), softmax (4), sigmoid (1), binary-logits (1) or
    linear (4)."""
    out = {"logits": L.Dense(CLASSES), "softmax": L.Dense(CLASSES, activation="softmax"),
           "sigmoid": L.Dense(1, activation="sigmoid"), "binary-logits": L.Dense(1),
           "linear": L.Dense(CLASSES)}[head]
    return keras.Sequential([keras.Input((8,)), L.Dense(8, activation="relu"), out])


# -- losses ---------------------------------------------------------------------------------

# name -> (loss, the model's head, the target kind)
LOSSES: dict[str, tuple[Callable[[], keras.losses.Loss], str, str]] = {
    "mse": (keras.losses.MeanSquaredError, "linear", "regress"),
    "mae": (keras.losses.MeanAbsoluteError, "linear", "regress"),
    "huber": (lambda: keras.losses.Huber(delta=0.5), "linear", "regress"),
    "binary-crossentropy": (keras.losses.BinaryCrossentropy, "sigmoid", "binary"),
    "binary-crossentropy-logits": (
        lambda: keras.losses.BinaryCrossentropy(from_logits=True), "binary-logits", "binary"),
    "categorical-crossentropy": (keras.losses.CategoricalCrossentropy, "softmax", "onehot"),
    "categorical-crossentropy-logits": (
        lambda: keras.losses.CategoricalCrossentropy(from_logits=True), "logits", "onehot"),
    "sparse-categorical-crossentropy": (
        lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True), "logits",
        "classes"),
    "kl-divergence": (keras.losses.KLDivergence, "softmax", "dist"),
    "cosine-similarity": (keras.losses.CosineSimilarity, "linear", "regress"),
}


def sparse_logits_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


# -- metrics --------------------------------------------------------------------------------

def accuracy_args(y, out, loss):
    return y, tf.argmax(out, -1)


def probability_args(y, out, loss):
    return y, tf.sigmoid(out)


# name -> (metric, the task, its update_state arguments); a task is trained with its loss (a
# binary one from logits: the metrics see their sigmoid, made in the loop)
TASKS = {"classes": "sparse-categorical-crossentropy", "binary": "binary-crossentropy-logits",
         "regress": "mse"}
METRICS: dict[str, tuple[Callable[[], keras.metrics.Metric], str, Callable]] = {
    "mean": (keras.metrics.Mean, "classes", lambda y, out, loss: (loss,)),
    "accuracy": (keras.metrics.Accuracy, "classes", accuracy_args),
    "sparse-categorical-accuracy": (keras.metrics.SparseCategoricalAccuracy, "classes",
                                    lambda y, out, loss: (y, out)),
    "auc": (lambda: keras.metrics.AUC(num_thresholds=50), "binary", probability_args),
    "precision": (keras.metrics.Precision, "binary", probability_args),
    "recall": (keras.metrics.Recall, "binary", probability_args),
    "mean-squared-error": (keras.metrics.MeanSquaredError, "regress",
                           lambda y, out, loss: (y, out)),
}
RESULT_AT = (3, 7, 11, 15)  # steps after which the loop reads result()
RESET_AT = 9  # the step after whose update the loop calls reset_state()


# -- optimizers and their options -----------------------------------------------------------

OPT = keras.optimizers
# name -> (class, learning rate, its own arguments)
OPTIMIZERS: dict[str, tuple[type, float, dict]] = {
    "sgd": (OPT.SGD, 2e-2, {}),
    "sgd-momentum": (OPT.SGD, 1e-2, {"momentum": 0.9}),
    "sgd-nesterov": (OPT.SGD, 1e-2, {"momentum": 0.9, "nesterov": True}),
    "adam": (OPT.Adam, 1e-2, {}),
    "adamw": (OPT.AdamW, 1e-2, {}),
    "rmsprop": (OPT.RMSprop, 1e-2, {}),
    "adagrad": (OPT.Adagrad, 5e-2, {}),
    "adadelta": (OPT.Adadelta, 1.0, {}),
    "adamax": (OPT.Adamax, 1e-2, {}),
    "nadam": (OPT.Nadam, 1e-2, {}),
    "ftrl": (OPT.Ftrl, 5e-2, {}),
    "lion": (OPT.Lion, 3e-3, {}),
    "lamb": (OPT.Lamb, 1e-2, {}),
    "adafactor": (OPT.Adafactor, 1e-2, {}),
}
OPTION_ARGS = {
    "none": {},
    "accumulate-3": {"gradient_accumulation_steps": 3},
    "ema-3": {"use_ema": True, "ema_overwrite_frequency": 3},
    "clipnorm": {"clipnorm": 0.1},
    "clipvalue": {"clipvalue": 0.02},
    "global-clipnorm": {"global_clipnorm": 0.1},
    "weight-decay": {"weight_decay": 0.05},
    "exponential-decay": {},
    "subclassed-schedule": {},
    "loss-scale": {},
}
OPTIONS = tuple(OPTION_ARGS)


class HalvedEvery(keras.optimizers.schedules.LearningRateSchedule):
    """A subclassed schedule: ``initial`` halved every ``every`` steps."""

    def __init__(self, initial: float, every: int) -> None:
        self.initial, self.every = initial, every

    def __call__(self, step):
        halvings = keras.ops.floor(keras.ops.cast(step, "float32") / self.every)
        return self.initial * keras.ops.power(0.5, halvings)

    def get_config(self) -> dict:
        return {"initial": self.initial, "every": self.every}


def with_option(name: str, option: str) -> keras.optimizers.Optimizer:
    """Optimizer ``name`` with ``option`` (one of ``OPTIONS``): its arguments, a learning rate
    schedule (built-in or subclassed), or a LossScaleOptimizer around it."""
    cls, lr, own = OPTIMIZERS[name]
    if option == "exponential-decay":
        lr = OPT.schedules.ExponentialDecay(lr, decay_steps=4, decay_rate=0.7)
    elif option == "subclassed-schedule":
        lr = HalvedEvery(lr, 4)
    opt = cls(lr, **own, **OPTION_ARGS[option])
    if option == "loss-scale":
        return OPT.LossScaleOptimizer(opt, dynamic_growth_steps=4)
    return opt


# -- the program ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One training loop: the model, optimizer, loss and metric builders, the data, and
    whether the loop reads ``float(loss)`` every step (else it keeps the loss tensors)."""

    model: Callable[[], keras.Model]
    optimizer: Callable[[], keras.optimizers.Optimizer]
    loss: Callable[[], keras.losses.Loss]
    data: Callable[[], list]
    metric: Callable[[], keras.metrics.Metric] | None = None
    metric_args: Callable | None = None
    read_loss: bool = True


def train_step(net, opt, lossf, x, y):
    """One step as Keras documents a custom loop: the loss (with the model's own losses) under
    the tape, scaled by ``opt.scale_loss`` (a LossScaleOptimizer's scale; otherwise the loss
    itself), the gradient, ``apply_gradients``. Returns (outputs, loss)."""
    with tf.GradientTape() as tape:
        out = net(x, training=True)
        loss = lossf(y, out)
        if net.losses:
            loss = loss + tf.add_n(net.losses)
        scaled = opt.scale_loss(loss)
    grads = tape.gradient(scaled, net.trainable_variables)
    opt.apply_gradients(zip(grads, net.trainable_variables))
    return out, loss


def variables_of(net, opt) -> list:
    """(path, value) of every model variable and optimizer variable (a LossScaleOptimizer's
    and its inner optimizer's), each once, in a fixed order."""
    seen, out = set(), []
    optimizers = [opt, getattr(opt, "inner_optimizer", None)]
    for v in [*net.variables, *(v for o in optimizers if o is not None for v in o.variables)]:
        if id(v) not in seen:
            seen.add(id(v))
            out.append((v.path, v.numpy()))
    return out


def program(case: Case):
    """``program(loop)`` for ``region_programs.run``: ({"loss": per-step losses, "metric":
    results read}, variables)."""

    def loop_over(loop):
        net, opt, lossf = case.model(), case.optimizer(), case.loss()
        metric = case.metric() if case.metric else None
        losses, results = [], []
        for i, (x, y) in enumerate(loop(case.data())):
            out, loss = train_step(net, opt, lossf, x, y)
            losses.append(float(loss) if case.read_loss else loss)
            if metric is not None:
                metric.update_state(*case.metric_args(y, out, loss))
                if i in RESULT_AT:
                    results.append(float(metric.result()))
                if i == RESET_AT:
                    metric.reset_state()
        if metric is not None:
            results.append(float(metric.result()))
        losses = [float(v) for v in losses]
        metric_vars = [(v.path, v.numpy()) for v in metric.variables] if metric else []
        return {"loss": losses, "metric": results}, variables_of(net, opt) + metric_vars

    return loop_over


class StepLogs(keras.callbacks.Callback):
    """Every training step's logs as ``fit`` reports them (the epoch's running means)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[float]] = []

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.seen.append([float(v) for v in (logs or {}).values()])


def fit_program(case: Case, epochs: int = 2):
    """``program(loop)`` for ``region_programs.run`` in which Keras's ``fit`` (``run_eagerly``)
    runs the loop: each step is one Terra iteration, and ``loop`` is not used. ({"logs": every
    step's logs}, the model's, optimizer's and metrics' variables)."""

    def fit_over(loop):
        net, opt, lossf = case.model(), case.optimizer(), case.loss()
        metrics = [case.metric()] if case.metric else []
        net.compile(optimizer=opt, loss=lossf, metrics=metrics, run_eagerly=True)
        x, y = (np.concatenate(part) for part in zip(*case.data()))
        steps = StepLogs()
        net.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0,
                callbacks=[steps])
        metric_vars = [(v.path, v.numpy()) for m in metrics for v in m.variables]
        return {"logs": steps.seen}, variables_of(net, opt) + metric_vars

    return fit_over
