"""A ``fit`` step as one region (``regions/intercept.py``: Keras's ``train_step``) against what a
step's Python may read that the step's region would bake in. Each program was a difference from
the eager ``fit`` found by the adversarial review of step regions (``/work/adv10``: p49, p56,
p57, p59, p62, p70); each now equals plain ``fit`` bit for bit, and the test asserts how: the
step's region missed its guard when the state changed, or was refused, saying why.
"""

from __future__ import annotations

import types
import weakref

import keras
import numpy as np
import tensorflow as tf
from fit_programs import assert_equal_runs, data, run_fit
from what_ran import assert_coexecuted

COEXEC: dict = {}


def _step_row(terra):
    return next(r for r in terra.regions.rows if r.name.endswith(".train_step"))


def _sequential(*middle) -> keras.Model:
    return keras.Sequential([keras.Input((8,)), *middle, keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(1)])


def _compare(program):
    plain = run_fit(program, None)
    got = run_fit(program, COEXEC)
    assert_equal_runs(got, plain)
    return got[3]


class _Each(keras.callbacks.Callback):
    """Calls ``fn(self.model, epoch)`` at the end of every epoch."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.fn(self.model, epoch)


def _fit(model, callback, epochs: int = 3, loss="mse"):
    x, y = data()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss, run_eagerly=True)
    history = model.fit(x, y, batch_size=8, epochs=epochs, verbose=0, shuffle=False,
                        callbacks=[callback] if callback else [])
    return history.history, model


def test_a_variable_frozen_mid_fit_is_a_guard_miss():
    """A callback sets one kernel's ``trainable`` to False after the first epoch (its bias
    trains on): the step's region trained it on (review p57). Assignments to a
    ``keras.Variable``'s attributes are counted as a layer's are."""

    def freeze(model, epoch):
        if epoch == 0:
            model.layers[0].kernel.trainable = False

    terra = _compare(lambda: _fit(_sequential(), _Each(freeze)))
    row = _step_row(terra)
    assert row.hits >= 16 and row.misses >= 1, str(terra.regions)
    assert_coexecuted(terra, at_least=0.6)


def test_keras_epsilon_set_mid_fit_is_a_guard_miss():
    """``keras.config.set_epsilon`` between epochs changes what MAPE divides by,
    ``max(|y_true|, epsilon)`` (review p59): Keras's global settings are part of every region's
    guard."""
    before = keras.config.epsilon()

    def widen(model, epoch):
        keras.config.set_epsilon(0.5 * (epoch + 1))

    def program():
        keras.config.set_epsilon(before)
        x, y = data()
        model = _sequential()
        model.compile(optimizer=keras.optimizers.SGD(0.001), loss="mape", run_eagerly=True)
        history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False,
                            callbacks=[_Each(widen)])
        return history.history, model

    try:
        terra = _compare(program)
    finally:
        keras.config.set_epsilon(before)
    row = _step_row(terra)
    assert row.hits >= 12 and "keras.config epsilon" in row.last_miss, str(terra.regions)


class _TwoLayers(keras.Model):
    """A subclassed 16-1 model; subclasses override ``compute_loss``."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.out = keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


class _Curriculum(_TwoLayers):
    """A loss term weighted by the epoch, read from ``self.history`` (review p56)."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training)
        epoch = len(self.history.epoch) if training and self.history is not None else 0
        return loss + 0.1 * epoch * tf.reduce_mean(tf.abs(y_pred))


def test_a_step_reading_fits_history_is_refused():
    """What ``fit`` keeps on the model between steps (``history``) is left out of the state
    walk (a region in ``fit`` would miss every epoch for it): user code that names it refuses
    the region, and the step runs its Python."""
    terra = _compare(lambda: _fit(_Curriculum(), None, epochs=4))
    row = _step_row(terra)
    assert row.state == "refused" and "history" in row.reason, str(terra.regions)
    assert_coexecuted(terra, at_least=0.6)


def _masked_mse(y_true, y_pred):
    valid = tf.math.is_finite(y_true)
    err = tf.where(valid, y_true - y_pred, 0.0)
    n = tf.size(tf.boolean_mask(y_true, valid))  # a size tf.size computes in Python
    return tf.reduce_sum(tf.square(err)) / tf.cast(n, "float32")


def test_a_size_computed_from_a_value_shaped_output_refuses():
    """``tf.size`` of a ``boolean_mask`` reads the mask's output shape in C and makes a
    constant: the count of finite targets, different in each batch, was baked into the step's
    region (review p62)."""

    def program():
        x, y = data()
        y[[1, 5, 9, 14, 17, 18, 19, 25, 33, 34, 35, 36, 41, 50, 51, 58]] = np.nan
        model = _sequential()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss=_masked_mse, run_eagerly=True)
        history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False)
        return history.history, model

    terra = _compare(program)
    row = _step_row(terra)
    assert row.state == "refused" and "depends on values" in row.reason, str(terra.regions)


class _Settings:
    def __init__(self) -> None:
        self.scale = 1.0


class _Scaled(keras.layers.Layer):
    """Reads its scale through a weak reference to a plain settings object (review p49)."""

    def __init__(self, settings: _Settings, **kwargs) -> None:
        super().__init__(**kwargs)
        self.settings = weakref.ref(settings)

    def call(self, x):
        return x * self.settings().scale


def test_state_read_through_a_weak_reference_is_guarded():
    def program():
        settings = _Settings()

        def halve(model, epoch):
            settings.scale *= 0.5

        return _fit(_sequential(_Scaled(settings)), _Each(halve), epochs=4)

    terra = _compare(program)
    row = _step_row(terra)
    assert row.hits >= 16 and "scale" in row.last_miss, str(terra.regions)


DEBUG = types.SimpleNamespace(last=None)


class _Stashing(_TwoLayers):
    """``compute_loss`` keeps the batch's predictions on a namespace for a callback to show
    (review p70)."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        DEBUG.last = y_pred
        return super().compute_loss(x, y, y_pred, sample_weight, training)


def test_a_step_writing_to_a_namespace_is_refused():
    """A ``types.SimpleNamespace`` is walked as a user object is: the assignment is an effect a
    hit would not repeat, so the callback sees each batch's predictions, as in plain ``fit``."""
    shown = []

    def show(model, epoch):
        shown.append(np.asarray(DEBUG.last).tobytes())

    def program():
        shown.clear()
        values, model = _fit(_Stashing(), _Each(show))
        return (values, list(shown)), model

    terra = _compare(program)
    row = _step_row(terra)
    assert row.state == "refused" and "DEBUG.last" in row.reason, str(terra.regions)


class _WarmUp(keras.callbacks.Callback):
    """Sets the learning rate before every batch (a linear warm-up), as Keras users do."""

    def on_train_batch_begin(self, batch, logs=None) -> None:
        self.model.optimizer.learning_rate = 0.01 * min(1.0, (batch + 1) / 8)


def test_a_learning_rate_set_every_batch_keeps_the_step_region():
    """``optimizer.learning_rate = x`` is a property whose setter assigns the learning-rate
    variable: the graph's state, read by the step's region as it runs. It counted as an
    attribute write and made the region miss at every step (review p05); the warm-up's values
    reach the steps all the same."""
    terra = _compare(lambda: _fit(_sequential(), _WarmUp(), epochs=3))
    row = _step_row(terra)
    assert row.hits >= 16 and row.misses == 0, str(terra.regions)
