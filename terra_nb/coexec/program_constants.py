"""Constants of the whole program: small fed values that stayed the same.

Keras feeds Python floats (a learning rate, a step count as a tensor) to the same op inputs in
every iteration; each costs a queue round trip. After ``learn_iterations`` co-executed iterations
of a program, the values of inputs that took one small value are held as constants of a
regenerated program (``constants``), at most ``max_rebuilds`` times; Python checks each held
value (``Constant.holds``), and another value is a divergence.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


class Constant:
    """The candidate of a fed input that had one small value in every co-executed iteration so
    far: the program holds it, and Python checks it (another value is a divergence)."""

    __slots__ = ("value", "_bytes", "_last")

    def __init__(self, value) -> None:
        self.value = np.array(value)  # a copy
        self._bytes = self.value.tobytes()
        self._last: Any = None  # the last immutable object found to hold it (a fast check)

    def holds(self, value) -> bool:
        """Whether ``value`` is this value bit for bit (so -0.0 is not 0.0), of its dtype."""
        if value is self._last:
            return True
        other = small_value(value)
        if (other is None or other.dtype != self.value.dtype or other.shape != self.value.shape
                or other.tobytes() != self._bytes):
            return False
        if not isinstance(value, np.ndarray):  # tensors and Python numbers cannot change
            self._last = value
        return True


SMALL = 16  # values of at most this many elements may become constants


def small_value(value):
    """``value`` as a numpy array if it is a small number or array, else None."""
    kind = type(value)
    if kind is float or kind is int or kind is bool or isinstance(value, np.generic):
        return np.asarray(value)
    if kind is np.ndarray:
        return value if value.size <= SMALL and value.dtype.kind in "biuf" else None
    if isinstance(value, tf.Tensor) and hasattr(value, "_numpy_internal"):  # eager, real
        size = 1
        for d in value._shape_tuple():
            size *= d
        if size > SMALL:
            return None
        array = value._numpy_internal()  # not a read of Python's: no fetch is reported
        return array if array.dtype.kind in "biuf" else None
    return None


class ConstantLearner:
    """Which fed inputs of the whole program took one small value so far (see the module)."""

    learn_iterations = 2
    max_rebuilds = 3

    def __init__(self) -> None:
        self._values: dict[tuple[int, int], Constant] = {}  # (node, input) -> its one value
        self.varying: set[tuple[int, int]] = set()  # fed inputs that took several values
        self._runs_of_program = 0  # co-executed iterations of the current program
        self.rebuilds = 0

    def count_run(self, new_program: bool) -> None:
        """An iteration begins in the program (``new_program``: another one than before)."""
        self._runs_of_program = 1 if new_program else self._runs_of_program + 1

    def learn(self, key: tuple[int, int], value) -> None:
        """Note a fed value: a small one that stays the same can become a constant."""
        if key in self.varying or self.rebuilds >= self.max_rebuilds:
            return
        seen = self._values.get(key)
        if seen is not None:
            if not seen.holds(value):
                self.varying.add(key)
            return
        small = small_value(value)
        if small is None:
            self.varying.add(key)
        else:
            self._values[key] = Constant(small)

    def constants(self, program) -> dict | None:
        """The constants a regenerated ``program`` should hold, once the current one has run
        ``learn_iterations`` iterations and they differ from its own; else None. A constant
        that changed is always dropped (or every iteration would fall back)."""
        if any(k in self.varying for k in program.constants):
            return self.kept_constants(program)
        if self._runs_of_program < self.learn_iterations or self.rebuilds >= self.max_rebuilds:
            return None
        wanted = {k: c.value for k, c in self._values.items() if k not in self.varying}
        if wanted.keys() == program.constants.keys():
            return None
        self.rebuilds += 1
        return wanted

    def kept_constants(self, program) -> dict:
        """The constants ``program`` holds that did not change (for its successor)."""
        return {k: v for k, v in program.constants.items() if k not in self.varying}
