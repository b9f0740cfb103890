"""The last call answered at each program location, so that its repeat needs no signature.

A co-executed iteration mostly repeats the last one: at a location, the same op on inputs of the
same dtypes and shapes (the same variables) with the same attrs. ``RepeatCalls`` keeps, per
location, the last fast-path call the PythonRunner answered from the ``SignatureIndex``, and
checks a new call against it input by input, without building the call's signature tuple or
hashing it. Any difference, or an input it does not check (a Python value, a list, an array),
leaves the call to the full signature, which decides as before; so does every slow-path call
(function calls, eager fallbacks).

A remembered call is one whose inputs are placeholders and eager tensors only, whose signature
found an ``Entry`` with traced shapes that hold (not run for real, not a fast-path fallback), and
whose op is not folded from static shapes; a repeat is answered with that same entry when it
holds a placeholder (a stateless op) or a variable handle, as the full path would.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..capture.placeholder import Placeholder
from ..capture.signature import Entry, OpInfo, input_sig
from .call_args import EAGER, RESOURCE_ENUM


@dataclass(frozen=True, slots=True)
class AnsweredCall:
    """A fast-path call answered from the index: what a repeat must equal, and its answer."""

    op_name: str
    n_inputs: int
    attrs: tuple  # the call's arguments after its inputs: attr names and values, hashable
    shape_like: tuple[bool, ...]  # per input: its small integer values are part of its signature
    inputs: tuple  # per input: its signature (``input_sig``)
    stateful: bool
    entry: Entry


class RepeatCalls:
    """Location id -> the last fast-path call answered there (one per location)."""

    def __init__(self) -> None:
        self._last: dict[int, AnsweredCall] = {}
        self.hits = 0  # repeats answered without a signature (tests read it)

    def remember(self, loc: int, op_name: str, args: tuple, info: OpInfo, inputs: tuple,
                 entry: Entry) -> None:
        """Keep the fast-path call ``op_name(*args)`` at ``loc``, answered with ``entry``;
        ``inputs`` are its input signatures (from its call signature)."""
        n = info.n_inputs
        attrs = args[n:]
        if len(info.shape_like) != n or not _checkable(args[:n]) or not _hashable(attrs):
            return
        self._last[loc] = AnsweredCall(op_name, n, attrs, info.shape_like, inputs,
                                       info.stateful, entry)

    def match(self, loc: int, op_name, args: tuple) -> tuple[Entry, list] | None:
        """The entry answering ``op_name(*args)`` at ``loc`` and its flat inputs, if the call
        repeats the one remembered there; None: the full signature decides."""
        call = self._last.get(loc)
        if call is None or call.op_name != op_name:
            return None
        n = call.n_inputs
        if args[n:] != call.attrs:
            return None
        flat = list(args[:n])
        placeholder = variable = False
        for x, want, shape_like in zip(flat, call.inputs, call.shape_like):
            t = type(x)
            if t is Placeholder:
                if x.sig != want:
                    return None
                placeholder = True
            elif t is EAGER:
                # a variable's signature is its handle's id: the same variable, whose shape was
                # found fixed when the call was remembered
                if input_sig(x, shape_like) != want:
                    return None
                variable = variable or x._datatype_enum() == RESOURCE_ENUM
            else:
                return None
        if not variable and (call.stateful or not placeholder):
            return None  # the full path runs it: on real values, or for real (host op)
        self.hits += 1
        return call.entry, flat


def _checkable(inputs: tuple) -> bool:
    return all(type(x) is Placeholder or type(x) is EAGER for x in inputs)


def _hashable(attrs: tuple) -> bool:
    try:
        hash(attrs)  # strings, ints, bools, dtypes: then == compares them plainly
    except TypeError:
        return False
    return True
