"""Per-iteration runner spans and their Chrome-trace export. Plain data, no TensorFlow.

A ``RunnerSpan`` is a stretch of time one runner spent on one iteration: ``exec`` (working) or
``stall`` (waiting for the other runner); ``feed`` and ``fetch`` are moments (start == end); a
``region`` span is a call the PythonRunner answered by a region (its ``label``: which call), within
its exec time.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RUNNERS = ("python", "graph")
SPAN_KINDS = ("exec", "stall", "feed", "fetch", "region")
PHASES = ("eager", "tracing", "coexec", "fallback")


@dataclass(frozen=True, slots=True)
class RunnerSpan:
    """``t_start``/``t_end`` are ``time.perf_counter()`` seconds."""

    runner: str
    kind: str
    iteration: int
    phase: str
    t_start: float
    t_end: float
    label: str = ""  # a region span: the call (``Sequential.__call__``)

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


def exec_spans(iteration: int, phase: str, start: float, end: float, stalls) -> list[RunnerSpan]:
    """The PythonRunner's exec spans are the gaps between its stalls; stalls, feed/fetch moments
    and region calls are kept too."""
    spans = [s for s in stalls if s.kind != "stall"]
    cursor = start
    for stall in sorted((s for s in stalls if s.kind == "stall"), key=lambda s: s.t_start):
        if stall.t_start > cursor:
            spans.append(RunnerSpan("python", "exec", iteration, phase, cursor, stall.t_start))
        spans.append(stall)
        cursor = max(cursor, stall.t_end)
    if end > cursor:
        spans.append(RunnerSpan("python", "exec", iteration, phase, cursor, end))
    return spans


class SpanLog:
    """The spans of the last ``keep`` iterations, grouped by iteration (both runners' lanes of an
    iteration stay together however late the GraphRunner's arrive), plus each iteration's
    GraphRunner exec/stall seconds for every iteration (two floats each, for the statistics).

    Spans of an iteration older than the window are counted but not kept.
    """

    def __init__(self, keep: int = 200) -> None:
        self.keep = keep
        self._by_iteration: OrderedDict[int, list[RunnerSpan]] = OrderedDict()
        self._in_order = True  # keys ascending: the stale ones are at the front
        self.graph_times: dict[int, list[float]] = {}  # iteration -> [exec, stall] seconds

    def add(self, spans: Iterable[RunnerSpan]) -> None:
        newest = next(reversed(self._by_iteration), -1)
        for s in spans:
            if s.runner == "graph" and s.kind in ("exec", "stall"):
                times = self.graph_times.setdefault(s.iteration, [0.0, 0.0])
                times[s.kind == "stall"] += s.duration
            if s.iteration > newest - self.keep:
                kept = self._by_iteration.get(s.iteration)
                if kept is None:
                    kept = self._by_iteration[s.iteration] = []
                    self._in_order = self._in_order and s.iteration > newest
                kept.append(s)
                newest = max(newest, s.iteration)
        self._trim(newest)

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


def to_chrome_trace(spans: Iterable[RunnerSpan]) -> str:
    """Chrome-trace JSON (opens in Perfetto / chrome://tracing): one thread lane per runner."""
    spans = list(spans)
    origin = min((s.t_start for s in spans), default=0.0)
    events: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": i, "args": {"name": name}}
        for i, name in enumerate(("PythonRunner", "GraphRunner"))
    ]
    for s in spans:
        common = {
            "name": f"{s.label or s.kind} #{s.iteration}",
            "cat": s.phase,
            "pid": 1,
            "tid": RUNNERS.index(s.runner),
            "ts": (s.t_start - origin) * 1e6,
            "args": {"iteration": s.iteration, "phase": s.phase, "kind": s.kind},
        }
        if s.kind in ("feed", "fetch"):
            events.append({**common, "ph": "i", "s": "t"})
        else:
            events.append({**common, "ph": "X", "dur": s.duration * 1e6})
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"})
