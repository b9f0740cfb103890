"""``Terra``: the public entry point and the phase machine around the user's loop.

    with terra_nb.Terra(mode="trace") as terra:
        for x, y in terra.loop(batches):
            ...                      # any Python
    terra.graph                      # the TraceGraph
    terra.stats                      # one IterationStats per iteration

Modes: ``trace`` runs the loop eagerly and builds the TraceGraph; ``eager`` runs it untouched with
the same statistics (the baseline). ``coexec`` and ``lazy`` need the co-execution engine.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from . import capture
from .errors import TerraError, TerraUsageError
from .location import LocationTable
from .merge import GraphBuilder
from .recorder import TraceRecorder
from .timeline import RunnerSpan
from .tracegraph import TraceGraph

MODES = ("coexec", "lazy", "trace", "eager")
_AVAILABLE = ("trace", "eager")
_open = threading.local()  # the Terra whose context is open in this thread


@dataclass(frozen=True, slots=True)
class IterationStats:
    """What one iteration did. Times are seconds (``perf_counter``); ``None`` = not measured
    (eager mode does not look at ops). ``ended``: completed, stopped (break / exception)."""

    iteration: int
    phase: str
    t_start: float
    t_end: float
    python_exec: float
    python_stall: float
    graph_exec: float
    graph_stall: float
    ops: int | None
    feeds: int | None
    fetches: int | None
    covered: bool | None
    ended: str


@dataclass(frozen=True, slots=True)
class Fallback:
    """One iteration that left co-execution: why, at which op, at which user source line."""

    iteration: int
    reason: str
    op_type: str
    location: str
    source_line: str

    def __str__(self) -> str:
        return (
            f"iteration {self.iteration}: {self.reason} at {self.op_type} "
            f"({self.location}: {self.source_line.strip()})"
        )


@dataclass(slots=True)
class Learned:
    """What a Terra learned about a loop (locations, TraceGraph), reusable by a later Terra
    running the same code: ``Terra(learned=earlier.learned)``. Runtime state, not plain data."""

    locations: LocationTable
    builder: GraphBuilder


class _Step:
    def __init__(self, terra: Terra) -> None:
        self._terra = terra

    def __enter__(self) -> Terra:
        self._terra._begin(sys._getframe(1))
        return self._terra

    def __exit__(self, exc_type, exc, tb) -> None:
        self._terra._end("completed" if exc_type is None else "stopped")


class Terra:
    """Runs a training loop under terra-nb; see the module docstring."""

    def __init__(
        self,
        mode: str = "trace",
        *,
        max_fallbacks: int = 5,
        strict: bool = False,
        xla: bool = False,
        learned: Learned | None = None,
    ) -> None:
        """``max_fallbacks``: fallbacks within a window after which co-execution gives up and
        stays in tracing; ``strict``: a fallback after warm-up raises; ``xla``: compile the pure
        graph segments with XLA; ``learned``: continue from an earlier Terra on the same code."""
        if mode not in MODES:
            raise TerraUsageError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
        if mode not in _AVAILABLE:
            raise TerraError(
                f"mode {mode!r} needs the co-execution engine, which this version of terra-nb "
                f"does not have yet; use mode='trace' or mode='eager'"
            )
        if not isinstance(max_fallbacks, int) or max_fallbacks < 0:
            raise TerraUsageError(f"max_fallbacks must be an int >= 0, got {max_fallbacks!r}")
        if learned is not None and not isinstance(learned, Learned):
            raise TerraUsageError("learned= takes the .learned of an earlier Terra")
        self.mode = mode
        self.max_fallbacks = max_fallbacks
        self.strict = strict
        self.xla = xla
        self._fallbacks: list[Fallback] = []
        self._state = "new"  # new -> open -> closed
        self._stats: list[IterationStats] = []
        self._spans: list[RunnerSpan] = []
        self._listeners: list[Callable[[IterationStats], None]] = []
        if learned is None:
            locations = LocationTable()
            learned = Learned(locations, GraphBuilder(loop_location=locations.loop_text))
        self.learned = learned
        self._locations = learned.locations
        self._builder = learned.builder
        self._recorder = TraceRecorder(self._locations)
        self._hooks = ExitStack()
        self._iteration: ExitStack | None = None
        self._t_start = 0.0

    # -- context ----------------------------------------------------------------------------

    def __enter__(self) -> Terra:
        if self._state != "new":
            raise TerraUsageError("this Terra was already used; create a new Terra for each loop")
        other = getattr(_open, "terra", None)
        if other is not None:
            raise TerraUsageError(
                "a Terra context is already open in this thread; Terra contexts cannot be nested"
            )
        if self.mode == "trace":
            self._hooks.enter_context(capture.installed())
        _open.terra = self
        self._state = "open"
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._iteration is not None:
            self._end("stopped")
        self._hooks.close()
        _open.terra = None
        self._state = "closed"

    # -- iterations -------------------------------------------------------------------------

    def loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Iterate over ``iterable``; each iteration of the ``for`` body is one Terra iteration."""
        self._check_open("loop()")
        try:
            iterator = iter(iterable)
        except TypeError:
            raise TerraUsageError(
                f"Terra.loop() needs an iterable (a list, a generator, a tf.data.Dataset ...), "
                f"got {type(iterable).__name__}"
            ) from None
        return self._iterate(iterator)

    def step(self) -> _Step:
        """Context manager for one iteration, for loops that are not a ``for`` over an iterable."""
        self._check_open("step()")
        return _Step(self)

    def _iterate(self, iterator: Iterator[Any]) -> Iterator[Any]:
        for item in iterator:  # the iterable's own ops run outside any iteration: they are feeds
            self._begin(sys._getframe(1))
            ended = "stopped"
            try:
                yield item
                ended = "completed"
            finally:
                self._end(ended)

    def _check_open(self, what: str) -> None:
        if self._state == "new":
            raise TerraUsageError(f"call {what} inside `with Terra(...) as terra:`")
        if self._state == "closed":
            raise TerraUsageError(f"{what} on a closed Terra; create a new Terra for a new loop")

    def _begin(self, root_frame) -> None:
        self._check_open("an iteration")
        if self._iteration is not None:
            raise TerraUsageError("a Terra iteration is already running; iterations cannot nest")
        self._iteration = ExitStack()
        if self.mode == "trace":
            self._recorder.begin(root_frame)
            self._iteration.enter_context(capture.capturing(self._recorder))
        self._t_start = time.perf_counter()

    def _end(self, ended: str) -> None:
        if self._iteration is None:
            return  # already ended by the context's exit
        t_end = time.perf_counter()
        self._iteration.close()
        self._iteration = None
        index = len(self._stats)
        counts: dict[str, Any] = {"ops": None, "feeds": None, "fetches": None, "covered": None}
        if self.mode == "trace":
            trace = self._recorder.finish(index)
            covered = self._builder.merge(trace)
            counts = {
                "ops": len(trace.ops),
                "feeds": trace.feeds,
                "fetches": trace.fetches,
                "covered": covered,
            }
        phase = "tracing" if self.mode == "trace" else "eager"
        self._spans.append(RunnerSpan("python", "exec", index, phase, self._t_start, t_end))
        self._stats.append(
            IterationStats(
                iteration=index,
                phase=phase,
                t_start=self._t_start,
                t_end=t_end,
                python_exec=t_end - self._t_start,
                python_stall=0.0,
                graph_exec=0.0,
                graph_stall=0.0,
                ended=ended,
                **counts,
            )
        )
        for listener in self._listeners:
            listener(self._stats[-1])

    def subscribe(self, listener: Callable[[IterationStats], None]) -> None:
        """Call ``listener(stats)`` in the loop's thread after every iteration (views use it).

        A listener must be quick: it runs on the loop's critical path.
        """
        self._listeners.append(listener)

    # -- results ----------------------------------------------------------------------------

    @property
    def graph(self) -> TraceGraph:
        """The TraceGraph of the iterations traced so far."""
        return self._builder.finish()

    def explain(self) -> tuple[Fallback, ...]:
        """Every fallback so far (none in ``trace`` and ``eager`` modes, which never fall back)."""
        return tuple(self._fallbacks)

    @property
    def spans(self) -> tuple[RunnerSpan, ...]:
        """The runners' exec/stall spans and feed/fetch moments, for the timeline."""
        return tuple(self._spans)

    @property
    def stats(self) -> tuple[IterationStats, ...]:
        """One record per iteration, in order."""
        return tuple(self._stats)
