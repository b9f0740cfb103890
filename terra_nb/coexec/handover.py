"""After a loop: the placeholders Python still holds become ordinary eager tensors.

A placeholder that outlives its loop (``losses.append(loss)``, a name the cell assigns) must not
keep the capture hooks installed, or every later eager op in the process pays for them, and
TensorFlow's C code must never see one (it would read it as an eager tensor). So when a loop
closes, each surviving placeholder is replaced by its real value wherever Python holds it in a
list or a dict (a namespace, an object's attributes, a container) — the objects eager execution
would have put there. A placeholder held where it cannot be replaced (a tuple, a function's local
variable) keeps the hooks until it is collected.
"""

from __future__ import annotations

import gc
import sys

from ..capture.placeholder import Placeholder


def hand_over(placeholders: list[Placeholder]) -> list[Placeholder]:
    """Replace ``placeholders`` (with values) by their values in the lists and dicts that refer
    to them; return those still referred to from elsewhere."""
    done = [ph for ph in placeholders if ph.value is not None]
    values = {id(ph): ph.value for ph in done}
    for holder in gc.get_referrers(*done):
        if holder is done or holder is placeholders:
            continue
        if type(holder) is list:
            for i, x in enumerate(holder):
                if type(x) is Placeholder and id(x) in values:
                    holder[i] = values[id(x)]
        elif type(holder) is dict:
            for key, x in list(holder.items()):
                if type(x) is Placeholder and id(x) in values:
                    holder[key] = values[id(x)]
    # references left: ``placeholders``, ``done`` (if it has a value), the loop variable and
    # getrefcount's argument
    return [ph for ph in placeholders
            if sys.getrefcount(ph) > 3 + (id(ph) in values)]
