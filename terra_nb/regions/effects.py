"""Python-visible effects of one traced call: what would be lost if its Python did not run.

``EffectProbe`` watches writes to stdout/stderr, the Python state reachable from the object and
its sublayers (``python_state``: attributes, items of what they hold, globals their code names),
and Python's and numpy's random state. Value reads and variable creation come from
the recording (``Recording.reads``, ``Recording.created_vars``); Keras side outputs (layer
losses such as activity regularisers, masks) from ``side_outputs``.
"""

from __future__ import annotations

import random
import sys

import numpy as np

from .python_state import PythonState
from .state_walk import UnguardedState


class _CountingStream:
    def __init__(self, stream) -> None:
        self.stream, self.writes = stream, 0

    def write(self, text):
        self.writes += 1
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


# A Keras model's steps (``fit``'s, ``evaluate``'s, ``predict``'s): their region is the whole step
STEP_METHODS = frozenset({"train_step", "test_step", "predict_step"})


def objects_of(obj, method: str = "") -> list:
    """The object and its sublayers (a Keras layer or model), or the object alone; for a
    model's step, its optimizer (and a LossScaleOptimizer's inner one) and its metrics too: the
    step updates their variables and reads their Python state."""
    layers = list(obj._flatten_layers()) if hasattr(obj, "_flatten_layers") else []
    out = layers + ([obj] if obj not in layers else [])
    if method in STEP_METHODS:
        optimizer = getattr(obj, "optimizer", None)
        extra = [optimizer, getattr(optimizer, "inner_optimizer", None),
                 *getattr(obj, "metrics", ())]
        out += [o for o in extra if o is not None and all(o is not x for x in out)]
    return out


class EffectProbe:
    """Around one traced call of an object (``objs``: it and its sublayers; ``arguments``: the
    call's arguments that are objects); ``effects`` lists what it saw, one text each."""

    def __init__(self, objs: list, arguments: list = ()) -> None:
        self.objs = objs + list(arguments)
        self.effects: list[str] = []

    @staticmethod
    def _random() -> tuple:
        return random.getstate(), np.random.get_state()[1].tobytes()

    def __enter__(self) -> EffectProbe:
        try:
            self.state = PythonState(self.objs)
        except UnguardedState as why:
            self.state, self.unguarded = None, why.reason()
        self.random = self._random()
        self.out, self.err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _CountingStream(self.out), _CountingStream(self.err)
        return self

    def tensor_ids(self) -> set[int]:
        """TensorFlow ids (``_id``) of the tensors the probed objects hold (a layer's
        constant): a recording's input among them is baked in, guarded by where it is held."""
        return set() if self.state is None else self.state.tensor_ids

    def __exit__(self, *exc) -> None:
        writes = sys.stdout.writes + sys.stderr.writes
        sys.stdout, sys.stderr = self.out, self.err
        self.effects = [f"stdout/stderr write ({writes})"] if writes else []
        if self.state is None:
            self.effects.append(self.unguarded)
        elif changed := self.state.changed():
            self.effects.append(f"attribute changed: {', '.join(changed[:4])}"
                                + (f" and {len(changed) - 4} more" if len(changed) > 4 else ""))
        if self.random != self._random():
            self.effects.append("python/numpy random used")


def side_outputs(obj, result) -> list[str]:
    """Keras values a call leaves besides its result: layer losses (activity regularisers,
    ``add_loss``) and masks on the outputs."""
    found = []
    for layer in objects_of(obj):
        if getattr(layer, "_losses", None):
            found.append(f"side output: losses added by {type(layer).__name__}")
            break
    leaves = result if isinstance(result, (list, tuple)) else [result]
    if any(getattr(t, "_keras_mask", None) is not None for t in leaves):
        found.append("side output: a Keras mask on the result")
    return found


def hidden_inputs(objs: list) -> list[str]:
    """Python a formed region would not run although its values feed the call: an optimizer's
    learning rate from a callable, or from a schedule that is not Keras's own (Keras's compute
    from the step count; other Python may read state no guard sees, a list item or a global).
    ``objs``: the call's objects (``objects_of``: a model's step has its optimizer among them).
    """
    for obj in objs:
        for optimizer in (obj, getattr(obj, "inner_optimizer", None)):  # LossScaleOptimizer's
            rate = getattr(optimizer, "_learning_rate", None)
            if callable(rate) and not type(rate).__module__.startswith("keras."):
                return [f"hidden input: a learning rate from {type(rate).__name__} (Python "
                        f"that runs every step)"]
    return []
