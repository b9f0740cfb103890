"""What the state walk (``python_state``) reads besides attributes, compared on every hit as an
attribute's value is: the state of generators it meets (a numpy generator draws in Cython,
which no profile function sees: its state is what tells a draw happened) and Keras's global
settings; and how a changed value is named in a miss's reason."""

from __future__ import annotations

import keras
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


KERAS_CONFIG = {"epsilon": keras.config.epsilon, "floatx": keras.config.floatx,
                "image_data_format": keras.config.image_data_format,
                "dtype_policy": lambda: keras.config.dtype_policy().name}


def keras_config() -> list:
    """Keras's global settings (``keras.config.set_epsilon`` ...), which its layers, losses and
    metrics read as they compute: a region bakes them in."""
    return [get() for get in KERAS_CONFIG.values()]


def label(path: str, names, keys, i: int) -> str:
    """Of the ``i``-th value of a source: ``Dense.rate``, ``Dense.cfg['k']``, ``Dense.lst[0]``,
    ``Scale.call global X``."""
    if names == ".":
        return f"{path}.{keys[i]}"
    if names == "[]":
        return f"{path}[{keys[i]!r}]"
    if names == "keys":
        return f"{path} (keys)"
    return f"{path}[{i}]" if names is None else f"{path} {names[i]}"
