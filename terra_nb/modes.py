"""What each mode does around one iteration: the eager baseline, tracing, and co-execution.

An engine opens an iteration (``begin`` returns the capture context for it) and closes it
(``end`` returns an ``IterationResult``). ``Terra`` (session.py) keeps the statistics and the
public surface; the engines keep the TraceGraph builder, the signature index and the runners.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

from . import capture
from .capture import functions
from .capture.location import LocationTable
from .capture.recorder import TraceRecorder
from .coexec.control_flow import ProgramError
from .coexec.program_plan import Program, build_program
from .coexec.program_runner import WholeProgram
from .coexec.python_runner import PythonRunner, SignatureIndex
from .learning import last_path, merge_trace, still_tracing, why_traced
from .timeline import RunnerSpan
from .trace.merge import GraphBuilder

NO_GRAPH_WORK = "no graph work: every op ran on real values in Python"
EAGER_SPAN = ("running eagerly for a while: the last co-executed iterations took paths never "
              "taken before, so nothing compiled was reused (co-execution is tried again later)")


@dataclass(slots=True)
class Learned:
    """What a Terra learned about a loop (locations, TraceGraph, call signatures), reusable by a
    later Terra running the same code: ``Terra(learned=earlier.learned)``. Runtime state."""

    locations: LocationTable = field(default_factory=LocationTable)
    builder: GraphBuilder = field(default_factory=GraphBuilder)
    index: SignatureIndex = field(default_factory=SignatureIndex)
    # variable key -> handle, seen in tracing; weak: a Learned kept across notebook cells must
    # not keep the variables of models the user has dropped
    handles: weakref.WeakValueDictionary = field(default_factory=weakref.WeakValueDictionary)
    # variable key -> its Keras or TensorFlow name (plain strings), for the views
    variable_names: dict = field(default_factory=dict)
    # region function op type -> RegionCall (plain data): how the graph names a region's node
    region_calls: dict = field(default_factory=dict)
    # the regions formed (``regions.Regions``), carried over to a later Terra on the same code
    regions: Any = None

    def __post_init__(self) -> None:
        self.builder.loop_location = self.locations.loop_text


@dataclass(slots=True)
class IterationResult:
    phase: str  # eager | tracing | coexec | fallback
    ops: int | None = None
    feeds: int | None = None
    fetches: int | None = None
    covered: bool | None = None
    stalls: list[RunnerSpan] = field(default_factory=list)
    fallback: tuple[str, str, str] | None = None  # (reason, op type, location + source line)
    path: tuple[int, ...] = ()  # TraceGraph nodes this iteration went through, in order
    not_ready: tuple[str, str, str] | None = None  # covered, yet still tracing: why (as fallback)
    why: str = ""  # why its phase is not co-execution, in a few words ("" when it is)


class EagerEngine:
    """The baseline: nothing is captured."""

    def __init__(self, learned: Learned) -> None:
        self.learned = learned

    def critical(self):
        """A block a Ctrl-C must not cut in half (it is raised at its end)."""
        return contextlib.nullcontext()

    def begin(self, root_frame, iteration: int):
        return contextlib.nullcontext()

    def keep_tracing(self) -> bool:
        """Run the next iteration for real (regions are forming from its calls); whether it would
        have co-executed otherwise."""
        return False

    def expect_end(self, iteration: int | None) -> None:
        """The loop ends before ``iteration`` (its iterable's length); None: not known."""

    def end(self) -> IterationResult:
        return IterationResult("eager", why="mode eager: nothing is captured")

    def drain(self) -> None:
        """At the end of a loop: wait for the graph and raise a failure Python was not told of."""

    def close(self) -> None:
        pass


class TraceEngine(EagerEngine):
    """Runs eagerly, records every op and merges each iteration's trace into the TraceGraph."""

    def __init__(self, learned: Learned) -> None:
        self.learned = learned
        self.recorder = TraceRecorder(learned.locations, learned.handles, learned.variable_names)
        self._iteration = 0

    def begin(self, root_frame, iteration: int):
        self._iteration = iteration
        self.recorder.begin(root_frame)
        return capture.capturing(self.recorder)

    def end(self) -> IterationResult:
        """The iteration's trace merged; ``mode="trace"`` traces every iteration."""
        trace = self.recorder.finish(self._iteration)
        covered, _ = merge_trace(self.learned, trace, self.recorder.signatures)
        return IterationResult("tracing", len(trace.ops), trace.feeds, trace.fetches, covered,
                               path=last_path(self.learned), why="mode trace: every iteration")


class CoexecEngine:
    """Traces until every call of an iteration is known, then co-executes; falls back on divergence.

    After ``max_fallbacks`` fallbacks within ``window`` iterations it warns and stays in tracing.
    When ``one_off_window`` co-executed iterations in a row ran (almost) only segments never seen
    before, the loop's path does not repeat (a trip count new every time): nothing compiled is
    reused, so it warns and runs the next ``eager_span`` iterations eagerly, which is faster; then
    it tries co-execution again (paths may repeat by then: shuffled buckets), waiting twice as long
    each time it goes eager again. A try again is judged on ``retry_window`` iterations: the loop
    has shown once that its paths do not repeat, and such an iteration costs about twice an eager
    one (scan-unique: 2.05x, its segments new and run op by op).
    """

    window = 20
    one_off_window = 10
    retry_window = 3
    eager_span = 50

    def __init__(self, learned: Learned, *, lazy: bool, xla: bool, max_fallbacks: int,
                 compile_after: int = 2, program: str = "segments",
                 split_cores: bool = True) -> None:
        self.learned = learned
        self.whole = program == "whole"
        self.program: Program | None = None  # the whole program of the current TraceGraph
        self.whole_program: WholeProgram | None = None  # its executor
        self.program_error: str | None = None
        self.max_fallbacks = max_fallbacks
        self.ready = bool(learned.index.entries) and learned.builder.traces > 0
        self.gave_up = False
        self.eager = False
        self._eager_until = 0  # the first iteration to co-execute again
        self._aside = False  # hooks and barrier removed for a stretch of eager iterations
        self._eager_span = self.eager_span
        self._fallback_iterations: list[int] = []
        self._one_off: list[bool] = []  # per co-executed iteration: were its segments all new?
        self._ops_seen = (0, 0)
        self._iteration = 0
        self._traced = 0  # iterations traced (not fallbacks) by this engine
        self._hold = contextlib.ExitStack()
        self.runner = PythonRunner(learned.locations, learned.index, lazy=lazy, xla=xla,
                                   compile_after=compile_after, handles=learned.handles,
                                   names=learned.variable_names, split_cores=split_cores)
        try:  # the GraphRunner's helper thread starts in it: a Ctrl-C (or error) must stop it
            self._take_over()
        except BaseException:
            self._hold.close()
            self.runner.graph.close()
            raise

    def _take_over(self) -> None:
        """Start the GraphRunner and install what the loop needs (hooks, SIGINT handler, barrier),
        each undone by ``close``. A Ctrl-C meanwhile is raised once all of it is in place."""
        interrupts = self.runner.interrupts
        self._hold.callback(interrupts.uninstall)  # uninstalls only what was installed
        interrupts.install()
        interrupts.enter()
        try:
            self.runner.graph.start()
            capture.hold_placeholders()
            self._hold.callback(capture.release_placeholders)
            capture.set_barrier(self.runner.sync)
            self._hold.callback(capture.set_barrier, None)
        finally:
            interrupts.leave()  # raises a Ctrl-C that came meanwhile

    def _step_aside(self) -> None:
        """For a stretch of eager iterations: once the graph has run all it was given and no
        placeholder is alive, eager ops need neither the barrier nor the hooks, so they run at
        eager's own speed, not 10% slower. While placeholders live (a list of losses), the
        hooks stay: handing them over mid-loop would split objects Python holds twice (a list
        entry and a local name, ``is`` and ``.ref()`` keys) and untie them from a tape."""
        if self._aside:
            return
        self.runner.sync()
        with self.critical():  # a Ctrl-C never leaves the hooks half given up
            if not self.runner.kept.alive():
                capture.set_barrier(None)
                capture.release_placeholders()
                self._aside = True

    def _step_back(self) -> None:
        """Co-execution again (or the loop closes): the hooks and the barrier are back."""
        if self._aside:
            with self.critical():
                capture.hold_placeholders()
                capture.set_barrier(self.runner.sync)
                self._aside = False

    def expect_end(self, iteration: int | None) -> None:
        """The compile policy rents ahead for the iterations left (``compile_policy.py``)."""
        self.runner.graph.policy.horizon = iteration

    def keep_tracing(self) -> bool:
        """Trace the next iteration (regions are forming from its calls, which must run for
        real); ``end`` decides again from it whether the loop is ready. Whether it would have
        co-executed otherwise."""
        was, self.ready = self._coexecutes and not self.eager, False
        return was

    @property
    def _coexecutes(self) -> bool:
        """Whether an iteration begun now co-executes (unless the loop runs eagerly for now)."""
        return self.ready and not self.gave_up

    def begin(self, root_frame, iteration: int):
        self._iteration = self.runner.graph.failures.iteration = iteration  # (a late failure's)
        if self.eager and iteration >= self._eager_until:
            self.eager = False  # try co-execution again
            self._one_off.clear()
            self._step_back()
        if self.eager:
            self._step_aside()
            return contextlib.nullcontext()
        coexec = self._coexecutes
        if not coexec:  # its ops run eagerly: the graph first finishes what it was given
            self.runner.sync()
        program = self._program() if coexec and self.whole else None
        plan = None if program is None else lambda: self._whole_program().begin(program, iteration)
        self.runner.begin(root_frame, iteration, coexec=coexec, plan=plan)
        return capture.capturing(self.runner)

    def _whole_program(self) -> WholeProgram:
        """The executor of the whole program (made on first use)."""
        if self.whole_program is None:
            runner = self.runner
            self.whole_program = WholeProgram(runner.graph, runner.handles,
                                              self.learned.index.fetched_nodes,
                                              self.learned.locations, runner.kept)
        return self.whole_program

    def _program(self) -> Program | None:
        """The whole program of the current TraceGraph (generated again when it grew, or to hold
        the constants learned); None, with a warning once, when the TraceGraph cannot be one
        program (segments then)."""
        graph = self.learned.builder.finish()
        whole = self.whole_program
        old = self.program
        if old is not None and old.graph is graph:
            constants = whole.learner.constants(old) if whole is not None else None
            if constants is None:
                return old
        else:  # the graph grew: keep holding what the old program held and still holds
            constants = whole.learner.kept_constants(old) if whole is not None and old else None
        if self.program_error is not None:
            return None
        self.runner.sync()  # the old program's runs finish first
        try:
            self.program = build_program(graph, self.learned.handles, constants)
        except (ProgramError, ValueError, TypeError) as error:  # (an op TensorFlow cannot build)
            if old is not None and old.graph is graph:  # only the constants failed: keep it
                whole.learner.max_rebuilds = whole.learner.rebuilds
                return old
            self.program, self.program_error = None, str(error)
            warnings.warn(f"terra-nb: co-executing in segments, not one program: {error}",
                          RuntimeWarning, stacklevel=5)
            return None
        return self.program

    @contextlib.contextmanager
    def critical(self):
        self.runner.interrupts.enter()
        try:
            yield
        finally:
            self.runner.interrupts.leave()

    def end(self) -> IterationResult:
        if self.eager:
            return IterationResult("eager", why=EAGER_SPAN)
        runner = self.runner
        trace = runner.end()
        stalls = runner.take_stall_spans()
        if trace is None:
            self._count_one_off()
            if not runner.path and self.program is None:  # no op for the graph: eager
                return IterationResult("eager", runner.ops, runner.feeds, runner.fetches, True,
                                       stalls, why=NO_GRAPH_WORK)
            return IterationResult("coexec", runner.ops, runner.feeds, runner.fetches, True, stalls,
                                   path=tuple(runner.path))
        covered, unknown = merge_trace(self.learned, trace, runner.log.signatures)
        fell_back = runner.divergence is not None
        self.ready = unknown is None or fell_back and self.ready
        result = IterationResult("fallback" if fell_back else "tracing", len(trace.ops),
                                 trace.feeds, trace.fetches, covered, stalls, runner.divergence,
                                 last_path(self.learned))
        self._traced += not fell_back
        # covered, or the third traced iteration (the first two make every loop's calls known):
        # say why it still traces (a call whose attributes change every iteration, a dataset
        # made anew each epoch with new functions), or explain() would say "no fallbacks"
        if (covered or self._traced > 2) and unknown is not None and not self.ready \
                and not fell_back and not self.gave_up:
            result.not_ready = still_tracing(self.learned, unknown, covered)
        if not fell_back:
            result.why = (f"gave up: {self.max_fallbacks} fallbacks within {self.window} "
                          f"iterations; tracing for the rest of the loop" if self.gave_up else
                          why_traced(self.learned, unknown, covered,
                                     self.learned.builder.traces == 1))
        # a region's new function is new once by construction: no sign of a loop that does
        # not settle, so it does not count towards giving up
        if fell_back and not functions.confirmed(runner.divergence[1]):
            self._count_fallback()
        return result

    def _count_one_off(self) -> None:
        graph = self.runner.graph
        submitted, new = graph.ops_submitted - self._ops_seen[0], graph.ops_new - self._ops_seen[1]
        self._ops_seen = (graph.ops_submitted, graph.ops_new)
        self._one_off.append(submitted > 0 and new >= 0.9 * submitted)
        tried = self._eager_span > self.eager_span  # it went eager before
        window = self.retry_window if tried else self.one_off_window
        recent = self._one_off[-window:]
        if len(recent) == window and all(recent):
            self.eager = True
            self._eager_until = self._iteration + 1 + self._eager_span
            if self._eager_span == self.eager_span:  # the first time
                warnings.warn(
                    f"terra-nb: the last {self.one_off_window} co-executed iterations took paths "
                    f"never taken before (a loop whose trip count is new every time?), so nothing "
                    f"compiled is reused; running the next {self._eager_span} iterations eagerly "
                    f"(then trying again).",
                    RuntimeWarning,
                    stacklevel=5,
                )
            self._eager_span *= 2

    def _count_fallback(self) -> None:
        self._fallback_iterations.append(self._iteration)
        recent = [i for i in self._fallback_iterations if i > self._iteration - self.window]
        if len(recent) >= self.max_fallbacks and self.whole and self.program_error is None:
            # the paths do not settle into the program: segments cope with more (new shapes,
            # paths taken once), so try them before giving up on co-execution
            self.program, self.program_error = None, f"{len(recent)} fallbacks"
            self._fallback_iterations.clear()
            warnings.warn(
                f"terra-nb: {len(recent)} fallbacks in the last {self.window} iterations in the "
                f"whole program; co-executing in segments from now on; `terra.explain()` says "
                f"why.",
                RuntimeWarning,
                stacklevel=5,
            )
        elif len(recent) >= self.max_fallbacks and not self.gave_up:
            self.gave_up = True
            warnings.warn(
                f"terra-nb: {len(recent)} fallbacks in the last {self.window} iterations; "
                f"staying in tracing for the rest of this loop; `terra.explain()` says why.",
                RuntimeWarning,
                stacklevel=5,
            )

    def drain(self) -> None:
        self.runner.drain()

    def close(self) -> None:
        # A Ctrl-C during the clean-up is raised once it is done: one landing inside the
        # ExitStack between popping a callback and calling it would skip that callback (the
        # SIGINT handler or the capture hooks would stay installed for good).
        with self.critical(), self._hold:
            self._step_back()  # what _hold undoes is in place again
            self.runner.close()

    @property
    def graph_spans(self) -> list[RunnerSpan]:
        return self.runner.graph.spans
