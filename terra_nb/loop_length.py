"""How many iterations a loop will run, when its iterable says: the compile policy's horizon
(``coexec/compile_policy.py``). Only speed depends on it, so anything unclear is None."""

from __future__ import annotations

import operator
from typing import Any

import tensorflow as tf


def loop_length(iterable: Any) -> int | None:
    """``len(iterable)`` or an iterator's length hint; for an ``enumerate`` or ``zip``, that of
    the iterators it goes over (its pickle state names them); for a fresh ``tf.data`` iterator
    (``%%terra`` loops over ``iter(dataset)``), its dataset's. None when it does not say, or
    says something that is no length."""
    try:
        return _length(iterable)
    except Exception:  # noqa: BLE001 - a failing __len__, a deep nest: the loop runs without it
        return None


def _length(iterable: Any) -> int | None:
    if type(iterable) in (enumerate, zip):
        inner = [_length(it) for it in iterable.__reduce__()[1] if not isinstance(it, int)]
        return None if not inner or None in inner else min(inner)
    if isinstance(iterable, tf.data.Iterator):
        iterable = getattr(iterable, "_dataset", None)  # OwnedIterator keeps its dataset
    length = operator.length_hint(iterable, -1)
    return length if type(length) is int and length >= 0 else None
