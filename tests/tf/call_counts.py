"""Counts of the Python calls of test layers, kept where no region's guard looks.

A region's guard walks the Python state its call may read: globals, the attributes of modules
the code names, what objects and containers hold, buffers by their bytes
(``terra_nb.regions.state_walk``); a count kept there would be an effect it sees, and the call
would be refused. ``count`` keeps the counts in a ``ctypes`` array, C data the walk keeps by
identity (the README's Known limits name it), so a test sees whether a region's Python ran
without the guard seeing it count.
"""

import collections.abc
import ctypes

NAMES = ("Dense.call", "EffectLayer.print", "EffectLayer.counter", "EffectLayer.numpy",
         "EffectLayer.new variable", "EffectLayer.tensor attribute read", "EffectLayer.resize",
         "EffectLayer.none")
_INDEX = {name: i for i, name in enumerate(NAMES)}
_COUNTS = (ctypes.c_long * len(NAMES))()


def count(name: str) -> None:
    """One more Python call of ``name`` (one of ``NAMES``)."""
    _COUNTS[_INDEX[name]] += 1


class Counts(collections.abc.Mapping):
    """The counts, read as a ``collections.Counter`` is (``CALLS["Dense.call"]``, ``clear()``)."""

    def __getitem__(self, name: str) -> int:
        return _COUNTS[_INDEX[name]]

    def __iter__(self):
        return iter(NAMES)

    def __len__(self) -> int:
        return len(NAMES)

    def clear(self) -> None:
        ctypes.memset(_COUNTS, 0, ctypes.sizeof(_COUNTS))


CALLS = Counts()
