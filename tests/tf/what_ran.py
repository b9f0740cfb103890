"""What ran: an equality test against eager also asserts that the loop really co-executed, and
in which plan, so that a silent fallback (tracing for ever, running eagerly, leaving the whole
program for segments) fails the test instead of passing on eager's own numbers.

    terra = compare(program)                   # equal to eager ...
    assert_coexecuted(terra, at_least=0.5)     # ... and half of its iterations co-executed

Only the public surface of ``Terra`` is read: ``stats`` (the phase of every iteration),
``program`` (the whole program in use at the end, or None), ``programs`` and ``runs_op_by_op``
(graph segments compiled and run op by op: segments ran).
"""

from __future__ import annotations


def phases(terra) -> list[str]:
    """The phase of every iteration: tracing, coexec, fallback, eager."""
    return [s.phase for s in terra.stats]


def plan_of(terra) -> str:
    """Which plan ran the co-executed iterations: "whole" (one program per iteration, still in
    use at the end, and no segment ever ran), "segments" (graph segments ran, and no whole
    program is in use at the end: the plan asked for, or what a whole program that could not
    be built or gave up left), "mixed" (both) or "none" (nothing ran in the graph)."""
    segments = bool(terra.programs) or terra.runs_op_by_op > 0
    if terra.program is not None:
        return "mixed" if segments else "whole"
    return "segments" if segments else "none"


def assert_coexecuted(terra, *, at_least: float = 0.5, last: int = 0,
                      plan: str | None = None) -> None:
    """At least ``at_least`` of the iterations (a share of them) co-executed, the ``last`` ones
    all did, and in ``plan`` (default: the plan the Terra was made with)."""
    ran = phases(terra)
    share = ran.count("coexec") / max(len(ran), 1)
    why = f"phases {ran}, plan {plan_of(terra)}, fallbacks {list(map(str, terra.explain()))}"
    assert ran.count("coexec") and share >= at_least, f"co-executed {share:.0%}: {why}"
    assert ran[len(ran) - last :] == ["coexec"] * last, f"the last {last} did not: {why}"
    expected = plan if plan is not None else terra.program_kind
    assert plan_of(terra) == expected, f"expected the {expected} plan: {why}"


def assert_stayed_in_tracing(terra, *, reason: str | None = None) -> None:
    """The loop legitimately never co-executed (it ran eagerly, traced, every iteration);
    ``reason``: a fallback or warning text expected to say why."""
    ran = phases(terra)
    assert "coexec" not in ran, f"it co-executed: {ran}"
    if reason is not None:
        said = [str(f) for f in terra.explain()] + list(getattr(terra, "caught_warnings", []))
        assert any(reason in s for s in said), (reason, said)
