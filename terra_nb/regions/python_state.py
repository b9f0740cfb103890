"""The Python state a region's call may read, and whether it changed since the region formed.

A formed region does not run its call's Python, so every Python value that Python would read (a
layer's attribute, an item of a dict or list it holds, a module global its ``call`` names, a
closure cell, a numpy array) is baked into the region as it was when the call was traced.
``PythonState`` walks what is reachable from the call's objects once, when the region forms
(``state_walk``: what is walked, compared or kept by identity), and keeps where each value lives
(each object's attributes, each dict and list, each closure and global); on every hit it reads
those places again and compares: a value that is not the same object (nor an equal scalar) is a
guard miss, and the call runs its Python again.

The attributes of Keras layers, losses, optimizers and metrics are not read again: their
``__setattr__`` counts assignments while regions are on (``count_write``, wrapped by
``intercept``), and the guard compares the counts, which costs nothing per attribute (a model
holds hundreds). It also keeps the snapshot from holding the layers' own attribute dicts, whose
bound methods would keep a dropped model alive.
"""

from __future__ import annotations

import itertools
import operator
import weakref

import numpy as np

from .state_fingerprints import label
from .state_walk import ATOMS, FIT_STATE, OPAQUE, StateWalk, UnguardedState

MAX_VALUES = 200_000  # beyond, the state is too large to compare on every hit
_writes: dict[int, int] = {}  # id(object) -> attribute assignments seen (``count_write``)


def count_write(obj) -> None:
    """An attribute of ``obj`` was assigned (the ``__setattr__`` wrappers of ``intercept``)."""
    _writes[id(obj)] = _writes.get(id(obj), 0) + 1


def forget_writes() -> None:
    """When no Terra with regions is open: no guard reads the counts any more."""
    _writes.clear()


def _writes_to(ids: list[int]) -> list[int]:
    return [_writes.get(i, 0) for i in ids]


class PythonState:
    """A snapshot of the Python state reachable from ``roots``; ``holds()`` on every hit.
    ``count_writes``: the attributes of Keras objects are guarded by their assignment counts
    (a region's guard, while the ``__setattr__`` wrappers count) rather than read."""

    def __init__(self, roots: list, count_writes: bool = False) -> None:
        walk = StateWalk(count_writes)
        walk.run(roots)
        self._sources, self._names, self._arrays = walk.sources, walk.names, walk.arrays
        self._sized = walk.sizes
        self.tensor_ids = walk.tensors  # TensorFlow ids only: the objects hold the tensors
        self._sizes = list(map(len, self._sized))
        self._counted = [id(o) for o in walk.counted]
        self._writes = _writes_to(self._counted)
        # for a later Terra (no count while none was open): the counted objects' attributes
        self._objects = [weakref.ref(o) for o in walk.counted]
        self._attributes = _attributes(walk.counted)
        parts = [list(f()) for f in self._sources]  # one read of each place
        self._lengths = list(map(len, parts))
        self._values = list(itertools.chain.from_iterable(parts))
        if len(self._values) > MAX_VALUES:
            raise UnguardedState(f"{len(self._values)} Python values reachable from the call, "
                                 f"more than a hit can compare")

    def _now(self) -> list:
        return list(itertools.chain.from_iterable(f() for f in self._sources))

    def holds(self) -> bool:
        """Whether every value is the same object as at the snapshot, or an equal scalar (a
        float assigned again each step: the snapshot then takes it), and no attribute of a
        Keras object was assigned."""
        now = self._now()
        if (len(now) != len(self._values) or list(map(len, self._sized)) != self._sizes
                or _writes_to(self._counted) != self._writes):
            return False
        if not all(map(operator.is_, now, self._values)):
            if not all(map(same_value, now, self._values)):
                return False
            self._values = now
        return all(read() == b for read, b, _ in self._arrays)

    def forget(self) -> None:
        """The object is gone: let go of what the snapshot holds (its layers, their variables);
        it never holds again."""
        self._sources, self._names, self._sized, self._arrays = [], [], [], []
        self._values, self._lengths, self._sizes, self._objects = [], [], [None], []

    def carried_over(self) -> bool:
        """At the start of a later Terra: whether the state holds, the Keras objects' attributes
        compared by a fingerprint (assignments made while no Terra was open were not counted);
        their counts start afresh."""
        objs = [r() for r in self._objects]
        if any(o is None for o in objs) or _attributes(objs) != self._attributes:
            return False
        self._writes = _writes_to(self._counted)
        return self.holds()

    def changed(self) -> list[str]:
        """Where the state differs from the snapshot (for a miss's or refusal's reason)."""
        out, start = [], 0
        for (path, names), n, source in zip(self._names, self._lengths, self._sources):
            values = list(source())
            then, start = self._values[start:start + n], start + n
            if len(values) != n:
                out.append(f"{path} (items added or removed)")
                continue
            keys = list(getattr(source(), "mapping", ())) if names in (".", "[]") else names
            out += [label(path, names, keys, i) for i, (v, w) in enumerate(zip(values, then))
                    if not same_value(v, w)]
        out += [what for read, b, what in self._arrays if read() != b]
        if _writes_to(self._counted) != self._writes:
            out.append("an attribute of a Keras object assigned")
        return out


def _fingerprint(value):
    if type(value) in ATOMS:
        return value
    if isinstance(value, list | dict | set):
        return id(value), len(value)
    return id(value)


def _attributes(objs: list) -> list[dict]:
    """A fingerprint of each object's attributes: scalars by value, other objects by identity
    (and lists, dicts, sets by length too)."""
    return [{k: _fingerprint(v) for k, v in vars(o).items() if k not in FIT_STATE} for o in objs]


def argument_objects(values, depth: int = 0) -> list:
    """Those of a call's arguments whose state it may read, also inside the lists, tuples and
    dicts it is given: every object but tensors, scalars and numpy data, which the guard keys
    itself (a set, a config object, a function's closure, a container of a subclass: an
    ``OrderedDict``'s own attributes), and the state walk compares or refuses (an iterator)."""
    out = []
    for v in values:
        if type(v) in ATOMS or isinstance(v, OPAQUE + (np.ndarray, np.generic)):
            continue
        if isinstance(v, list | tuple | dict) and depth < 4:
            out += argument_objects(v.values() if isinstance(v, dict) else v, depth + 1)
        if type(v) not in (list, tuple, dict):
            out.append(v)
    return out


def same_value(a, b) -> bool:
    """Whether ``b`` in place of ``a`` is no change: the same object, or an equal scalar of the
    same type (a float, or a numpy scalar, assigned again each step)."""
    return a is b or (type(a) is type(b) and (type(a) in ATOMS or isinstance(a, np.generic))
                      and bool(a == b))
