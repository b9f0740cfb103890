"""What a traced iteration teaches a loop: its trace merged into the TraceGraph and the signature
index, the first call of it that was not known, and the reason, in a person's words, why an
iteration traced instead of co-executing (``IterationStats.why``, ``explain()``).
"""

from __future__ import annotations

from typing import Any

from .capture.signature import op_type_of

# why an iteration did not co-execute: each reason starts with its kind (the words before ":")
LEARNING = "learning the loop"
NEW_PATH = "new path"
STILL_TRACING = "still tracing"


def merge_trace(learned: Any, trace, signatures) -> tuple[bool, tuple | None]:
    """Merge a traced iteration: whether the TraceGraph covered it, and the first call of it the
    signature index did not know with why (``(sig, why)``; None: every call known, what
    co-execution needs; a loop running a trip count it never ran before grows the TraceGraph,
    yet every call is known). Why is asked before the index learns the call, which then knows
    it."""
    sig = learned.index.unknown(signatures)
    unknown = None if sig is None else (sig, learned.index.why_unknown(sig))
    covered = learned.builder.merge(trace)
    learned.index.learn(trace, signatures, learned.builder.last_mapping)
    return covered, unknown


def last_path(learned: Any) -> tuple[int, ...]:
    """The TraceGraph nodes of the iteration merged last, in order."""
    mapping = learned.builder.last_mapping
    return tuple(mapping[i] for i in sorted(mapping))


def unknown_call(learned: Any, unknown: tuple) -> tuple[str, str, str]:
    """A call the index did not know (``merge_trace``'s): (why not, its op type, its
    location)."""
    sig, why = unknown
    return why, op_type_of(sig[0]), learned.locations.locations[sig[1]].text


def still_tracing(learned: Any, unknown: tuple, covered: bool) -> tuple[str, str, str]:
    """Why a traced iteration did not make the loop ready: (reason, op type, location)."""
    reason, op_type, location = unknown_call(learned, unknown)
    which = "a covered iteration" if covered else "the iteration"
    return f"{STILL_TRACING}: {which} made a call not seen before ({reason})", op_type, location


def why_traced(learned: Any, unknown: tuple | None, covered: bool, first: bool) -> str:
    """Why an iteration that did not fall back traced: the first call it made that was not
    known (a new path when the TraceGraph grew), or, when it knew every call, that the one
    before it had not (``first``: no iteration came before)."""
    if unknown is None:
        return f"{LEARNING}: the iteration before made calls not seen before; every call of " \
               f"this one was known, so the next co-executes"
    reason, op_type, location = unknown_call(learned, unknown)
    kind = LEARNING if first or covered else NEW_PATH
    what = "its first iteration: every op is new" if first else reason
    return f"{kind}: {what}, first at {op_type} ({location})"
