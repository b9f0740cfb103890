"""Plain-text reports on a finished ``%%terra`` run: status, summary line, timeline, export.

Everything here reads only the public results of a ``terra_nb.Terra`` (``stats``, ``graph``,
``spans``, ``explain()``, ``programs``, ``runs_op_by_op``) and returns plain data or text;
nothing is displayed. Locations name their cell as IPython does (``In [3]:6``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import terra_nb
from terra_nb.coexec.graph_runner import GraphRunner
from terra_nb.iterations import counts_by_kind
from terra_nb.trace.dot import Listing, cell_names

MAX_COMPILED = GraphRunner.max_compiled


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
    programs: int = 0  # graph segments run
    compiled: int = 0  # of them compiled
    runs_op_by_op: int = 0  # segment runs that executed their ops one by one
    whole_program: str = ""  # the whole program's summary (``--program whole``)
    plan: str = "segments"  # which plan shape co-executes: "segments" or "whole"
    regions: str = ""  # the regions' totals (``--regions``), else empty
    # iterations that did not co-execute, per kind of reason (``terra_nb.iterations``)
    not_coexec: tuple[tuple[str, int], ...] = ()

    @property
    def not_coexec_text(self) -> str:
        """``4 not co-executed (learning the loop 2, regions forming 2)``, or "" when every
        iteration co-executed (or the mode never does)."""
        if not self.not_coexec or self.mode not in ("coexec", "lazy"):
            return ""
        total = sum(n for _, n in self.not_coexec)
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.not_coexec)
        return f"{total} not co-executed ({kinds})"

    def __str__(self) -> str:
        covered = "never" if self.covered_at is None else f"from iteration {self.covered_at}"
        lines = [
            f"mode        {self.mode}",
            f"phase       {self.phase}",
            f"iterations  {self.iterations} ({self.completed} completed)",
            f"speed       {self.speed:.1f} it/s over {self.seconds:.3f} s",
            f"covered     {covered}",
            f"fallbacks   {self.fallbacks}",
        ]
        if self.not_coexec_text:
            lines.append(f"traced      {self.not_coexec_text}; %terra explain says why")
        lines += [
            f"TraceGraph  {self.nodes} nodes",
            f"plan        {PLANS.get(self.plan, self.plan)}",
            f"segments    {self.programs}, {self.compiled} compiled (the {MAX_COMPILED} most "
            f"recent kept), {self.runs_op_by_op} runs op by op",
        ]
        if self.whole_program:
            lines.append(f"program     {self.whole_program}")
        if self.regions:
            lines.append(f"regions     {self.regions}")
        if self.error:
            where = "" if self.stopped_at is None else f" in iteration {self.stopped_at}"
            lines.append(f"error       {self.error}{where}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


PLANS = {
    "segments": "segments (the default: faster than the whole program on this kind of machine; "
                "--program whole for one program per iteration)",
    "whole": "the whole program (one program per iteration, switch_case and while_loop)",
}


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
        compiled=terra.compiled_segments,
        runs_op_by_op=terra.runs_op_by_op,
        whole_program=_whole_program(terra),
        plan=getattr(terra, "program_kind", "segments"),
        regions=_regions(terra),
        not_coexec=tuple(counts_by_kind(stats).items()),
    )


def _regions(terra: Any) -> str:
    summary = getattr(terra, "regions", None)
    return summary.line() if summary is not None and summary.enabled else ""


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
        + (f"{status.not_coexec_text}, " if status.not_coexec_text else "")
        + f"TraceGraph {status.nodes} nodes"
    )
    if status.stopped_at is not None:
        text += f"; stopped by {status.error} in iteration {status.stopped_at}"
    elif status.error:
        text += f"; then {status.error}"
    return text


def named_fallback(fallback: Any) -> Any:
    """``fallback`` with its location's cell named as IPython names it (``In [3]:6``, not
    ``<terra-cell-…>:6``); outside IPython, or in a file, it is unchanged."""
    return replace(fallback, location=Listing(cells=cell_names()).where(fallback.location))


def explanation_of(terra: Any) -> Explanation:
    """The fallbacks of ``terra``'s run, their cells named (``%terra explain``)."""
    explained = terra.explain()
    regions = getattr(explained, "regions", None)
    shown = regions is not None and regions.listed
    if shown:  # each region's cell named as IPython names it, as the fallbacks' are
        where = Listing(cells=cell_names()).where
        regions = replace(regions, rows=tuple(replace(r, source=where(r.source))
                                              for r in regions.rows))
    traced = tuple(named_text(str(run)) for run in getattr(explained, "traced", ()))
    return Explanation(terra.mode, tuple(map(named_fallback, explained)),
                       str(regions) if shown else "", traced)


def named_text(text: str) -> str:
    """``text`` with every cell file named as IPython names it (``In [3]:6``)."""
    for name, label in cell_names().items():
        text = text.replace(f"{name}:", f"{label}:")
    return text


def pretty_fallback(fallback: Any, printer: Any, cycle: bool) -> None:
    """IPython's text form of a ``terra_nb.Fallback`` (``terra.explain()`` as a cell's result):
    its line, the cell named."""
    printer.text(str(named_fallback(fallback)))


@dataclass(frozen=True, slots=True)
class Explanation:
    """The fallbacks of the last run, one line each; the other iterations that did not
    co-execute, in runs of one reason; then the regions table (``--regions``)."""

    mode: str
    fallbacks: tuple[Any, ...]
    regions: str = ""  # the regions' table (``--regions``), else empty
    traced: tuple[str, ...] = ()  # the other iterations that did not co-execute, and why

    def __str__(self) -> str:
        lines = [str(f) for f in self.fallbacks]
        if self.traced and self.mode in ("coexec", "lazy"):
            lines.append("did not co-execute:" if lines else
                         f"no fallbacks in the last run (mode {self.mode}); did not co-execute:")
            lines += [f"  {run}" for run in self.traced]
        lines = lines or [f"no fallbacks in the last run (mode {self.mode})"]
        return "\n".join(lines + ([self.regions] if self.regions else []))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


TIMELINE_COLUMNS = ("python exec", "python stall", "graph exec", "graph stall")


def text_timeline(stats: Sequence[Any], rows: int = 20) -> str:
    """The per-iteration breakdown as a table (the first and last ``rows // 2`` iterations when
    there are more): phase, wall time, each runner's exec and stall time (ms), ops, and whether
    the TraceGraph already covered the iteration; then the mean of every column."""
    if not stats:
        return "no iterations"
    shown, skipped = list(stats), max(len(stats) - rows, 0)
    if skipped:
        shown = shown[: rows // 2] + shown[-(rows - rows // 2) :]
    times = "".join(f"{c:>13}" for c in TIMELINE_COLUMNS)
    lines = [f"{'iter':>5}  {'phase':<9}{'wall ms':>9}{times}{'ops':>6}  graph"]
    for i, s in enumerate(shown):
        if skipped and i == rows // 2:
            lines.append(f"{'...':>5}  ({skipped} iterations not shown)")
        lines.append(_timeline_row(s))
    mean = [sum(_ms(s, c) for s in stats) / len(stats) for c in TIMELINE_COLUMNS]
    wall = sum(s.t_end - s.t_start for s in stats) / len(stats) * 1e3
    lines.append(f"{'mean':>5}  {'':<9}{wall:>9.2f}" + "".join(f"{m:>13.2f}" for m in mean))
    return "\n".join(lines)


def _ms(s: Any, column: str) -> float:
    return (getattr(s, column.replace(" ", "_")) or 0.0) * 1e3


def _timeline_row(s: Any) -> str:
    ops = "-" if s.ops is None else str(s.ops)
    graph = {True: "covered", False: "new", None: "-"}[s.covered]
    mark = "" if s.ended == "completed" else f"  ({s.ended})"
    mark += f"  {s.label}" if getattr(s, "label", "") else ""  # a Keras step: which
    times = "".join(f"{_ms(s, c):>13.2f}" for c in TIMELINE_COLUMNS)
    wall = (s.t_end - s.t_start) * 1e3
    return f"{s.iteration:>5}  {s.phase:<9}{wall:>9.2f}{times}{ops:>6}  {graph}{mark}"


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
