"""Branch variants: the regions of one call that decided a branch in Python the other way.

A call such as Keras's ``apply_gradients`` with ``gradient_accumulation_steps=3`` branches on
its step count: one run in three applies the gradients. Its region holds one way of each branch,
and its guard computes the branch values before the call (``branches.py``). When they go the
other way, the region is set aside here instead of dropped; a later call whose branches go a
set-aside region's way is answered by it, and a recording equal to a set-aside region's forms
no new region (its functions are compiled already). At most ``MAX_VARIANTS`` are kept per call.
"""

from __future__ import annotations

from .region import Region

MAX_VARIANTS = 4


class Variants:
    """The regions set aside per guard key, by their recording's key."""

    def __init__(self) -> None:
        self._aside: dict[tuple, list[Region]] = {}  # oldest first

    def set_aside(self, key: tuple, region: Region) -> None:
        """``region`` missed on a branch: kept for a call whose branches go its way."""
        aside = self._aside.setdefault(key, [])
        aside.append(region)
        del aside[:-MAX_VARIANTS]

    def take(self, key: tuple, tensors: list, epoch: int) -> Region | None:
        """A region set aside for ``key`` whose guard holds for this call (its Python state,
        the variables created, its branches), taken out; None if none does."""
        aside = self._aside.get(key, [])
        for region in list(aside):
            if region.objects() is None or region.epoch != epoch or not region.python.holds():
                aside.remove(region)  # its object or state is gone: it would never hold again
            elif region.branches_hold(tensors):
                aside.remove(region)
                return region
        return None

    def reuse(self, key: tuple, rec_key: tuple) -> Region | None:
        """The region set aside for ``key`` with this recording, taken out (formed already)."""
        aside = self._aside.get(key, [])
        for region in aside:
            if region.rec.key() == rec_key:
                aside.remove(region)
                return region
        return None

    def forget(self, key: tuple) -> None:
        self._aside.pop(key, None)

    def clear(self) -> None:
        self._aside.clear()

    def regions(self) -> list[tuple[tuple, Region]]:
        """(guard key, region) of every region set aside."""
        return [(key, r) for key, aside in self._aside.items() for r in aside]
