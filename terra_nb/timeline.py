"""Per-iteration runner spans and their Chrome-trace export. Plain data, no TensorFlow.

A ``RunnerSpan`` is a stretch of time one runner spent in one iteration: ``exec`` (working),
``compile`` (the GraphRunner building a segment's function and running it the first time),
``stall`` (waiting for the other runner); ``feed`` and ``fetch`` are moments (start == end); a
``region`` span is a call the PythonRunner answered by a region (its ``label``: which call),
within its exec time; ``views``: the views' listeners after an iteration's body.

Iterations are columns of time: iteration i's column runs from its start to the next one's (the
last one's: to its last span). Python's body is the start of the column; the rest of it is the
iterator's ``next()``, terra-nb's bookkeeping and the listeners. The GraphRunner's spans are
placed by when they ran, cut at column boundaries (``SpanLog``): a span's ``iteration`` is the
column it lies in, its ``work`` the iteration whose ops it ran (it may run behind Python). So
every span lies within its iteration's column, and per column exec, compile and stall add up to
at most its length (the rest is idle: no graph work in it).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

RUNNERS = ("python", "graph")
SPAN_KINDS = ("exec", "compile", "stall", "feed", "fetch", "region", "views")
PHASES = ("eager", "tracing", "coexec", "fallback")
BUSY = ("exec", "compile")  # what a runner does when it works
GRAPH_TIMES = ("exec", "stall", "compile")  # the GraphRunner's times kept per iteration


@dataclass(frozen=True, slots=True)
class RunnerSpan:
    """``t_start``/``t_end`` are ``time.perf_counter()`` seconds. ``label``: what ran (a region
    call ``Sequential.__call__``, a segment ``segment s3 · MatMul … Tanh``); ``ops``: how many ops
    it ran; ``compiled``: as one compiled function (True) or op by op (False); ``work``: the
    iteration whose ops a GraphRunner span ran (-1: its own ``iteration``)."""

    runner: str
    kind: str
    iteration: int
    phase: str
    t_start: float
    t_end: float
    label: str = ""
    ops: int = 0
    compiled: bool | None = None
    work: int = -1

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start

    @property
    def of_iteration(self) -> int:
        """The iteration whose work this span did."""
        return self.iteration if self.work < 0 else self.work


def exec_spans(iteration: int, phase: str, start: float, end: float, stalls) -> list[RunnerSpan]:
    """The PythonRunner's exec spans are the gaps between its stalls; stalls, feed/fetch moments
    and region calls are kept too, each within ``start``..``end`` (a wait before the iteration
    began, for the graph to finish the one before, is the earlier column's)."""
    spans = []
    for s in stalls:
        a, b = min(max(s.t_start, start), end), min(max(s.t_end, start), end)
        if b > a or s.t_start == s.t_end:
            spans.append(replace(s, iteration=iteration, t_start=a, t_end=b))
    cursor = start
    for stall in sorted((s for s in spans if s.kind == "stall"), key=lambda s: s.t_start):
        if stall.t_start > cursor:
            spans.append(RunnerSpan("python", "exec", iteration, phase, cursor, stall.t_start))
        cursor = max(cursor, stall.t_end)
    if end > cursor:
        spans.append(RunnerSpan("python", "exec", iteration, phase, cursor, end))
    return spans


class SpanLog:
    """The spans of the last ``keep`` iterations, grouped by iteration, plus each iteration's
    GraphRunner exec, stall and compile seconds for every iteration (three floats each, for the
    statistics).

    ``begin(iteration, t_start)`` opens a column; the GraphRunner's spans are then cut at column
    boundaries and each piece placed in the column it lies in (see the module docstring): a
    wait in a column with no graph work before it is idle, not drawn and not counted. Spans
    before the first column are dropped. Spans of an iteration older than the window are
    counted but not kept.
    """

    def __init__(self, keep: int = 200) -> None:
        self.keep = keep
        self._by_iteration: OrderedDict[int, list[RunnerSpan]] = OrderedDict()
        self._in_order = True  # keys ascending: the stale ones are at the front
        self.graph_times: dict[int, list[float]] = {}  # iteration -> [exec, stall, compile] s
        self._starts: list[float] = []  # column starts, by iteration
        self._worked = -1  # the last column the GraphRunner worked in

    def begin(self, iteration: int, t_start: float) -> None:
        """Iteration ``iteration`` (the next one) starts at ``t_start``: a new column."""
        del self._starts[iteration:]
        self._starts.append(t_start)

    def add(self, spans: Iterable[RunnerSpan]) -> None:
        newest = next(reversed(self._by_iteration), -1)
        for span in spans:
            placed = self._place(span) if span.runner == "graph" else (span,)
            for s in placed:
                if s.runner == "graph" and s.kind in GRAPH_TIMES:
                    times = self.graph_times.setdefault(s.iteration, [0.0, 0.0, 0.0])
                    times[GRAPH_TIMES.index(s.kind)] += s.duration
                if s.iteration > newest - self.keep:
                    kept = self._by_iteration.get(s.iteration)
                    if kept is None:
                        kept = self._by_iteration[s.iteration] = []
                        self._in_order = self._in_order and s.iteration > newest
                    kept.append(s)
                    newest = max(newest, s.iteration)
        self._trim(newest)

    def _place(self, span: RunnerSpan) -> list[RunnerSpan]:
        """``span`` (the GraphRunner's, tagged with the iteration it worked for) cut at column
        boundaries, each piece in its column."""
        starts = self._starts
        if not starts or span.kind in ("feed", "fetch", "region", "views"):
            return [span]
        if span.t_end <= starts[0]:
            return []
        work = span.of_iteration
        a = max(span.t_start, starts[0])
        column = bisect_right(starts, a) - 1
        pieces = []
        while True:
            end = starts[column + 1] if column + 1 < len(starts) else math.inf
            b = min(span.t_end, end)
            last = b >= span.t_end
            if span.kind != "stall" or last or self._worked == column:
                pieces.append(replace(span, iteration=column, t_start=a, t_end=b, work=work))
            if span.kind in BUSY:
                self._worked = column
            if last:
                return pieces
            a, column = end, column + 1

    def _trim(self, newest: int) -> None:
        # runs twice an iteration: no pass over the whole window unless a late iteration came
        if not self._in_order:
            self._by_iteration = OrderedDict(sorted(self._by_iteration.items()))
            self._in_order = True
        log = self._by_iteration
        while log and next(iter(log)) <= newest - self.keep:
            log.popitem(last=False)

    def spans(self) -> tuple[RunnerSpan, ...]:
        """The kept spans in iteration order (PythonRunner before GraphRunner within one)."""
        ordered = sorted(self._by_iteration.items())
        return tuple(
            s for _, spans in ordered for s in sorted(spans, key=lambda s: s.runner != "python")
        )


class SpanFeed:
    """Takes the spans appended to a list (or deque) since the last ``take``. Another thread may
    be appending, and the owner may drop old spans from the front: the last span taken is found
    again by identity, so nothing is taken twice or skipped."""

    def __init__(self) -> None:
        self._last: RunnerSpan | None = None

    def take(self, source: Sequence[RunnerSpan]) -> list[RunnerSpan]:
        end = len(source)
        start = end
        while start > 0 and source[start - 1] is not self._last:
            start -= 1
        new = [source[i] for i in range(start, end)]
        if new:
            self._last = new[-1]
        return new


def breakdown(spans: Iterable[RunnerSpan]) -> dict[str, float]:
    """Seconds per ``runner_kind`` (``python_exec``, ``graph_stall`` ...): the paper's Figure 6."""
    totals = {f"{r}_{k}": 0.0 for r in RUNNERS for k in ("exec", "stall")}
    for s in spans:
        key = f"{s.runner}_{s.kind}"
        if key in totals:
            totals[key] += s.duration
    return totals


def columns(stats: Sequence, spans: Iterable[RunnerSpan] = ()) -> list[tuple[float, float]]:
    """Each iteration's column of time, ``(start, end)``: from its start to the next one's; the
    last one's ends with its body or its last span, whichever is later."""
    out = [(a.t_start, b.t_start) for a, b in zip(stats, stats[1:])]
    if stats:
        last = stats[-1]
        ends = [s.t_end for s in spans if s.iteration == last.iteration]
        out.append((last.t_start, max([last.t_end, *ends])))
    return out


def span_name(s: RunnerSpan) -> str:
    """What a span is, in a few words: ``segment s3 · 14 ops · compiled``."""
    if s.kind == "region":
        return f"region call {s.label}"
    if s.kind in ("feed", "fetch", "views") or not s.label:
        return s.label or s.kind
    how = {True: "compiled", False: "op by op", None: ""}[s.compiled]
    parts = [s.label, f"{s.ops} op{'s' * (s.ops != 1)}" if s.ops else "", how]
    head = "compile " if s.kind == "compile" else ""
    return head + " · ".join(p for p in parts if p)


def to_chrome_trace(spans: Iterable[RunnerSpan]) -> str:
    """Chrome-trace JSON (opens in Perfetto / chrome://tracing): one thread lane per runner;
    each slice is named by what ran (segment, op count, compiled or not; compiles are their own
    slices), its args say the iteration it lies in and the one whose work it did."""
    spans = list(spans)
    origin = min((s.t_start for s in spans), default=0.0)
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": i, "args": {"name": name}}
        for i, name in enumerate(("PythonRunner", "GraphRunner"))
    ]
    for s in spans:
        args = {"iteration": s.iteration, "phase": s.phase, "kind": s.kind}
        if s.runner == "graph":
            args.update(work_of_iteration=s.of_iteration, ops=s.ops, compiled=s.compiled)
        common = {
            "name": s.kind if s.kind in ("exec", "stall") and not s.label else span_name(s),
            "cat": s.kind if s.kind == "compile" else s.phase,
            "pid": 1,
            "tid": RUNNERS.index(s.runner),
            "ts": (s.t_start - origin) * 1e6,
            "args": args,
        }
        if s.kind in ("feed", "fetch"):
            events.append({**common, "ph": "i", "s": "t"})
        else:
            events.append({**common, "ph": "X", "dur": s.duration * 1e6})
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})
