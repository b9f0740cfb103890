"""What ran: an equality test against eager also asserts that the loop really co-executed, and
in which plan, so that a silent fallback (tracing for ever, running eagerly, leaving the whole
program for segments) fails the test instead of passing on eager's own numbers.

    terra = compare(program)                   # equal to eager ...
    assert_coexecuted(terra, at_least=0.5)     # ... and half of its iterations co-executed

    assert_fell_back(terra, {3: "outlives the iteration"})   # exactly iteration 3, and why

    seen = watch(terra)                        # inside the Terra, before the loop ...
    assert ran_at(terra, seen, "h = tf.tanh(h)", "Tanh") == {4: 2, 5: 3}   # ... the regions hit

Only the public surface of ``Terra`` is read: ``stats`` (the phase of every iteration),
``program`` (the whole program in use at the end, or None), ``programs`` and ``runs_op_by_op``
(graph segments compiled and run op by op: segments ran), ``explain()`` (why an iteration fell
back), ``last_path`` (the TraceGraph nodes of the last iteration, read after every iteration by
``subscribe``), ``graph`` and ``learned.locations`` (each node's user source line).
"""

from __future__ import annotations

import linecache


def phases(terra) -> list[str]:
    """The phase of every iteration: tracing, coexec, fallback, eager."""
    return [s.phase for s in terra.stats]


def coexecuted(s) -> bool:
    """Whether an iteration ran under co-execution: ``coexec``, or ``eager`` because no op of it
    needed the graph (every op ran on real values: the plan "none"; the phase says so since the
    timeline tells what ran)."""
    return s.phase == "coexec" or s.why.startswith("no graph work")


def plan_of(terra) -> str:
    """Which plan ran the co-executed iterations: "whole" (one program per iteration, still in
    use at the end, and no segment ever ran), "segments" (graph segments ran, and no whole
    program is in use at the end: the plan asked for, or what a whole program that could not
    be built or gave up left), "mixed" (both) or "none" (nothing ran in the graph: nothing
    co-executed, or every op of the co-executed iterations was one Python runs for real, as it
    runs an iterator's ``next`` or the read of a variable whose shape may change)."""
    segments = bool(terra.programs) or terra.runs_op_by_op > 0
    if terra.program is not None:
        return "mixed" if segments else "whole"
    return "segments" if segments else "none"


def assert_coexecuted(terra, *, at_least: float = 0.5, last: int = 0,
                      plan: str | None = None) -> None:
    """At least ``at_least`` of the iterations (a share of them) co-executed, the ``last`` ones
    all did, and in ``plan`` (default: the plan the Terra was made with). Iterations traced while
    regions formed (``regions_forming``: at most two per region formed) are not counted."""
    ran = phases(terra)
    counted = [coexecuted(s) for s in terra.stats if not s.regions_forming]
    share = sum(counted) / max(len(counted), 1)
    why = f"phases {ran}, plan {plan_of(terra)}, fallbacks {list(map(str, terra.explain()))}"
    assert any(counted) and share >= at_least, f"co-executed {share:.0%}: {why}"
    tail = [coexecuted(s) for s in terra.stats][len(ran) - last :]
    assert tail == [True] * last, f"the last {last} did not: {why}"
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


def fell_back(terra) -> dict[int, str]:
    """The iterations that fell back to tracing, each with the reason ``explain()`` gives."""
    reasons = {f.iteration: f.reason for f in terra.explain()}
    return {s.iteration: reasons.get(s.iteration, "") for s in terra.stats
            if s.phase == "fallback"}


def assert_fell_back(terra, expected: dict[int, str]) -> None:
    """Exactly the iterations of ``expected`` fell back, each for a reason containing its text
    (``{}``: none fell back)."""
    got = fell_back(terra)
    why = f"phases {phases(terra)}, fallbacks {list(map(str, terra.explain()))}"
    assert sorted(got) == sorted(expected), f"fell back at {sorted(got)}: {why}"
    for i, text in expected.items():
        assert text in got[i], f"iteration {i} fell back for another reason: {why}"


def watch(terra) -> list[tuple[int, str, str, tuple[int, ...]]]:
    """From now on record, after every iteration: its number, its phase, where a co-executed one
    ran ("whole": in the whole program, still in use at its end; "segments") and the TraceGraph
    nodes it went through. Call it inside ``with Terra(...)``, before the loop."""
    seen = []

    def record(stats) -> None:
        where = "whole" if terra.program is not None else "segments"
        seen.append((stats.iteration, stats.phase, where, terra.last_path))

    terra.subscribe(record)
    return seen


def coexecuted_in(seen) -> dict[int, str]:
    """Each co-executed iteration ``watch`` saw, and where it ran: "whole" or "segments"."""
    return {i: where for i, phase, where, _ in seen if phase == "coexec"}


def ran_at(terra, seen, source: str, op_type: str) -> dict[int, int]:
    """The regions hit: for each co-executed iteration ``watch`` saw, how many ``op_type`` ops
    it ran at a user source line containing ``source`` (an arm of a branch: 0 or 1; a loop's
    body: once per trip)."""
    nodes, locations = terra.graph.nodes, terra.learned.locations.locations

    def line(node) -> str:
        frames = locations[node.loc].user_frames if node.loc >= 0 else ()
        return linecache.getline(frames[-1][0], frames[-1][1]) if frames else ""

    at = {n.id for n in nodes if n.op_type == op_type and source in line(n)}
    assert at, f"no {op_type} op at a line with {source!r} in the TraceGraph"
    return {i: sum(n in at for n in path) for i, phase, _, path in seen if phase == "coexec"}
