"""Counts of the Python calls of test layers, kept where no region's guard looks.

A region's guard walks the Python state its call may read: globals, the attributes of modules
the code names, and what they hold (``terra_nb.regions.state_walk``). A count kept where the
guard walks would be an effect it sees (the call would be refused). ``count`` keeps the counts
behind a read-only mapping proxy, a builtin object the guard keeps by identity, so a test can see
whether a region's Python ran without the guard seeing it count.
"""

import collections
import types

CALLS: collections.Counter = collections.Counter()
_HIDDEN = types.MappingProxyType({"calls": CALLS})


def count(name: str) -> None:
    """One more Python call of ``name``."""
    _HIDDEN["calls"][name] += 1
