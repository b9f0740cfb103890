"""``Dashboard``: graph + timeline + counters, updated live from a running loop.

The loop thread calls ``on_iteration`` after every iteration. It only appends the record; at most
once per ``interval`` seconds it redraws the counters and the timeline, and at a rate bounded by
``graph_budget`` (the share of loop time the graph snapshots may take) it snapshots the
TraceGraph: hits before and after one iteration give that iteration's path. Graph layouts run on
a worker thread. When a notebook cell ends, the dashboard catches up and refreshes its output
(so a saved notebook holds the final picture as a PNG).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

from .graph_model import new_since, path_nodes
from .graph_view import GraphState
from .live import LayoutWorker, RateMeter, on_cell_end
from .saved import picture_metadata
from .static import PNG, counters_text, graph_bundle, stack_png, timeline_png
from .timeline_summary import add, summary
from .timeline_view import TimelineState, timeline_text

HERE = Path(__file__).parent
_ENTRY = "// @terra-entry"


def compose_esm(*parts: str, entry: str) -> str:
    """One ES module from the view modules (each cut at its ``// @terra-entry`` line, where its
    own ``render`` and default export start) and ``entry``, which exports ``{ render }``."""
    texts = [(HERE / p).read_text().split(_ENTRY)[0] for p in parts]
    return "\n".join([*texts, (HERE / entry).read_text()])


class Dashboard(GraphState, TimelineState, anywidget.AnyWidget):
    """The live view of a running ``Terra`` (see the module docstring)."""

    _esm = compose_esm("graph_view.js", "timeline_view.js", entry="dashboard.js")
    _css = HERE / "views.css"
    counters = t.Unicode("{}").tag(sync=True)

    def __init__(
        self, *, interval: float = 0.3, graph_budget: float = 0.01, window: int = 20, **kwargs
    ) -> None:
        """``interval``: seconds between redraws (at most ~1/interval updates/s);
        ``graph_budget``: share of the loop's time graph snapshots may take."""
        super().__init__(window=window, **kwargs)
        self._init_graph_state()
        self._init_timeline_state(lambda: self._source.spans if self._source else ())
        self.interval, self.graph_budget = interval, graph_budget
        self._source: Any = None
        self._worker = LayoutWorker()
        self._rate = RateMeter()
        self._stats: list = []
        self._pending: list = []
        self._totals = summary(())
        self._graph_mark = -math.inf  # start of the last GraphRunner span counted
        self._open = None  # the last iteration's record: its column is still open
        self._last_push = self._next_graph = 0.0
        self._pre_hits: list[int] | None = None
        self._last_hits: list[int] = []
        self._shown = None
        self._signature: tuple = ()
        self._finished_at = -1
        self.updates = 0
        self.busy_seconds = 0.0
        self._display_handle = None
        self._unhook = on_cell_end(self, "finish")

    # -- attaching --------------------------------------------------------------------------

    def attach(self, terra) -> Dashboard:
        """Subscribe to ``terra``'s iterations (anything with ``subscribe``, ``graph``,
        ``spans`` and ``stats``; ``explain()`` if it has one)."""
        self._source = terra
        self._stats = list(terra.stats)
        self._totals = summary(self._stats[:-1])
        self._open = self._stats[-1] if self._stats else None
        self._rate.extend(s.t_end for s in self._stats)
        self._count_graph(terra.spans, count=False)
        terra.subscribe(self.on_iteration)
        self.flush()
        return self

    def on_iteration(self, stats) -> None:
        """The listener: called in the loop's thread after every iteration. ``busy_seconds``
        sums the time spent here (the loop's direct cost of the dashboard)."""
        begin = time.perf_counter()
        self._pending.append(stats)
        if self._pre_hits is not None:
            self._graph_step(begin)
        now = time.perf_counter()
        if now - self._last_push >= self.interval:
            self._push(now, graph=now >= self._next_graph)
        self.busy_seconds += time.perf_counter() - begin

    # -- updating ---------------------------------------------------------------------------

    def _account(self, s) -> None:
        """Python's side of one iteration, counted once its column closes (when the next one
        starts); the GraphRunner's comes later, from its spans."""
        if self._open is not None:
            add(self._totals, self._open, s.t_start - self._open.t_start)
            self._totals["iterations"] += 1
        self._open = s
        self._rate.add(s.t_end)

    def totals(self) -> dict[str, float]:
        """The summary's totals so far: the closed columns, and the open one up to its end."""
        out = dict(self._totals)
        if self._open is not None:
            add(out, self._open, self._open.t_end - self._open.t_start)
            out["iterations"] += 1
        return out

    def _count_graph(self, spans, count: bool = True) -> None:
        """Add the GraphRunner spans that ended since the last count (one thread writes them,
        in time order) to the totals: an iteration's graph time arrives after the iteration."""
        mark = self._graph_mark
        for s in spans:
            if s.runner == "graph" and s.kind in ("exec", "compile", "stall") \
                    and s.t_start > mark:
                if count:
                    self._totals[f"graph_{s.kind}"] += s.duration
                self._graph_mark = max(self._graph_mark, s.t_start)

    def _push(self, now: float, graph: bool) -> None:
        """Counters and timeline now; with ``graph``, hits before the next iteration."""
        new, self._pending = self._pending, []
        for s in new:
            self._account(s)
        self._stats.extend(new)
        every = self._source.spans
        self._count_graph(every)
        with self._lock, self.hold_sync():
            self.draw_timeline(every, self._stats, self.totals())
            self.counters = json.dumps(self._counters("running"))
        if graph:
            self._pre_hits = [n.hits for n in self._source.graph.nodes]
        self._last_push = now
        self.updates += 1

    def _graph_step(self, t0: float) -> None:
        """Snapshot the graph after one iteration; lay it out again if its structure changed."""
        g = self._source.graph
        hits = [n.hits for n in g.nodes]
        path = self._path(g, self._pre_hits, hits)
        self._pre_hits, self._last_hits = None, hits
        self._show_graph(g, path, layout=self._worker.submit)
        cost = time.perf_counter() - t0
        self._next_graph = t0 + max(self.interval, 2 * cost / self.graph_budget)

    def _path(self, g, before: list[int], after: list[int]) -> list[int]:
        """The last iteration's path: the source's ``last_path`` when it exports one, else the
        nodes whose hits grew between the two snapshots."""
        exported = getattr(self._source, "last_path", None)
        if exported is not None:
            return sorted(exported() if callable(exported) else exported)
        return path_nodes(g, before, after)

    def _show_graph(self, g, path: list[int], layout) -> None:
        signature = self._signature
        if g is not self._shown:  # the engine hands out the same object while nothing changed
            marks = tuple((n.trip_counts, n.fetches) for n in g.nodes)
            signature = (len(g.nodes), len(g.edges), marks, len(g.region_calls), g.branches,
                         len(g.variables))
        if signature != self._signature:
            self._signature = signature
            self.set_graph(g, current=path, new=new_since(g, self._shown), layout=layout)
            self._shown = g
        else:
            with self._lock:
                self.current = path

    def _counters(self, status: str) -> dict:
        last = self._stats[-1] if self._stats else None
        fallbacks = sum(1 for s in self._stats if s.phase == "fallback")
        explain = getattr(self._source, "explain", None)
        reasons = [str(f) for f in explain()] if explain else []
        return {
            "iteration": last.iteration if last else -1,
            "phase": last.phase if last else "",
            "iterations_per_s": round(self._rate.rate(), 2),
            "fallbacks": max(fallbacks, len(reasons)),
            "last_fallback": reasons[-1] if reasons else "",
            "ops": last.ops if last else None,
            "nodes": len(self._shown.nodes) if self._shown is not None else 0,
            "status": status,
            "updates": self.updates,
        }

    # -- catching up ------------------------------------------------------------------------

    def flush(self, status: str = "running") -> None:
        """Draw everything up to the last iteration now, graph included (call it from the
        loop's thread or after the loop; a notebook cell's end calls ``finish``)."""
        if self._source is None:
            return
        now = time.perf_counter()
        self._push(now, graph=False)
        g = self._source.graph
        hits = [n.hits for n in g.nodes]
        self._show_graph(g, self._path(g, self._last_hits, hits), layout=self._worker.submit)
        self._last_hits = hits
        self._worker.wait()
        with self._lock:
            self.counters = json.dumps(self._counters(status))

    def finish(self) -> None:
        """After a cell: catch up, mark finished and refresh the saved output's picture."""
        seen = len(self._stats) + len(self._pending)
        if self._source is None or seen == self._finished_at:
            return
        self._finished_at = seen
        self.flush(status="finished")
        with self._lock:
            self._stats = list(self._source.stats)  # exact, now that every time is in
            self._totals = summary(self._stats[:-1])
            self._open = self._stats[-1] if self._stats else None
            self.draw_timeline(self._all_spans(), self._stats, self.totals())
        if self._display_handle is not None:
            self._display_handle.update(self)

    def redraw_timeline(self) -> None:
        """The lanes again, at the range the view asked for."""
        if self._source is not None:
            with self._lock:
                self.draw_timeline(self._all_spans(), self._stats, self.totals())

    def close(self) -> None:
        """Stop the layout worker and the cell hook, and close the widget."""
        self._worker.close()
        if self._unhook is not None:
            self._unhook()
        super().close()

    def _repr_mimebundle_(self, **kwargs):
        data, metadata = super()._repr_mimebundle_(**kwargs)
        graph = graph_bundle(self.static_picture()).get(PNG)
        lanes = timeline_png(self._all_spans(), self._stats, self.window, self.totals(),
                             self.view_range)
        pictures = [graph, lanes] if graph else [lanes]
        data[PNG] = stack_png(counters_text(json.loads(self.counters)), pictures)
        data["text/plain"] = f"terra-nb dashboard: {timeline_text(self._stats)}"
        return data, picture_metadata(metadata)  # saved as its picture (saved.py)
