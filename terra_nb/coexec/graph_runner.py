"""The GraphRunner: the one thread that runs the graph side of co-execution, in order.

It runs, in the order Python issued them, a ``WorkItem`` per segment flush (the segment plan:
a ``Segment``, its arguments, the placeholders its values go to) and a ``ProgramRun`` per
iteration of the whole program (program_runner.py feeds it through its channels). The queue is
bounded: Python runs ahead of the graph by a bounded amount of work (back-pressure). A segment is
compiled and cached at the earliest at its ``compile_after``-th run, once its interpreted runs have
cost what its compile would (``compile_policy.py``); until then its ops run eagerly, one by one. A
failure is kept and raised in Python at its next synchronisation point (a fetch, a flush that
waits, the end of the loop); then the values made before the failing op are readable
(salvage.py).
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections import OrderedDict
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context, record

from .. import capture
from ..errors import TerraError
from ..timeline import RunnerSpan
from .compile_policy import CompilePolicy, Young
from .function_call import FunctionCall, eager_equal_config, xla_refused
from .lower import (
    Segment,
    compile_segment,
    interpretable,
    make_segment,
    real_argument,
    run_segment,
)
from .salvage import values_before_failure
from .segment_names import SegmentNames


class WorkItem:
    """One flush: run the segment ``key`` (built from ``entries`` on first use) on ``args``; put
    its returned values into the placeholders ``returns``."""

    __slots__ = (
        "key", "entries", "args", "returns", "iteration", "phase", "done", "error", "generation",
        "young", "label",
    )

    def __init__(self, key: tuple, entries: list, args: list, returns: list, iteration: int,
                 phase: str) -> None:
        self.key = key
        self.entries = entries
        self.args = args
        self.returns = returns
        self.iteration = iteration
        self.phase = phase
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.generation = 0
        self.young: Young | None = None  # run interpreted: the segment is not compiled yet
        self.label = ""  # the segment's name in the timeline (segment_names.py)

    def release(self) -> None:
        """Drop what running it needed: a placeholder Python keeps holds its value and this
        item (for its error), not the segment's arguments and sibling outputs."""
        self.entries = self.args = self.returns = ()
        self.key = self.young = None


class ProgramRun:
    """One iteration's run of a whole program; ``runs`` learns how it ended."""

    __slots__ = ("program", "channels", "iteration", "runs")

    def __init__(self, program, channels, iteration: int, runs: ProgramRuns) -> None:
        self.program = program
        self.channels = channels
        self.iteration = iteration
        self.runs = runs

    phase = "coexec"

    def execute(self) -> None:
        """Run it (blocks until it commits, or ends when Python closes its channels)."""
        runs = self.runs
        try:
            if self.channels.closed:  # a failed or abandoned run's: what is left is not ours
                return
            with capture.bypass():
                self.program.run(self.channels)
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
            runs.abandoned += 1  # dropped by Python (a divergence): nothing was committed
        except BaseException as error:  # a failing op: Python raises it at its next wait
            with runs.cond:
                runs.error, runs.error_iteration = error, self.iteration
            self.channels.close()
        finally:
            with runs.cond:
                runs.done += 1
                runs.cond.notify_all()


class ProgramRuns:
    """How the whole program's runs ended: counted in order, with the first failure."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.error_iteration = -1  # the iteration whose run failed
        self.done = 0  # runs finished (committed, abandoned or failed), in order
        self.abandoned = 0  # runs dropped on a divergence
        self.cond = threading.Condition()

    def wait(self, count: int) -> None:
        """Block until ``count`` runs have finished."""
        with self.cond:
            self.cond.wait_for(lambda: self.done >= count)


class GraphRunner:
    """Executes work items and program runs in submission order on a background thread."""

    max_compiled = 256  # compiled segments kept

    def __init__(self, handles: dict[int, Any], *, xla: bool = False, max_ahead: int = 8,
                 compile_after: int = 2, describe=lambda node: "") -> None:
        """``describe(node)`` names a TraceGraph node's source line for error messages."""
        self.handles = handles
        self.describe = describe
        self.xla = xla
        self.compile_after = compile_after
        self.interpreted = 0  # segments run eagerly, op by op, instead of compiled
        self.ops_submitted = 0
        self.ops_new = 0  # ops in segments submitted for the first time
        self._sightings: dict[tuple, int] = {}
        self._names = SegmentNames()  # segment key -> its name in the timeline
        self._idle_since = time.perf_counter()  # when the graph side last finished a run
        self.policy = CompilePolicy()
        self.spans: list[RunnerSpan] = []
        self.error: BaseException | None = None  # the last failure
        self.generation = 0  # bumped when Python is told of a failure
        self._failed_generation = -1
        self._salvaged: list[tuple] = []  # (placeholder, value): readable once it is told
        # Compiled functions (or segments TensorFlow cannot compile), least recently used first:
        # a loop whose paths never repeat would otherwise keep every one of them.
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._segments: dict[tuple, Segment] = {}
        self._queue: queue.Queue = queue.Queue(maxsize=max_ahead)
        self._thread = threading.Thread(target=self._run, name="terra-graph-runner", daemon=True)

    def start(self) -> None:
        """Start the thread (where a Ctrl-C is held back: one landing inside ``Thread.start``
        would leave a thread nobody stops)."""
        self._thread.start()

    def submit(self, item: WorkItem) -> None:
        """Queue ``item`` (blocks while the queue is full), or run it here if it is not worth
        compiling yet."""
        if not self._thread.is_alive():
            raise TerraError("the GraphRunner has stopped; this Terra loop cannot continue")
        item.generation = self.generation
        sightings = self._sighted(item.key)
        item.label = self._names.name(item.key, item.entries)
        self.ops_submitted += len(item.entries)
        if sightings == 1:
            self.ops_new += len(item.entries)
        segment = self._to_interpret(item, sightings)
        if segment is None or (item.young is not None and item.young.graph_bound):
            self._queue.put(item)  # compiled, or interpreted there while Python goes on
            return
        self.python_waits()
        waited, compiled = time.perf_counter(), self.policy.compile_seconds
        self._queue.join()  # everything issued before it runs first
        with capture.bypass(), record.stop_recording():  # not Python's ops: nothing to record
            self._process(item, segment, waited, self.policy.compile_seconds - compiled)

    def run_program(self, run: ProgramRun) -> None:
        """Queue a whole program's run for an iteration (runs after the work queued before)."""
        if not self._thread.is_alive():
            raise TerraError("the GraphRunner has stopped; this Terra loop cannot continue")
        self._queue.put(run)

    def _to_interpret(self, item: WorkItem, sightings: int) -> Segment | None:
        """The segment to run op by op: one not worth compiling yet (``item.young``, see
        compile_policy.py), or one TensorFlow could not compile; None: queue it for the
        compiled function."""
        cached = self._cache.get(item.key)
        if isinstance(cached, Segment):
            return cached
        if cached is not None:
            return None
        young = self.policy.young(item.key, lambda: make_segment(item.key, item.entries))
        young.sighted(item.iteration)
        # XLA: no estimate of its compile, so compiled as asked (``compile_after``); never one
        # whose ops keep kernel state (a random op's stream): compiled, it would start again
        due = (self.compile_after <= 1 or sightings >= self.compile_after and (
            self.xla or self.policy.worth_compiling(item.key))) and not young.kernel_state
        if due or not interpretable(young.segment):
            self.policy.compiled(item.key)
            return None
        item.young = young
        return young.segment

    def _sighted(self, key: tuple) -> int:
        """How many times ``key`` has been submitted, this one included."""
        if len(self._sightings) > 4096:  # many one-off paths: forgetting only delays a compile
            self._sightings.clear()
            self._names.clear()
        count = self._sightings[key] = self._sightings.get(key, 0) + 1
        return count

    def wait_idle(self, deliver: bool = True) -> None:
        """Block until every submitted item has run; raise a failure Python was not told of
        (unless not ``deliver``: it is raised at the next wait that delivers)."""
        self.python_waits()
        self._queue.join()
        if deliver and self.error is not None and self._failed_generation == self.generation:
            self.deliver(self.error)

    def python_waits(self) -> None:
        """Python needs the graph now (it reads a value or waits): the compile policy learns
        what Python did since the last segment it ran itself (see ``CompilePolicy.python_waits``).
        """
        self.policy.python_waits()

    def deliver(self, error: BaseException) -> None:
        """Raise ``error`` in Python. A failed op stops the work Python issued after it (as an
        eager error would have); work issued once Python has seen the error runs again."""
        if self._failed_generation == self.generation:
            self.generation += 1
            for placeholder, value in self._salvaged:
                placeholder.resolve(value)
            self._salvaged = []
        if not getattr(error, "_terra_noted", False):
            error._terra_noted = True
            # the op's name is the one channel: an error a function call raises has no op,
            # node_def or payload (TF 2.21), only text that names the failing graph node
            nodes = [int(n) for n in re.findall(r"terra_node_(\d+)", str(error))]
            where = f" by the op at {self.describe(nodes[0])}" if nodes else ""
            error.add_note(
                f"terra-nb: raised{where} when the GraphRunner ran it; Python had already gone "
                f"on to the line where this surfaced (the next read of a value)."
            )
        raise error

    @property
    def busy(self) -> bool:
        """Whether submitted work has not finished yet."""
        return self._queue.unfinished_tasks > 0

    def close(self) -> None:
        """Finish the queued work and stop the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            try:
                self._thread.join()
            except KeyboardInterrupt:  # a Ctrl-C while it finishes: it still ends, then raise
                self._thread.join()
                raise

    @property
    def compiled(self) -> int:
        """How many segments are compiled (and kept)."""
        return sum(not isinstance(f, Segment) for f in self._cache.values())

    @property
    def programs(self) -> tuple[Segment, ...]:
        """The segments run so far, compiled or still interpreted (the generated program,
        inspectable)."""
        return tuple(self._segments.values()) + self.policy.segments()

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        # this thread's function calls (segments, programs) run with the regions' config: no
        # grappler, as in eager (thread-local, so the user's own calls keep theirs)
        context.context().function_call_options = context.FunctionCallOptions(
            config_proto=config_pb2.ConfigProto.FromString(eager_equal_config()))
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            self.spans.append(RunnerSpan(
                "graph", "stall", item.iteration, item.phase, self._idle_since,
                time.perf_counter()))
            try:
                if type(item) is ProgramRun:
                    self._run_program(item)
                else:
                    self._process(item, item.young and item.young.segment)
            finally:
                self._queue.task_done()

    def _process(self, item: WorkItem, interpret: Segment | None = None,
                 waited: float | None = None, compiling: float = 0.0) -> None:
        """Run ``item`` (compiled, or ``interpret``'s ops one by one); keep a failure for Python.
        ``waited``: when Python began to wait for this run; ``compiling``: how much of the wait
        was for compiles."""
        start, calls = time.perf_counter(), []
        young = item.young
        kind, compiled = "exec", interpret is None
        try:
            if item.generation == self._failed_generation:
                item.error = self.error  # issued after the failed op: never runs
            elif interpret is not None:
                self._run_op_by_op(item, interpret, calls)
            else:
                kind, compiled = self._execute(item)
        except BaseException as error:  # kept and raised in the Python thread
            self.error = item.error = error
            self._failed_generation = item.generation
            if isinstance(error, Exception):  # not a Ctrl-C: eager has what ran before it
                segment = interpret or make_segment(item.key, item.entries)
                self._salvaged += values_before_failure(segment, item.args, self.handles,
                                                        item.returns)
        finally:
            end = time.perf_counter()
            if young is not None:
                self.policy.ran(young, end - start, sum(calls),
                                None if waited is None else start - waited, compiling)
            self.spans.append(RunnerSpan("graph", kind, item.iteration, item.phase, start, end,
                                         item.label, len(item.entries), compiled))
            self._idle_since = end  # also when Python's thread ran it (an inline run)
            item.release()
            item.done.set()

    def _run_program(self, run: ProgramRun) -> None:
        start = time.perf_counter()
        try:
            run.execute()
        finally:
            self._idle_since = time.perf_counter()
            self.spans.append(RunnerSpan("graph", "exec", run.iteration, "coexec", start,
                                         self._idle_since, "whole program", compiled=True))

    def _execute(self, item: WorkItem) -> tuple[str, bool]:
        """Run ``item`` compiled (built first if new); its timeline (kind, compiled)."""
        function, first = self._cache.get(item.key), None
        if function is None:
            first = time.perf_counter()
            function = self._cache[item.key] = self._compile(item)
            if len(self._cache) > self.max_compiled:
                dropped, _ = self._cache.popitem(last=False)
                self._segments.pop(dropped, None)
        else:
            self._cache.move_to_end(item.key)
        if isinstance(function, Segment):  # it cannot be compiled: its ops run one by one
            self._run_op_by_op(item, function)
            return "exec", False
        specs = function.cf.structured_input_signature[0]
        args = [real_argument(a, spec.dtype) for a, spec in zip(item.args, specs)]
        try:
            values = function(*args)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
            if not xla_refused(error):
                raise
            # XLA has no kernel for an op of it: nothing ran; run it compiled without XLA
            segment = make_segment(item.key, item.entries)
            function = self._cache[item.key] = FunctionCall(
                compile_segment(segment, self.handles, False))
            values = function(*args)
        if first is not None:
            self.policy.learn(item.key, time.perf_counter() - first)
        self._deliver_values(item, values)
        return ("exec" if first is None else "compile"), True

    def _run_op_by_op(self, item: WorkItem, segment: Segment, calls: list | None = None) -> None:
        self.interpreted += 1
        args = [real_argument(a, dtype) for a, (dtype, _) in zip(item.args, segment.args)]
        self._deliver_values(item, run_segment(segment, args, self.handles, calls))

    def _compile(self, item: WorkItem):
        """The compiled function of ``item``'s segment; the segment itself when TensorFlow
        cannot build it as a graph although its ops ran eagerly (an argument whose value
        the graph needs for a static shape, as ``RaggedTensor.to_tensor`` has)."""
        segment = make_segment(item.key, item.entries)
        try:
            function = FunctionCall(compile_segment(segment, self.handles, self.xla))
        except (ValueError, TypeError):
            if not interpretable(segment):
                raise
            return segment
        self._segments[item.key] = segment
        return function

    @staticmethod
    def _deliver_values(item: WorkItem, values: list) -> None:
        for placeholder, value in zip(item.returns, values):
            if value._shape_tuple() != placeholder.sig[1]:
                raise TerraError(
                    f"op output shape {value.shape} differs from the traced {placeholder.shape} "
                    f"(node {placeholder.node}); the op's output shape depends on input values"
                )
            placeholder.resolve(value)
