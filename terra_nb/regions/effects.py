"""Python-visible effects of one traced call: what would be lost if its Python did not run.

``EffectProbe`` watches writes to stdout/stderr, the attributes of the object and of its
sublayers, and Python's and numpy's random state. Value reads and variable creation come from
the recording (``Recording.reads``, ``Recording.created_vars``); Keras side outputs (layer
losses such as activity regularisers, masks) from ``side_outputs``.
"""

from __future__ import annotations

import random
import sys

import numpy as np


class _CountingStream:
    def __init__(self, stream) -> None:
        self.stream, self.writes = stream, 0

    def write(self, text):
        self.writes += 1
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _fingerprint(value):
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (list, dict, set)):
        return id(value), len(value)
    return id(value)


def attributes(objs: list) -> list[dict]:
    """A fingerprint of the attributes of each of ``objs``: Python values by value, other
    objects by identity (and lists, dicts, sets by length too)."""
    return [{k: _fingerprint(v) for k, v in vars(o).items()} for o in objs]


_writes: dict[int, int] = {}  # id(object) -> attribute assignments seen (``count_write``)


def count_write(obj) -> None:
    """An attribute of ``obj`` was assigned (the ``__setattr__`` wrappers of ``intercept``)."""
    key = id(obj)
    _writes[key] = _writes.get(key, 0) + 1


def forget_writes() -> None:
    """When no Terra with regions is open: no guard reads the counts any more."""
    _writes.clear()


def writes_to(objs: list) -> tuple:
    """How many attribute assignments each of ``objs`` has seen: part of a region's guard (the
    user set ``layer.rate`` or ``loss.reduction``: the call may compute something else)."""
    return tuple([_writes.get(id(o), 0) for o in objs])


def objects_of(obj) -> list:
    """The object and its sublayers (a Keras layer or model), or the object alone."""
    layers = list(obj._flatten_layers()) if hasattr(obj, "_flatten_layers") else []
    return layers + ([obj] if obj not in layers else [])


def layers_of(objs: list) -> list:
    """Those of ``objs`` with a trainable flag (part of a region's guard)."""
    return [o for o in objs if hasattr(o, "trainable")]


class EffectProbe:
    """Around one traced call of an object (``objs``: it and its sublayers); ``effects`` lists
    what it saw, one text each."""

    def __init__(self, objs: list) -> None:
        self.objs = objs
        self.effects: list[str] = []

    def _state(self) -> tuple:
        return (attributes(self.objs), random.getstate(), np.random.get_state()[1].tobytes())

    def __enter__(self) -> EffectProbe:
        self.before = self._state()
        self.out, self.err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _CountingStream(self.out), _CountingStream(self.err)
        return self

    def __exit__(self, *exc) -> None:
        writes = sys.stdout.writes + sys.stderr.writes
        sys.stdout, sys.stderr = self.out, self.err
        (attrs0, *rnd0), (attrs1, *rnd1) = self.before, self._state()
        self.effects = [f"stdout/stderr write ({writes})"] if writes else []
        for o, b, a in zip(self.objs, attrs0, attrs1):
            changed = sorted(k for k in set(a) | set(b) if a.get(k, "?") != b.get(k, "?"))
            if changed:
                self.effects.append(f"attribute changed: {type(o).__name__}.{','.join(changed)}")
        if rnd0 != rnd1:
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


def hidden_inputs(obj) -> list[str]:
    """Python a formed region would not run although its values feed the call: an optimizer's
    learning rate from a callable, or from a schedule that is not Keras's own (Keras's compute
    from the step count; other Python may read state no guard sees, a list item or a global).
    """
    for optimizer in (obj, getattr(obj, "inner_optimizer", None)):  # LossScaleOptimizer's too
        rate = getattr(optimizer, "_learning_rate", None)
        if callable(rate) and not type(rate).__module__.startswith("keras."):
            return [f"hidden input: a learning rate from {type(rate).__name__} (Python that "
                    f"runs every step)"]
    return []
