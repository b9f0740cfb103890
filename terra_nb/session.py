"""``Terra``: the public entry point and the phase machine around the user's loop.

    with terra_nb.Terra(mode="coexec") as terra:
        for x, y in terra.loop(batches):
            ...                      # any Python
    terra.graph                      # the TraceGraph
    terra.stats                      # one IterationStats per iteration
    terra.explain()                  # every fallback, with its reason and source line

Keras's ``fit``, ``evaluate`` and ``predict`` make iterations too, one per step Keras runs eagerly
(``keras_steps.py``); what a Terra leaves alone it says in one line (``notes``).

Modes: ``coexec`` traces until an iteration is covered, then co-executes (the PythonRunner runs
ahead answering ops with placeholders; the GraphRunner issues the confirmed ops as compiled
segments into TensorFlow's asynchronous executor, which runs them while Python goes on);
``lazy``: the graph runs only when Python waits for it; ``trace`` runs eagerly and builds the
TraceGraph; ``eager`` runs the loop untouched with the same statistics.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from . import heap, modes
from .capture.replica_threads import in_replica_thread
from .errors import TerraError, TerraUsageError
from .iterations import IterationStats, traced_runs, why_of
from .keras_steps import KerasSteps
from .loop_length import loop_length
from .modes import CoexecEngine, EagerEngine, IterationResult, Learned, TraceEngine
from .options import MODES, check_options, warn_xla_once
from .regions import Explained, Interception, RegionSummary
from .runner_results import RunnerResults
from .timeline import RunnerSpan, SpanFeed, SpanLog, exec_spans
from .trace.tracegraph import TraceGraph
from .user_graph import user_graph

_open = threading.local()  # the Terra whose context is open in this thread


@dataclass(frozen=True, slots=True)
class Fallback:
    """One iteration that left co-execution: why, at which op, at which user source line;
    ``label``: the iteration's (a Keras step's ``fit 1 epoch 2 step 5``), if any."""

    iteration: int
    reason: str
    op_type: str
    location: str
    label: str = ""

    def __str__(self) -> str:
        which = f"iteration {self.iteration}" + (f" ({self.label})" if self.label else "")
        if not self.location:  # not at an op: ``op_type`` says where ("(end of iteration)")
            return f"{which}: {self.reason} {self.op_type}"
        return f"{which}: {self.reason} at {self.op_type} ({self.location})"


def print_note(text: str) -> None:
    """How a Terra says what it did not co-execute, by default: one line on stderr."""
    print(f"terra-nb: {text}", file=sys.stderr)


class _Step:
    def __init__(self, terra: Terra, label: str) -> None:
        self._terra, self._label = terra, label

    def __enter__(self) -> Terra:
        self._terra._begin(sys._getframe(1), self._label)
        return self._terra

    def __exit__(self, exc_type, exc, tb) -> None:
        self._terra._end("completed" if exc_type is None else "stopped")


class Terra(RunnerResults):
    """Runs a training loop under terra-nb; see the module docstring."""

    def __init__(self, mode: str = "coexec", *, max_fallbacks: int = 5, strict: bool = False,
                 xla: bool = False, compile_after: int = 2, program: str = "segments",
                 learned: Learned | None = None, keep_spans: int = 200,
                 regions: bool | str | None = None, split_cores: bool = True) -> None:
        """``max_fallbacks``: fallbacks within 20 iterations after which co-execution gives up
        and stays in tracing; ``strict``: a fallback after warm-up raises; ``xla``: compile the
        graph segments with XLA; ``compile_after``: a graph segment is compiled the n-th time
        it runs at the earliest, and once its runs op by op have cost what its compile would
        (``coexec/compile_policy.py``); until then its ops run eagerly (1: compile at once);
        ``program``: ``"segments"`` runs the confirmed ops in compiled straight-line segments,
        ``"whole"`` runs each co-executed iteration as one generated program with
        ``switch_case``/``while_loop`` (coexec mode only; see ``Terra.program``); ``learned``:
        continue from an earlier Terra on the same code; ``keep_spans``: the runner spans of
        this many last iterations are kept for the timeline (older ones only counted); ``regions``:
        answer outermost Keras calls (models, layers, losses, ``apply_gradients``) with compiled
        regions (DESIGN section 5b; ``terra.regions`` lists them); the default, None, is on in
        the coexec and lazy modes, except with ``program="whole"``, which cannot run them yet;
        regions include ``GradientTape.gradient`` as one function once that pays
        (``regions/tapes.py``), except with ``"calls"``: the Keras calls only; ``split_cores``:
        in coexec mode, keep the loop's thread and TensorFlow's executor thread on cores of their
        own (Linux; ``coexec/cores.py``), so the graph runs while Python goes on."""
        check_options(mode, max_fallbacks, compile_after, program, keep_spans, learned, regions)
        if xla:
            warn_xla_once()
        self.use_regions = (mode in ("coexec", "lazy") and program != "whole"
                            if regions is None else regions)
        self._interception: Interception | None = None
        self.mode, self.max_fallbacks, self.strict = mode, max_fallbacks, strict
        self.xla, self.compile_after, self.program_kind = xla, compile_after, program
        self.split_cores = bool(split_cores)
        self.learned = learned if learned is not None else Learned()
        self._state, self._engine = "new", None  # state: new -> open -> closed
        self._stats: list[IterationStats] = []
        self._spans, self._graph_feed, self._span_lock = SpanLog(keep_spans), SpanFeed(), \
            threading.Lock()
        self._fallbacks: list[Fallback] = []
        self._listeners: list[Callable[[IterationStats], None]] = []
        self._iteration: ExitStack | None = None
        self._t_start, self._label = 0.0, ""  # the open iteration's
        self.last_path: tuple[int, ...] = ()  # TraceGraph nodes of the last iteration
        self._named_graph: tuple | None = None  # (builder's graph, counts, user graph)
        self._notes: list[str] = []
        self.on_note: Callable[[str], None] = print_note  # a notebook shows notes its own way
        self._keras = KerasSteps(self)

    # -- context ----------------------------------------------------------------------------

    def __enter__(self) -> Terra:
        if self._state != "new":
            raise TerraUsageError("this Terra was already used; create a new Terra for each loop")
        if getattr(_open, "terra", None) is not None:
            raise TerraUsageError(
                "a Terra context is already open in this thread; Terra contexts cannot be nested"
            )
        if in_replica_thread():  # one Terra per replica, interleaved at every merge_call
            raise TerraUsageError(
                "a Terra cannot be opened inside strategy.run's function (a replica's thread); "
                "open it around the loop that calls strategy.run: the replicas' ops then run "
                "in that Terra's iterations")
        self._engine = self._make_engine()
        if self.use_regions:
            tapes = self.use_regions != "calls"
            self._interception = Interception(self.learned.regions, tapes=tapes)
            self.learned.regions = self._interception.regions
            try:
                with self._engine.critical():  # a Ctrl-C never leaves Keras half-wrapped
                    self._interception.open()
            except BaseException:
                self._engine.close()
                raise
        try:
            with self._engine.critical():  # a Ctrl-C here is raised once the Terra is whole ...
                heap.freeze()  # no full garbage collection walks TensorFlow's objects in the loop
                _open.terra = self
                self._state = "open"
                self._keras.open()  # Keras's step functions: one iteration per step
        except BaseException:
            self.__exit__(None, None, None)  # ... and closes it: no runner, hook or handler left
            raise
        return self

    def _make_engine(self):
        if self.mode == "eager":
            return EagerEngine(self.learned)
        if self.mode == "trace":
            return TraceEngine(self.learned)
        return CoexecEngine(self.learned, lazy=self.mode == "lazy", xla=self.xla,
                            max_fallbacks=self.max_fallbacks, compile_after=self.compile_after,
                            program=self.program_kind, split_cores=self.split_cores)

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self._iteration is not None:
                self._end("stopped")
        finally:
            _open.terra = None
            self._state = "closed"
            heap.thaw()
            self._keras.close()
            if exc_type is None and not self._stats and not self._notes:
                self.note("nothing to co-execute: no loop (terra.loop, terra.step, a %%terra "
                          "cell's) and no Keras step run eagerly (fit, evaluate, predict); it "
                          "ran plainly")
            try:
                if self._interception is not None:
                    with self._engine.critical():  # a Ctrl-C is raised once Keras is restored
                        self._interception.close()
            finally:
                try:
                    self._engine.close()  # runs every confirmed op, stops the GraphRunner
                except Exception:
                    if exc_type is None:  # never hide the user's own exception
                        raise

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
        return self._iterate(iterator, loop_length(iterable))

    def step(self, label: str = "") -> _Step:
        """Context manager for one iteration, for loops that are not a ``for`` over an iterable;
        ``label`` names it in ``stats`` and ``explain()``."""
        self._check_open("step()")
        if not isinstance(label, str):
            raise TerraUsageError(f"terra.step(label=...) takes a str, got "
                                  f"{type(label).__name__}")
        return _Step(self, label)

    def _iterate(self, iterator: Iterator[Any], length: int | None) -> Iterator[Any]:
        self._expect_end(None if length is None else len(self._stats) + length)
        try:
            for item in iterator:  # the iterable's own ops run outside any iteration: feeds
                self._begin(sys._getframe(1), "")
                ended = "stopped"
                try:
                    yield item
                    ended = "completed"
                finally:
                    self._end(ended)
            self._engine.drain()  # an op that failed in the graph raises here, inside the loop
        finally:
            self._expect_end(None)

    def _expect_end(self, iteration: int | None) -> None:
        """The loop ends before ``iteration`` (None: not known): compiles and tape regions are
        rented against it (``coexec/rental.py``)."""
        self._engine.expect_end(iteration)
        if self._interception is not None:
            self._interception.expect_end(iteration)

    def _check_open(self, what: str) -> None:
        if self._state == "new":
            raise TerraUsageError(f"call {what} inside `with Terra(...) as terra:`")
        if self._state == "closed":
            raise TerraUsageError(f"{what} on a closed Terra; create a new Terra for a new loop")

    @property
    def in_iteration(self) -> bool:
        """Whether an iteration is running (``terra.loop``'s body, ``terra.step()``)."""
        return self._iteration is not None

    def _begin(self, root_frame, label: str) -> None:
        self._check_open("an iteration")
        if self._iteration is not None:
            raise TerraUsageError("a Terra iteration is already running; iterations cannot nest")
        self._label = label
        iteration = ExitStack()
        settling = self._interception is not None and self._interception.settling()
        self._forming = settling and self._engine.keep_tracing()  # traced while regions form
        # a Ctrl-C is raised once the iteration is held (__exit__ ends it): one that cut the
        # hooks' install short, after its count went up, left them installed (1 of 200 runs)
        with self._engine.critical():
            iteration.enter_context(self._engine.begin(root_frame, len(self._stats)))
            if self._interception is not None:  # inside the engine's capture: regions tee in
                iteration.enter_context(self._interception.iteration(len(self._stats)))
            self._iteration = iteration  # only once it began: an error raised there ends nothing
            self._t_start = time.perf_counter()
            with self._span_lock:  # a new column of the timeline
                self._spans.begin(len(self._stats), self._t_start)

    def _end(self, ended: str) -> None:
        if self._iteration is None:
            return  # already ended by the context's exit
        with self._engine.critical():  # a Ctrl-C now is raised once the iteration is recorded
            try:
                self._iteration.close()
                result = self._engine.end()
            finally:
                self._iteration = None
            self._record(result, time.perf_counter(), ended)
        if self.strict and result.fallback is not None:
            reason, op_type, where = result.fallback
            raise TerraError(
                f"strict mode: iteration {len(self._stats) - 1} fell back to tracing ({reason} "
                f"at {op_type}, {where}); run without strict mode to let terra-nb adapt"
            )

    def _record(self, result: IterationResult, t_end: float, ended: str) -> None:
        index = len(self._stats)
        if result.why == modes.NO_GRAPH_WORK and self._interception and self._interception.hit:
            result.phase, result.why = "coexec", ""  # a region's compiled function answered
        marks = self._interception.take_marks(index, result.phase) if self._interception else []
        python = exec_spans(index, result.phase, self._t_start, t_end, result.stalls + marks)
        stall = sum(s.duration for s in python if s.kind == "stall")
        self._take_graph_spans(python)
        if result.fallback is not None:
            self._fallbacks.append(Fallback(index, *result.fallback, self._label))
        elif result.not_ready is not None:
            self._fallbacks.append(Fallback(index, *result.not_ready, self._label))
        self.last_path = result.path
        stats = IterationStats(
            iteration=index, phase=result.phase, t_start=self._t_start, t_end=t_end,
            python_exec=t_end - self._t_start - stall, python_stall=stall, graph_exec=0.0,
            graph_stall=0.0, ops=result.ops, feeds=result.feeds, fetches=result.fetches,
            covered=result.covered, ended=ended,
            regions_forming=self._forming and result.phase != "coexec", label=self._label,
            why=why_of(result, self._interception.forming if self._forming else None),
        )
        self._stats.append(stats)
        if self._listeners:
            self._tell_listeners(stats)

    def _tell_listeners(self, stats: IterationStats) -> None:
        """Call the listeners; their time is a span of its own (the views' redraws)."""
        start = time.perf_counter()
        for listener in self._listeners:
            listener(stats)
        with self._span_lock:
            self._spans.add([RunnerSpan("python", "views", stats.iteration, stats.phase, start,
                                        time.perf_counter(), "listeners (progress, views)")])

    def subscribe(self, listener: Callable[[IterationStats], None]) -> None:
        """Call ``listener(stats)`` in the loop's thread after every iteration (views use it).

        A listener must be quick: it runs on the loop's critical path.
        """
        self._listeners.append(listener)

    # -- results ----------------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Say one thing this Terra left alone or could not co-execute (``notes``), through
        ``on_note`` (a line on stderr; a notebook prints it under the cell)."""
        self._notes.append(text)
        self.on_note(text)

    @property
    def notes(self) -> tuple[str, ...]:
        """What this Terra said it left alone (a compiled ``fit``, a block with no loop)."""
        return tuple(self._notes)

    def explain(self) -> Explained:
        """Every fallback so far, and every covered iteration that still traced: iteration,
        reason, op and user source line (a tuple); its ``traced`` lists every other iteration
        that did not co-execute, in runs of one reason; its ``regions`` (and ``str()``) list
        the regions formed, their hits, guard misses and refusals."""
        said = frozenset(f.iteration for f in self._fallbacks)
        return Explained(self._fallbacks, self.regions, traced_runs(self._stats, said))

    @property
    def regions(self) -> RegionSummary:
        """What the regions did (``Terra(regions=True)``): one row per guarded call."""
        if self._interception is None:
            return RegionSummary(enabled=bool(self.use_regions))
        return self._interception.regions.summary()

    @property
    def graph(self) -> TraceGraph:
        """The TraceGraph of the iterations traced so far, as the user's program has it
        (``user_graph``): its region calls, branch sites and variable names (the same object
        while nothing changed)."""
        g = self.learned.builder.finish()
        calls = self.learned.region_calls
        if self._interception is not None:
            calls.update(self._interception.regions.region_calls())
        known = (len(calls), len(self.learned.variable_names))
        cached = self._named_graph
        if cached is None or cached[0] is not g or cached[1] != known:
            self._named_graph = cached = (g, known, user_graph(g, self.learned, calls))
        return cached[2]


__all__ = ["MODES", "Fallback", "IterationStats", "Learned", "Terra"]
