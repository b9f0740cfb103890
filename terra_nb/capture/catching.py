"""Which ``except`` clauses of the user's code an exception raised at a frame chain would meet.

An op error on TensorFlow's executor surfaces where Python next waits for it (a read), not at the
op. Where the two are inside the same ``except`` clauses, the user's code catches it as eager
would; where they are not, another clause (or none) catches it, and the program goes on from
another point than eager's. ``run_failures`` compares the two with ``catching``.

The clauses are read from the code's exception table (``dis``): the entry around an instruction
names its innermost handler; the entry around that handler's first instruction names where an
exception goes when the handler re-raises, and so on outwards. A handler is an ``except`` clause
when, after the exception is pushed, it only loads the type to match (or matches everything);
``with`` blocks and ``finally`` clauses clean up and re-raise, so they are passed over.
"""

from __future__ import annotations

import dis
import functools
import sys
from types import CodeType

from .location import is_user_code

Chain = tuple[tuple[CodeType, int], ...]  # (code, instruction offset) per frame, root first
_MATCHES = frozenset({"CHECK_EXC_MATCH", "CHECK_EG_MATCH"})
# what ends the expression of an except clause's type: a statement of a finally clause, a with
# block's exit, a re-raise (the type is an expression: names, items, calls; except* copies first)
_ENDS = frozenset({"POP_TOP", "RERAISE", "POP_EXCEPT", "WITH_EXCEPT_START", "RETURN_VALUE"})
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def catching(frames: Chain) -> tuple[tuple[Chain, CodeType, int], ...]:
    """The ``except`` clauses around each user frame's instruction in ``frames``, in the order an
    exception raised at the innermost frame meets them: (the frames that called that frame, its
    code, the handler's offset). Two chains with equal answers are caught by the same clauses of
    the same calls (a function with a ``try`` called twice is two activations of it)."""
    out = []
    for depth in range(len(frames) - 1, -1, -1):
        code, lasti = frames[depth]
        if is_user_code(code):
            out.extend((frames[:depth], code, target) for target in _excepts(code, lasti))
    return tuple(out)


def chain_here(root: CodeType) -> Chain:
    """The frame chain from the caller to the innermost frame running ``root`` (the loop's
    code), root first; empty if no frame runs it (a value read after the loop)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        frames.append((frame.f_code, frame.f_lasti))
        if frame.f_code is root:
            return tuple(reversed(frames))
        frame = frame.f_back
    return ()


def has_except(code: CodeType) -> bool:
    """Whether ``code`` holds an ``except`` clause (it may catch an error of its own ops)."""
    return any(_table(code)[1].values())


@functools.lru_cache(maxsize=4096)
def _excepts(code: CodeType, lasti: int) -> tuple[int, ...]:
    """The offsets of the ``except`` handlers an exception at ``lasti`` meets, innermost first."""
    entries, kinds = _table(code)
    out: list[int] = []
    offset, seen = lasti, set()
    while True:
        target = next((e.target for e in entries if e.start <= offset < e.end), None)
        if target is None or target in seen:  # (a handler never covers itself; be safe)
            return tuple(out)
        seen.add(target)
        if kinds.get(target):
            out.append(target)
        offset = target


@functools.lru_cache(maxsize=1024)
def _table(code: CodeType) -> tuple[list, dict[int, bool]]:
    """The code's exception entries, and per handler offset whether it is an ``except``."""
    bytecode = dis.Bytecode(code)
    instructions = list(bytecode)
    at = {ins.offset: i for i, ins in enumerate(instructions)}
    entries = list(bytecode.exception_entries)
    kinds = {e.target: _is_except(instructions, at.get(e.target)) for e in entries}
    return entries, kinds


def _is_except(instructions: list, i: int | None) -> bool:
    """Whether the handler at ``instructions[i]`` is an ``except`` clause: it pushes the
    exception, then drops it (a bare ``except:``) or computes a type and matches it."""
    if i is None or instructions[i].opname != "PUSH_EXC_INFO":
        return False  # a cleanup that re-raises (after a with block or an except body)
    following = instructions[i + 1:]
    if following and following[0].opname == "POP_TOP":
        return True
    for ins in following:
        if ins.opname in _MATCHES:
            return True
        if ins.opname in _ENDS or ins.opname.startswith("STORE_") or ins.opcode in _JUMPS:
            return False  # a with block's exit, or a finally clause's body
    return False
