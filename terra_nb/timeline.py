"""Per-iteration runner spans and their Chrome-trace export. Plain data, no TensorFlow.

A ``RunnerSpan`` is a stretch of time one runner spent on one iteration: ``exec`` (working) or
``stall`` (waiting for the other runner); ``feed`` and ``fetch`` are moments (start == end).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

RUNNERS = ("python", "graph")
SPAN_KINDS = ("exec", "stall", "feed", "fetch")
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

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


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
            "name": f"{s.kind} #{s.iteration}",
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
