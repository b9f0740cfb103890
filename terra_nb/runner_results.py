"""What the runners of a ``Terra`` report: the graph segments run, the whole program, the
runner spans and the per-iteration statistics with the GraphRunner's times (a mixin of
``Terra``, which keeps ``_engine``, ``_stats``, ``_spans``, ``_graph_feed`` and ``_span_lock``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .timeline import RunnerSpan


class RunnerResults:
    """The runners' side of ``Terra``'s results."""

    @property
    def programs(self) -> tuple:
        """The graph segments run so far, compiled or not yet (co-execution modes); ``str()`` of
        each lists its ops."""
        runner = getattr(self._engine, "runner", None)
        return runner.graph.programs if runner is not None else ()

    @property
    def compiled_segments(self) -> int:
        """How many of ``programs`` are compiled (see ``compile_after``)."""
        runner = getattr(self._engine, "runner", None)
        return runner.graph.compiled if runner is not None else 0

    @property
    def program(self):
        """The generated whole program (``Terra(program="whole")``) of the TraceGraph, once
        co-execution has begun, else None; ``print()`` it to see its cases and loops."""
        return getattr(self._engine, "program", None)

    @property
    def runs_op_by_op(self) -> int:
        """Graph segment runs that executed their ops one by one (not compiled yet, or not
        compilable)."""
        runner = getattr(self._engine, "runner", None)
        return runner.graph.interpreted if runner is not None else 0

    @property
    def spans(self) -> tuple[RunnerSpan, ...]:
        """Both runners' spans of the last ``keep_spans`` iterations, in iteration order."""
        self._take_graph_spans()
        return self._spans.spans()

    @property
    def stats(self) -> tuple:
        """One ``IterationStats`` per iteration, in order (graph times from the GraphRunner's
        spans)."""
        self._take_graph_spans()
        times = self._spans.graph_times
        if not times:
            return tuple(self._stats)
        return tuple(
            replace(s, graph_exec=times[i][0], graph_stall=times[i][1], graph_compile=times[i][2])
            if i in times else s
            for i, s in enumerate(self._stats)
        )

    def _take_graph_spans(self, python: Iterable[RunnerSpan] = ()) -> None:
        """Log ``python`` spans and the GraphRunner's new spans (written by its thread)."""
        runner = getattr(self._engine, "runner", None)
        with self._span_lock:  # the loop's thread and a view's may ask at once
            self._spans.add(python)
            if runner is not None:
                self._spans.add(self._graph_feed.take(runner.graph.spans))
