"""Plain-text reports on a finished ``%%terra`` run: status, summary line, timeline, export.

Everything here reads only the public results of a ``terra_nb.Terra`` (``stats``, ``graph``,
``spans``, ``explain()``, ``programs``, ``runs_op_by_op``) and returns plain data or text;
nothing is displayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import terra_nb


@dataclass(frozen=True, slots=True)
class Status:
    """Where the last ``%%terra`` run got to. ``speed`` is iterations per second of loop time."""

    mode: str
    phase: str
    iterations: int
    completed: int
    fallbacks: int
    seconds: float
    speed: float
    covered_at: int | None
    nodes: int
    error: str = ""
    stopped_at: int | None = None
    programs: int = 0  # graph segments compiled
    runs_op_by_op: int = 0  # segment runs that executed their ops one by one
    whole_program: str = ""  # the whole program's summary (``--program whole``)

    def __str__(self) -> str:
        covered = "never" if self.covered_at is None else f"from iteration {self.covered_at}"
        lines = [
            f"mode        {self.mode}",
            f"phase       {self.phase}",
            f"iterations  {self.iterations} ({self.completed} completed)",
            f"speed       {self.speed:.1f} it/s over {self.seconds:.3f} s",
            f"covered     {covered}",
            f"fallbacks   {self.fallbacks}",
            f"TraceGraph  {self.nodes} nodes",
            f"segments    {self.programs} compiled, {self.runs_op_by_op} runs op by op",
        ]
        if self.whole_program:
            lines.append(f"program     {self.whole_program}")
        if self.error:
            where = "" if self.stopped_at is None else f" in iteration {self.stopped_at}"
            lines.append(f"error       {self.error}{where}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def status_of(terra: Any, error: BaseException | None = None) -> Status:
    """The ``Status`` of a ``Terra`` whose loop ran (or stopped with ``error``)."""
    stats = terra.stats
    seconds = stats[-1].t_end - stats[0].t_start if stats else 0.0
    covered = next((s.iteration for s in stats if s.covered), None)
    stopped = error is not None and bool(stats) and stats[-1].ended != "completed"
    return Status(
        mode=terra.mode,
        phase=stats[-1].phase if stats else "not started",
        iterations=len(stats),
        completed=sum(1 for s in stats if s.ended == "completed"),
        fallbacks=len(terra.explain()),
        seconds=seconds,
        speed=len(stats) / seconds if seconds > 0 else 0.0,
        covered_at=covered,
        nodes=len(terra.graph.nodes),
        error="" if error is None else type(error).__name__,
        stopped_at=stats[-1].iteration if stopped else None,
        programs=len(terra.programs),
        runs_op_by_op=terra.runs_op_by_op,
        whole_program=_whole_program(terra),
    )


def _whole_program(terra: Any) -> str:
    if getattr(terra, "program_kind", "segments") != "whole":
        return ""
    program = terra.program
    return "not generated (segments ran)" if program is None else program.summary()


def summary_line(status: Status) -> str:
    """The one line printed at the end of a ``%%terra`` cell."""
    text = (
        f"terra[{status.mode}]: {status.iterations} iteration"
        f"{'' if status.iterations == 1 else 's'} in {status.seconds:.2f} s "
        f"({status.speed:.1f} it/s), phase {status.phase}, {status.fallbacks} fallbacks, "
        f"TraceGraph {status.nodes} nodes"
    )
    if status.stopped_at is not None:
        text += f"; stopped by {status.error} in iteration {status.stopped_at}"
    elif status.error:
        text += f"; then {status.error}"
    return text


@dataclass(frozen=True, slots=True)
class Explanation:
    """The fallbacks of the last run, one line each."""

    mode: str
    fallbacks: tuple[Any, ...]

    def __str__(self) -> str:
        if not self.fallbacks:
            return f"no fallbacks in the last run (mode {self.mode})"
        return "\n".join(str(f) for f in self.fallbacks)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def text_timeline(stats: Sequence[Any], rows: int = 20, width: int = 40) -> str:
    """One line per iteration (first and last ``rows // 2`` when there are more): phase, time,
    ops, whether the TraceGraph already covered it, and a bar of the iteration's Python time."""
    if not stats:
        return "no iterations"
    longest = max(s.python_exec for s in stats) or 1.0
    shown = list(stats)
    skipped = 0
    if len(shown) > rows:
        skipped = len(shown) - rows
        shown = shown[: rows // 2] + shown[-(rows - rows // 2) :]
    lines = [f"{'iter':>5}  {'phase':<9} {'ms':>8} {'ops':>5}  {'graph':<7}  python exec"]
    for i, s in enumerate(shown):
        if skipped and i == rows // 2:
            lines.append(f"{'...':>5}  ({skipped} iterations not shown)")
        bar = "#" * max(1, round(width * s.python_exec / longest))
        ops = "-" if s.ops is None else str(s.ops)
        mark = "" if s.ended == "completed" else f"  ({s.ended})"
        ms = f"{s.python_exec * 1e3:>8.2f}"
        graph = {True: "covered", False: "new", None: "-"}[s.covered]
        lines.append(f"{s.iteration:>5}  {s.phase:<9} {ms} {ops:>5}  {graph:<7}  {bar}{mark}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Export:
    """The files ``%terra export`` wrote."""

    graph_json: Path
    graph_dot: Path
    chrome_trace: Path

    def __str__(self) -> str:
        return "\n".join(f"wrote {p}" for p in (self.graph_json, self.graph_dot, self.chrome_trace))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def export_run(terra: Any, directory: Path) -> Export:
    """Write the TraceGraph (JSON, DOT) and the runner spans (Chrome trace) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    graph = terra.graph
    out = Export(
        directory / "tracegraph.json", directory / "tracegraph.dot", directory / "timeline.json"
    )
    out.graph_json.write_text(graph.to_json())
    out.graph_dot.write_text(graph.to_dot())
    out.chrome_trace.write_text(terra_nb.to_chrome_trace(terra.spans))
    return out
