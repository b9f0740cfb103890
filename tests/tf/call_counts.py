"""Counts of the Python calls of test layers, kept in a module of their own.

A region's guard walks the Python state its call may read, globals included, but keeps modules by
identity (``terra_nb.regions.python_state``). A count kept in a global of the layer's own module
would be an effect the guard sees (and the call would be refused); counted here, through the
module, it lets a test see whether a region's Python ran.
"""

import collections

CALLS: collections.Counter = collections.Counter()
