"""What each iteration did and, when it did not co-execute, why.

``IterationStats`` is the record of one iteration (``terra.stats``). Its ``why`` says in a few
words why it traced or ran eagerly, starting with the kind of reason: ``learning the loop`` (its
first iterations, until every call is known), ``new path`` (a call never seen, with its op and
line), ``regions forming`` (run for real so that Keras calls could form regions, or a new
region's function could make its first call), ``fallback`` (Python left the known path mid-way),
``still tracing`` (every iteration makes calls not seen before: an iterator of a distributed
dataset, say), ``gave up``, ``running eagerly``, ``no graph work``, or the mode's own. Runs of
iterations with the same reason are what ``explain()``, ``%terra status`` and the ``%%terra``
summary line say (``TracedRun``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IterationStats:
    """What one iteration did. Times are seconds (``perf_counter``); ``None`` = not measured
    (eager mode does not look at ops). ``ended``: completed, stopped (break / exception). Graph
    times count what the GraphRunner did in this iteration's column of time (``timeline.py``: from
    its start to the next one's), whichever iteration's ops it ran; ``graph_compile`` is the
    time it spent building segments (and their first runs), apart from ``graph_exec``.
    ``regions_forming``: traced so that regions could form from its calls (or to learn the
    calls of regions just formed), although the loop could have co-executed; ``why``: why its
    phase is not co-execution, in a few words ("" for a co-executed one)."""

    iteration: int
    phase: str
    t_start: float
    t_end: float
    python_exec: float
    python_stall: float
    graph_exec: float
    graph_stall: float
    ops: int | None
    feeds: int | None
    fetches: int | None
    covered: bool | None
    ended: str
    regions_forming: bool = False
    why: str = ""
    graph_compile: float = 0.0
    label: str = ""  # a Keras step's (``fit 1 epoch 2 step 5``) or ``terra.step(label=...)``


def why_of(result, forming: str | None) -> str:
    """The ``why`` of an iteration from its engine's result (``modes.IterationResult``) and,
    when the loop ran it for real for the regions, the calls they were forming (``forming``)."""
    if result.fallback is not None:
        reason, op_type, where = result.fallback
        return f"fallback: {reason} " + (f"at {op_type} ({where})" if where else op_type)
    if forming is not None and result.phase != "coexec":
        return f"regions forming: run for real for {forming or 'the regions just formed'}"
    if result.not_ready is not None:
        reason, op_type, where = result.not_ready
        return f"{reason} at {op_type} ({where})"
    return result.why


def kind(why: str) -> str:
    """The kind of a reason: its words before the first colon."""
    return why.partition(":")[0]


@dataclass(frozen=True, slots=True)
class TracedRun:
    """Iterations ``first``..``last`` in a row with the same phase and reason."""

    first: int
    last: int
    phase: str
    why: str

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        which = (f"iteration {self.first}" if self.first == self.last
                 else f"iterations {self.first}–{self.last}")
        return f"{which}: {self.phase}, {self.why}"


def traced_runs(stats: Sequence[IterationStats], skip: frozenset[int] = frozenset()
                ) -> tuple[TracedRun, ...]:
    """The iterations that did not co-execute, in runs of one reason (``skip``: iterations said
    elsewhere, such as fallbacks)."""
    runs: list[TracedRun] = []
    for s in stats:
        if s.phase == "coexec" or s.iteration in skip:
            continue
        why = s.why or s.phase
        last = runs[-1] if runs else None
        if last and last.last == s.iteration - 1 and (last.phase, last.why) == (s.phase, why):
            runs[-1] = TracedRun(last.first, s.iteration, s.phase, why)
        else:
            runs.append(TracedRun(s.iteration, s.iteration, s.phase, why))
    return tuple(runs)


def counts_by_kind(stats: Sequence[IterationStats]) -> dict[str, int]:
    """How many iterations did not co-execute, per kind of reason, in order of first sight."""
    out: dict[str, int] = {}
    for s in stats:
        if s.phase != "coexec":
            out[kind(s.why or s.phase)] = out.get(kind(s.why or s.phase), 0) + 1
    return out
