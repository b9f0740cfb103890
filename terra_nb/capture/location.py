"""Program location of an op: the frame chain from the op up to the loop's frame.

The location of an op is the chain of ``(code, f_lasti)`` pairs of every frame between the op's
wrapper and the *root frame* (the frame that runs the Terra loop). The chain tells apart different
lines, several ops on one line (different instructions, or different lines inside a library call),
and one helper reached from two call sites; the same instruction run again gives the same chain,
which is how loops are recognised.

Chains are interned to small ints (``loc`` ids) by ``LocationTable.locate``, the only function on
the per-op hot path: a frame walk and one dict look-up. Everything else (file:line, the user loops
around the op, iteration boundaries) is computed once per chain, off the hot path.
"""

from __future__ import annotations

import dis
import functools
import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass
from types import CodeType, FrameType

from tensorflow.python.eager import backprop

_LIBRARY_DIRS = tuple(
    sorted(
        {
            os.path.realpath(p) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := sysconfig.get_paths().get(key))
        }
        # the whole terra_nb package: a region's function call is located at the user's line
        | {os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep}
    )
)


# Functions a C loop calls once per item: the gradient tape calls one per taped op. Two ops
# issued under one of them are never iterations of a user loop, whatever their frame chains.
_CALLED_FROM_C_LOOPS: set[CodeType] = {backprop._gradient_function.__code__}


def called_from_c_loop(code: CodeType) -> None:
    """Mark ``code`` as a function a C loop calls (a backward function on the gradient tape)."""
    _CALLED_FROM_C_LOOPS.add(code)


@functools.lru_cache(maxsize=8192)  # a realpath per frame is a system call
def is_user_code(code: CodeType) -> bool:
    """True for code the user wrote: not the standard library, installed packages or terra-nb."""
    name = code.co_filename
    if name.startswith("<frozen"):
        return False
    return not os.path.realpath(name).startswith(_LIBRARY_DIRS)


def loop_ranges(code: CodeType) -> tuple[tuple[int, int], ...]:
    """Bytecode ranges ``(start, end)`` of the loops in ``code``: every backward jump is one loop.

    ``yield from``/``await`` use a backward jump that is not a loop of the program; it is skipped.
    Backward jumps to the same start are one loop (an ``if`` or ``continue`` in its body jumps back
    from more than one place), and so are ranges that overlap without nesting (a ``while`` with a
    ``continue``: one jump goes back to the test, the other to the body after it). Ranges are
    sorted outermost first.
    """
    ends: dict[int, int] = {}
    for ins in dis.get_instructions(code):
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            target = ins.argval
            is_backward = isinstance(target, int) and target < ins.offset
            if is_backward and "NO_INTERRUPT" not in ins.opname:
                ends[target] = max(ends.get(target, 0), ins.offset)
    merged: list[list[int]] = []
    for start, end in sorted(ends.items()):
        crossing = [r for r in merged if r[0] < start <= r[1] < end]
        for r in crossing:
            merged.remove(r)
        start = min([start] + [r[0] for r in crossing])
        merged.append([start, end])
    return tuple(sorted(((a, b) for a, b in merged), key=lambda r: (r[0], -r[1])))


@dataclass(frozen=True, slots=True)
class LoopSite:
    """A user loop, identified by the call chain that reaches its frame and its bytecode start."""

    id: int
    file: str
    line: int
    function: str


@dataclass(frozen=True, slots=True)
class Location:
    """What is known about one interned chain. ``frames`` go from the root frame inwards."""

    id: int
    frames: tuple[tuple[CodeType, int], ...]
    user_frames: tuple[tuple[str, int, str], ...]  # (file, line, function), root first
    loops: tuple[int, ...]  # enclosing user LoopSite ids, outermost first
    library: str = "<library>"  # the text of a chain without user frames (``library_text``)

    @property
    def text(self) -> str:
        """``file:line`` of the innermost user frame (where the user wrote the op); without one
        (a Keras step of ``fit``), the innermost Keras line, in angle brackets."""
        if not self.user_frames:
            return self.library
        file, line, _ = self.user_frames[-1]
        return f"{os.path.basename(file)}:{line}"

    @property
    def function(self) -> str:
        return self.user_frames[-1][2] if self.user_frames else ""

    @property
    def where(self) -> str:
        """``text`` and the user's source line there, for ``explain()``."""
        file, line, _ = self.user_frames[-1] if self.user_frames else ("", 0, "")
        return f"{self.text}  {linecache.getline(file, line).strip() if file else ''}"


_KERAS_DIR = os.sep + "keras" + os.sep
# Keras's plumbing under a layer or a step: its backend, ops and utilities
_KERAS_PLUMBING = tuple(os.sep.join(("", "keras", "src", d, "")) for d in
                        ("backend", "ops", "utils", "tree"))


def library_text(frames) -> str:
    """``<dense.py:144>``: the innermost Keras frame of a chain that is not Keras's plumbing
    (where Keras runs the op: a layer's ``call``, ``train_step``, an optimizer), else the
    innermost Keras frame, else ``<library>``."""
    keras_frames = [(c, i) for c, i in frames if _KERAS_DIR in c.co_filename]
    named = [(c, i) for c, i in keras_frames if not any(d in c.co_filename
                                                        for d in _KERAS_PLUMBING)]
    for code, lasti in (named or keras_frames)[-1:]:
        return f"<{os.path.basename(code.co_filename)}:{_line_of(code, lasti)}>"
    return "<library>"


def _signature(frames) -> tuple:
    """A name for a frame chain that survives recompiling the same source."""
    return tuple((c.co_filename, c.co_qualname, c.co_firstlineno, i) for c, i in frames)


def _line_of(code: CodeType, lasti: int) -> int:
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno


class LocationTable:
    """Interns frame chains; answers which user loops enclose an op and where iterations begin.

    ``root`` is the frame running the Terra loop; ``root_lasti`` the instruction it was at when the
    iteration began (inside the training loop itself, which is excluded from the user loops).
    """

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}  # chain of (id(code), lasti) -> loc id (hot path)
        self._by_signature: dict[tuple, int] = {}  # the same chain by stable code names -> loc id
        self.locations: list[Location] = []
        self.loops: list[LoopSite] = []
        self._loop_ids: dict[tuple, int] = {}
        self._codes: set[CodeType] = set()  # keeps code objects alive so their ids stay unique
        self._ranges: dict[CodeType, tuple[tuple[int, int], ...]] = {}
        self._user: dict[CodeType, bool] = {}
        self._boundaries: dict[tuple[int, int], int | None] = {}
        self.root: FrameType | None = None
        self._excluded: frozenset[tuple[int, int]] = frozenset()

    def set_root(self, root: FrameType) -> None:
        """Make ``root`` the loop frame; loops around its current instruction are not user loops."""
        self.root = root
        lasti = root.f_lasti
        self._excluded = frozenset(r for r in self._ranges_of(root.f_code) if r[0] <= lasti <= r[1])

    def release_root(self) -> None:
        """Forget the loop frame when an iteration ends: holding it would keep every local
        variable of the user's function alive (a learned table outlives its loop)."""
        self.root = None

    def locate(self, frame: FrameType | None) -> int:
        """Hot path: intern the chain from ``frame`` up to the root frame; return its loc id."""
        root = self.root
        start = frame
        key: list = []
        append = key.append
        while frame is not None:  # the stack is finite: a frame outside the loop ends at its base
            append(id(frame.f_code))
            append(frame.f_lasti)
            if frame is root:
                break
            frame = frame.f_back
        tkey = tuple(key)
        loc = self._ids.get(tkey)
        if loc is None:
            loc = self._intern(tkey, start)
        return loc

    # -- off the hot path -------------------------------------------------------------------

    def _intern(self, key: tuple, frame: FrameType | None) -> int:
        # Walk the same chain again to hold the code objects (the key only has their ids).
        frames: list[tuple[CodeType, int]] = []
        for _ in range(len(key) // 2):
            frames.append((frame.f_code, frame.f_lasti))
            frame = frame.f_back
        frames.reverse()
        for code, _ in frames:
            self._codes.add(code)
        # A notebook cell run again compiles new code objects: the signature (file, name, first
        # line, instruction) finds what an earlier run learned about the same chain.
        signature = _signature(frames)
        known = self._by_signature.get(signature)
        if known is not None:
            self._ids[key] = known
            return known
        loc = Location(
            id=len(self.locations),
            frames=tuple(frames),
            user_frames=tuple(
                (c.co_filename, _line_of(c, i), c.co_qualname)
                for c, i in frames
                if self._is_user(c)
            ),
            loops=self._user_loops(tuple(frames)),
            library=library_text(frames),
        )
        self.locations.append(loc)
        self._ids[key] = loc.id
        self._by_signature[signature] = loc.id
        return loc.id

    def _is_user(self, code: CodeType) -> bool:
        user = self._user.get(code)
        if user is None:
            user = self._user[code] = is_user_code(code)
        return user

    def _ranges_of(self, code: CodeType) -> tuple[tuple[int, int], ...]:
        ranges = self._ranges.get(code)
        if ranges is None:
            ranges = self._ranges[code] = loop_ranges(code)
        return ranges

    def _loops_at(self, frames, j: int) -> list[tuple[int, int]]:
        """Loop ranges of frame ``j`` that contain its instruction, outermost first."""
        code, lasti = frames[j]
        found = [r for r in self._ranges_of(code) if r[0] <= lasti <= r[1]]
        if j == 0:
            found = [r for r in found if r not in self._excluded]
        return found

    def _loop_id(self, frames, j: int, start: int) -> int:
        code = frames[j][0]
        key = _signature((*frames[:j], (code, start)))
        lid = self._loop_ids.get(key)
        if lid is None:
            lid = self._loop_ids[key] = len(self.loops)
            self.loops.append(
                LoopSite(lid, code.co_filename, _line_of(code, start), code.co_qualname)
            )
        return lid

    def _user_loops(self, frames) -> tuple[int, ...]:
        out = []
        for j, (code, _) in enumerate(frames):
            if self._is_user(code):
                out.extend(self._loop_id(frames, j, r[0]) for r in self._loops_at(frames, j))
        return tuple(out)

    def loop_text(self, loop: int) -> str:
        """``file:line`` of a user loop."""
        site = self.loops[loop]
        return f"{os.path.basename(site.file)}:{site.line}"

    def boundary(self, prev: int, loc: int) -> int | None:
        """The user loop that starts a new iteration between two consecutive ops, or None.

        An instruction runs again only through a backward jump. Going from ``prev`` to ``loc``,
        the first frame where the chains differ tells where: a backward step inside one frame is
        the innermost loop of that frame holding both instructions; otherwise the instruction of
        the frame above ran again, and the innermost loop around it (searching outwards) iterated.
        A loop in library code (an optimizer looping over variables) is not a user loop: its ops
        stay a straight sequence, and no boundary is reported.
        """
        pair = (prev, loc)
        if pair in self._boundaries:
            return self._boundaries[pair]
        result = self._compute_boundary(self.locations[prev].frames, self.locations[loc].frames)
        self._boundaries[pair] = result
        return result

    def _compute_boundary(self, a, b) -> int | None:
        k = 0
        while k < len(a) and k < len(b) and a[k] == b[k]:
            k += 1
        if k < len(a) and k < len(b) and a[k][0] == b[k][0]:
            if b[k][1] > a[k][1]:
                return None  # forward in the same frame: same iteration
            both = [r for r in self._loops_at(a, k) if r[0] <= b[k][1] <= r[1]]
            if both:
                return self._site(a, k, both[-1])
        elif 0 < k < len(a) and k < len(b) and not self._is_user(a[k - 1][0]):
            # One library instruction called other functions: a loop in the library or in C (the
            # gradient functions ``tape.gradient`` calls one after another), not a user loop.
            return None
        for j in range(min(k, len(a), len(b)) - 1, -1, -1):
            if b[j][0] in _CALLED_FROM_C_LOOPS:  # e.g. two region backward calls in a row
                return None
            around = self._loops_at(b, j)
            if around:
                return self._site(b, j, around[-1])
        return None

    def _site(self, frames, j: int, loop_range: tuple[int, int]) -> int | None:
        if not self._is_user(frames[j][0]):
            return None
        return self._loop_id(frames, j, loop_range[0])


def user_line() -> tuple[str, str]:
    """The innermost caller that is user code (``is_user_code``: not terra-nb, installed
    packages or the standard library): ``file:line  source``, and the call expression it is
    running there (``model(x)``, from the code's positions), or ""."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if is_user_code(code):
            site = (code, frame.f_lasti)  # the code object is held: its id is never reused
            known = _user_lines.get(site)
            if known is None:
                if len(_user_lines) > 4096:
                    _user_lines.clear()
                text = linecache.getline(code.co_filename, frame.f_lineno)
                source = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}  {text.strip()}"
                known = _user_lines[site] = (source, _call_text(frame, text))
            return known
        frame = frame.f_back
    return "?", ""


_user_lines: dict[tuple, tuple[str, str]] = {}  # (code, instruction) -> user_line's answer


def _call_text(frame, text: str) -> str:
    """The source of the call ``frame`` is in, when it sits on one line (columns are UTF-8)."""
    positions = list(frame.f_code.co_positions())
    at = frame.f_lasti // 2
    if at >= len(positions):
        return ""
    line, end_line, col, end_col = positions[at]
    if line != frame.f_lineno or end_line != line or col is None or end_col is None:
        return ""
    return text.encode()[col:end_col].decode(errors="replace")
