"""Which stretch of a run the timeline shows, and the numbers of each iteration in it.

A ``Window`` is a stretch of loop time: the last ``window`` iterations (it follows a running loop)
or a range the view asked for (pan and zoom: seconds from the first iteration's start). Every
iteration is a column of time (``terra_nb.timeline.columns``); the window holds the columns and
spans that meet it. ``column_times`` gives one column's numbers, which add up to its length.

Reads only ``RunnerSpan`` and ``IterationStats`` records (any object with those fields).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..timeline import columns


@dataclass(frozen=True)
class Window:
    """``t0``..``t1``: perf_counter seconds shown; ``origin``/``end``: the whole run's;
    ``stats`` and ``columns`` (start, end) of the iterations that meet it, ``spans`` likewise;
    ``all_stats``/``all_columns``: every iteration (the overview); ``follow``: the last
    iterations of a running loop rather than a chosen range."""

    t0: float
    t1: float
    origin: float
    end: float
    stats: tuple
    columns: tuple
    spans: tuple
    all_stats: tuple
    all_columns: tuple
    follow: bool

    @property
    def iterations(self) -> list[int]:
        return [s.iteration for s in self.stats]

    def caption(self) -> str:
        """What the lanes show: ``iterations #80–#99 (the last 20 of 100)``."""
        shown = self.iterations
        if not shown:
            return "no iterations yet"
        total = len(self.all_stats)
        first, last = shown[0], shown[-1]
        span = f"iteration #{first}" if len(shown) == 1 else f"iterations #{first}–#{last}"
        if self.follow:
            every = len(shown) == total
            return span + (f" (all {total})" if every else f" (the last {len(shown)} of {total})")
        return f"{span} of {total} · {_ms(self.t1 - self.t0)} of {_ms(self.end - self.origin)}"


def select(spans: Sequence, stats: Sequence, window: int = 20,
           view_range: Sequence[float] = ()) -> Window:
    """The window of the last ``window`` iterations, or of ``view_range`` (seconds from the first
    iteration's start, clamped to the run) when one is given."""
    stats = tuple(stats)
    spans = tuple(spans)
    cols = tuple(columns(stats, [s for s in spans if stats and s.iteration == stats[-1].iteration]))
    if not stats:
        return Window(0.0, 0.0, 0.0, 0.0, (), (), spans, (), (), True)
    origin, end = cols[0][0], cols[-1][1]
    if len(view_range) == 2 and view_range[1] > view_range[0]:
        total = end - origin
        width = min(max(view_range[1] - view_range[0], 1e-6), total)
        t0 = origin + min(max(view_range[0], 0.0), total - width)
        t1, follow = t0 + width, False
    else:
        t0, t1, follow = cols[max(0, len(cols) - window)][0], end, True
    shown = [i for i, (a, b) in enumerate(cols) if b > t0 and a < t1]
    if shown and follow:
        shown = shown[-window:]
    iterations = {stats[i].iteration for i in shown}
    return Window(
        t0, t1, origin, end, tuple(stats[i] for i in shown), tuple(cols[i] for i in shown),
        tuple(s for s in spans if s.iteration in iterations and s.t_end >= t0 and s.t_start <= t1),
        stats, cols, follow,
    )


def column_times(stat, column: tuple[float, float], spans: Sequence) -> dict[str, float]:
    """One iteration's column in seconds: ``wall`` (the column), ``body`` (Python's iteration),
    Python ``exec``/``stall``/``views``/``between`` (the rest: the iterable's ``next()`` and
    terra-nb's bookkeeping), GraphRunner ``graph_exec``/``graph_compile``/``graph_stall`` from
    the column's spans and ``graph_idle`` (the rest). Each runner's parts add up to ``wall``."""
    wall = column[1] - column[0]
    body = stat.t_end - stat.t_start
    mine = [s for s in spans if s.iteration == stat.iteration]
    views = sum(s.duration for s in mine if s.kind == "views")
    out = {"wall": wall, "body": body, "exec": stat.python_exec, "stall": stat.python_stall,
           "views": views, "between": max(wall - body - views, 0.0)}
    for kind in ("exec", "compile", "stall"):
        out[f"graph_{kind}"] = sum(s.duration for s in mine
                                   if s.runner == "graph" and s.kind == kind)
    graph = out["graph_exec"] + out["graph_compile"] + out["graph_stall"]
    out["graph_idle"] = max(wall - graph, 0.0)
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"
