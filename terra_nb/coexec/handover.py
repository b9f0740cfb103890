"""After a loop: the placeholders Python still holds become ordinary eager tensors.

A placeholder that outlives its loop (``losses.append(loss)``, a name the cell assigns) must not
keep the capture hooks installed, or every later eager op in the process pays for them, and
TensorFlow's C code must never see one (it would read it as an eager tensor). So when a loop
closes, each surviving placeholder is replaced by its real value wherever Python holds it in a
list or a dict (a namespace, an object's attributes, a container), also inside tuples there
(``history.append((step, loss))``: the tuple is replaced by one holding the value) — the objects
eager execution would have put there. A placeholder held where it cannot be replaced (a
function's local variable, a set, an object without a ``__dict__``) keeps the hooks until it is
collected.
"""

from __future__ import annotations

import gc
import sys

from .. import heap
from ..capture.placeholder import Placeholder

TUPLE_DEPTH = 2  # a tuple holding a placeholder, and a tuple holding that tuple


def hand_over(placeholders: list[Placeholder]) -> list[Placeholder]:
    """Replace ``placeholders`` (with values) by their values in the lists and dicts that refer
    to them, directly or through tuples; return those still referred to from elsewhere."""
    if not placeholders:  # the usual case: gc.get_referrers would walk the heap for nothing
        return []
    done = [ph for ph in placeholders if ph.value is not None]
    swap = {id(ph): ph.value for ph in done}  # object id -> its replacement
    olds, keep = list(done), []  # keep: every replaced object stays alive (its id stays unique)
    for depth in range(TUPLE_DEPTH + 1):
        ours = {id(placeholders), id(done), id(olds), id(keep)}
        with heap.thawed():  # a list made before the loop is frozen: get_referrers skips it
            tuples = [h for h in gc.get_referrers(*olds)
                      if id(h) not in ours and _swap_in(h, swap)]
        keep += olds
        olds = [t for t in tuples if depth < TUPLE_DEPTH and id(t) not in swap]
        for t in olds:
            swap[id(t)] = tuple(swap.get(id(x), x) for x in t)
        if not olds:
            break
    keep.clear()
    # references left: ``placeholders``, ``done`` (if it has a value), the loop variable and
    # getrefcount's argument
    return [ph for ph in placeholders
            if sys.getrefcount(ph) > 3 + (ph.value is not None)]


def _swap_in(holder, swap: dict) -> bool:
    """Replace the swapped objects in ``holder`` if it is a list or a dict; True if it is a
    tuple (to be replaced where it is held)."""
    if type(holder) is list:
        for i, x in enumerate(holder):
            if id(x) in swap:
                holder[i] = swap[id(x)]
    elif type(holder) is dict:
        owner = _class_of(holder)
        for key, x in list(holder.items()):
            if id(x) in swap:
                if owner is not None:  # through the class: CPython's attribute cache follows
                    setattr(owner, key, swap[id(x)])
                else:
                    holder[key] = swap[id(x)]
    return type(holder) is tuple


def _class_of(namespace: dict) -> type | None:
    """The class whose namespace ``namespace`` is (a class attribute holds the placeholder).
    Written to directly, the type's attribute cache would still point at the freed placeholder
    (a crash at the next read). Only a namespace with a class's own keys is looked up."""
    if "__module__" not in namespace or "__doc__" not in namespace:
        return None  # an instance's or a module's: not a class
    for referrer in gc.get_referrers(namespace):
        if isinstance(referrer, type) and all(
                vars(referrer).get(k) is v for k, v in namespace.items()):
            return referrer
    return None
