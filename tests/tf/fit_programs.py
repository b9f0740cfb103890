"""Keras ``fit``/``evaluate``/``predict`` programs, run plainly and under a Terra, compared.

``run_fit(program, options)`` runs ``program()`` in a watched thread (a deadlock fails the
test), plainly (``options`` None) or inside ``with Terra(**options)``, and returns its values,
the model's weights, what it printed and the Terra. ``assert_equal_runs`` compares two runs bit
for bit: History, every value, every weight, the printed text.
"""

from __future__ import annotations

import contextlib
import io

import keras
import numpy as np
import tensorflow as tf
from watchdog import in_thread

from terra_nb import Terra

TIMEOUT = 300


def data(n: int = 64, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    return x, (x @ rng.normal(size=(features, 1))).astype("float32") + 0.1


def mlp(run_eagerly: bool = True, steps_per_execution: int = 1) -> keras.Model:
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"],
                  run_eagerly=run_eagerly, steps_per_execution=steps_per_execution)
    return model


class PythonStep(keras.Model):
    """A ``train_step`` holding Python ``tf.function`` cannot run as written: a counter kept
    in Python, the loss read as a float every step, a print every fifth step, a branch on the
    value read."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)
        self.log = {"steps": 0, "losses": [], "spikes": 0}  # Python state, not a variable

    def call(self, x, training=None):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.log["steps"] += 1
        value = float(loss)  # a value read inside the step
        self.log["losses"].append(value)
        if value > 2.0:  # a Python branch on it
            self.log["spikes"] += 1
        if self.log["steps"] % 5 == 0:
            print(f"step {self.log['steps']}: loss {value:.6f}")
        return {"loss": loss}


def python_step_model() -> PythonStep:
    model = PythonStep()
    model.compile(optimizer=keras.optimizers.SGD(0.05), run_eagerly=True)
    return model


def run_fit(program, options: dict | None, seed: int = 0):
    """``program()`` -> (values, model); plainly or under ``Terra(**options)``: returns
    (values, weights, printed text, the Terra or None)."""

    def fn():
        keras.utils.set_random_seed(seed)
        out = io.StringIO()
        terra = None
        with contextlib.redirect_stdout(out):
            if options is None:
                values, model = program()
            else:
                with Terra(**options) as terra:
                    values, model = program()
        return values, [w.numpy() for w in model.weights], out.getvalue(), terra

    return in_thread(fn, TIMEOUT)


def assert_equal_runs(got, expected) -> None:
    """Values (History, evaluate's and predict's results), weights and printed text equal,
    bit for bit."""
    values, weights, printed, _ = got
    values0, weights0, printed0, _ = expected
    assert _plain(values) == _plain(values0)
    assert printed == printed0
    assert len(weights) == len(weights0)
    for a, b in zip(weights, weights0):
        np.testing.assert_array_equal(a, b)


def _plain(value):
    """Arrays as nested lists of their bits, so ``==`` compares everything exactly."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def labels(terra, phase: str | None = None) -> list[str]:
    """The labels of the iterations (of one phase, if given)."""
    return [s.label for s in terra.stats if phase is None or s.phase == phase]


def hits(terra, name: str) -> int:
    """How many hits the region rows named ``name`` answered."""
    return sum(r.hits for r in terra.regions.rows if r.name == name)


def StepFunction_of(fn) -> bool:  # noqa: N802 - reads as the type it tests
    """Whether ``fn`` is terra-nb's stand-in for a model's step function."""
    from terra_nb.keras_steps import StepFunction

    return isinstance(fn, StepFunction)
