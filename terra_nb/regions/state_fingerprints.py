"""Fingerprints of the state of generators the walk meets (``python_state``): compared on
every hit, as an attribute's value is. A numpy generator draws in Cython, which no profile
function sees: its state is what tells a draw happened."""

from __future__ import annotations

import numpy as np

NUMPY_RANDOM = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)


def numpy_random_state(source) -> int:
    """A fingerprint of a numpy generator's state (its bit generator's, arrays by bytes)."""
    bits = getattr(source, "bit_generator", None) or getattr(source, "_bit_generator", source)
    return hash(_frozen(bits.state))


def _frozen(value):
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in sorted(value.items()))
    if isinstance(value, np.ndarray):
        return value.tobytes()
    return value


def generator_state(generator) -> list:
    """Where a Python generator stands, and its locals."""
    frame = generator.gi_frame
    return [] if frame is None else [frame.f_lasti, *frame.f_locals.values()]
