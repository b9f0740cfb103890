"""The GraphRunner: the graph side of co-execution, on TensorFlow's asynchronous eager executor.

Each Terra has one executor (``new_executor(enable_async=True)``). As Python flushes, the loop's
thread issues into it each ``WorkItem`` (a segment: its compiled function as one call, or its
ops one by one until it is worth compiling, ``compile_policy.py``; region calls among them) and
returns at once: the executor's C++ thread runs them in that order while Python goes on, and
needs no GIL (a Python thread does, to start and to return from each call, and gets it only at
the loop thread's switch interval). The placeholders take the pending handles at once.

Python's own ops, constants, numpy conversions and iterator ops stay on the synchronous
executor: a value made inside the executor's scope would be pending behind all queued work. A
read there is not ordered after a write pending here, so where Python must see the graph's
effects (a value read, an op run for real, between iterations) it waits for the runs issued.
Nothing on the loop's thread reads a pending handle's shape: a compiled segment's output shapes
are checked against the placeholders when it compiles, an op-by-op run's when it is confirmed.

Each run ends with a ``Timestamp`` (a compiled run's is its function's last output, an op-by-op
run's an op of its own) that ``Completions`` (completion.py) reads, in order, on a helper thread
that only waits: the run is confirmed (its values, its span on the timeline, its
rent for the compile policy) or failed. A failed op makes the executor drop everything queued
after it (no later update takes effect); the failure is raised in Python at its next
synchronisation point (a read, a wait, the end of the loop), naming the op's source line; then
the executor is cleared and the values made before the failing op are readable (salvage.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import executor, record

from .. import capture
from ..errors import TerraError
from .compile_policy import CompilePolicy
from .completion import Completions, issuing_into, read, stamp
from .cores import CoreSplit
from .early_start import LongCalls
from .function_call import FunctionCall, xla_refused
from .lower import Segment, compile_segment, interpretable, make_segment, real_argument, run_segment
from .run_failures import RunFailures
from .segment_names import SegmentNames
from .work_items import ProgramRun, ProgramRuns, ProgramThread, WorkItem

__all__ = ["GraphRunner", "ProgramRun", "ProgramRuns", "WorkItem"]


class GraphRunner:
    """Issues work items into its executor in submission order (see the module docstring)."""

    max_compiled = 256  # compiled segments kept

    def __init__(self, handles: dict[int, Any], *, xla: bool = False, max_ahead: int = 8,
                 compile_after: int = 2, where=lambda node: None, split_cores: bool = True,
                 ) -> None:
        """``where(node)``: a TraceGraph node's ``Location`` (or None), for error messages;
        ``max_ahead``: runs issued and not confirmed before Python waits for the oldest;
        ``split_cores``: keep the executor's thread and the loop's on cores of their own
        (cores.py)."""
        self.handles = handles
        self.xla = xla
        self.compile_after = compile_after
        self.max_ahead = max_ahead
        self.interpreted = 0  # segments run eagerly, op by op, instead of compiled
        self.ops_submitted = 0
        self.ops_new = 0  # ops in segments submitted for the first time
        self._sightings: dict[tuple, int] = {}
        self._names = SegmentNames()  # segment key -> its name in the timeline
        self.policy = CompilePolicy()
        self.long_calls = LongCalls()  # calls after which Python flushes (early_start.py)
        self.spans: list = []  # RunnerSpans, appended by the helper threads
        self.failures = RunFailures(handles, where)
        # Compiled functions (or segments TensorFlow cannot compile), least recently used first:
        # a loop whose paths never repeat would otherwise keep every one of them.
        self._cache: OrderedDict[tuple, Any] = OrderedDict()
        self._segments: dict[tuple, Segment] = {}
        self._unchecked: set[tuple] = set()  # compiled keys whose output shapes are not static
        self.cores = CoreSplit(split_cores)
        self.executor = self.cores.started(lambda: executor.new_executor(enable_async=True))
        self.completions = Completions(self)
        self._inflight: deque[WorkItem] = deque()  # issued, in order; confirmed ones dropped
        self._programs = ProgramThread(self.spans)
        self._closed = False

    def start(self) -> None:
        """Start the helper thread (where a Ctrl-C is held back: one landing inside
        ``Thread.start`` would leave a thread nobody stops), and the executor's own: it starts
        on its first op (3-30 ms), which would count as the first run's time."""
        self.completions.start()
        self.cores.settled()
        read(stamp(self.executor))

    def submit(self, item: WorkItem) -> None:
        """Issue ``item`` into the executor (back-pressure: waits while ``max_ahead`` runs are
        unconfirmed), compiled or op by op; returns once it is issued."""
        if self._closed or not self.completions.alive:
            raise TerraError("the GraphRunner has stopped; this Terra loop cannot continue")
        self._programs.join()  # a whole program's runs first (none waits for Python by now)
        self._account()
        item.generation = self.failures.generation
        sightings = self._sighted(item.key)
        item.label = self._names.name(item.key, item.entries)
        self.ops_submitted += len(item.entries)
        if sightings == 1:
            self.ops_new += len(item.entries)
        if self.failures.holds(item.generation):  # issued after an op that failed
            item.skipped = True
            self._queue(item)
            return
        segment = self._to_interpret(item, sightings)
        self._hold_back()
        self.cores.follow()
        self._issue(item, segment)

    def run_program(self, run: ProgramRun) -> None:
        """Queue a whole program's run for an iteration (runs after the work issued before)."""
        if self._closed or not self.completions.alive:
            raise TerraError("the GraphRunner has stopped; this Terra loop cannot continue")
        self._wait_items()
        self._programs.submit(run)

    def _to_interpret(self, item: WorkItem, sightings: int) -> Segment | None:
        """The segment to run op by op: one not worth compiling yet (``item.young``, see
        compile_policy.py), or one TensorFlow could not compile; None: run the compiled
        function."""
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
        if due or not young.interpretable:
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

    # -- issuing ----------------------------------------------------------------------------

    def _issue(self, item: WorkItem, segment: Segment | None) -> None:
        """Issue ``item``'s ops (or its function) and its end stamp; its placeholders take the
        pending values. An error raised meanwhile (the executor holds an earlier failure, or an
        op cannot be issued) holds back the rest of the generation."""
        values = None
        with capture.bypass(), record.stop_recording():  # not Python's ops: nothing to record
            try:
                values = self._execute(item) if segment is None else self._run_op_by_op(
                    item, segment)
            except Exception as error:
                item.issue_error = error
                self.failures.hold(item.generation)
            if item.end is None:  # (a compiled run's function gives its own)
                item.end = stamp(self.executor)
        if values is not None:
            for placeholder, value in zip(item.returns, values):
                placeholder.issue(value)
        self._queue(item)

    def _queue(self, item: WorkItem) -> None:
        self._inflight.append(item)
        self.completions.add(item)

    def _hold_back(self) -> None:
        """Python runs ahead of the graph by ``max_ahead`` runs at most: then it waits for the
        older half of them (confirmed on demand, completion.py: one wait per half)."""
        inflight = self._inflight
        while inflight and inflight[0].done.is_set():
            inflight.popleft()
        if len(inflight) >= self.max_ahead:
            half = len(inflight) // 2
            self.completions.wait(inflight[half - 1])
            for _ in range(half):
                inflight.popleft()

    def _execute(self, item: WorkItem) -> list:
        function, first = self._cache.get(item.key), None
        if function is None:
            first = item.compiling = time.perf_counter()
            function = self._cache[item.key] = self._compile(item)
            if len(self._cache) > self.max_compiled:
                dropped, _ = self._cache.popitem(last=False)
                self._segments.pop(dropped, None)
                self._unchecked.discard(dropped)
        else:
            self._cache.move_to_end(item.key)
        if isinstance(function, Segment):  # it cannot be compiled: its ops run one by one
            return self._run_op_by_op(item, function)
        specs = function.cf.structured_input_signature[0]
        args = [real_argument(a, spec.dtype) for a, spec in zip(item.args, specs)]
        item.issued = time.perf_counter()  # after its compile: the executor had no part in it
        with issuing_into(self.executor):
            values = function(*args)
        if first is not None and self.xla:
            values = self._refused_by_xla(item, args, values)
        if first is not None:  # its trace, and the instantiation its first issue does
            self.policy.learn(item.key, time.perf_counter() - first)
        item.unchecked, item.compiled = item.key in self._unchecked, True
        if len(values) > len(item.returns):  # its own end stamp (compile_segment's ``stamped``)
            item.end = values.pop()
        return values

    def _refused_by_xla(self, item: WorkItem, args: list, values: list) -> list:
        """The first run of an XLA function, waited for: XLA refuses a segment (an op it has no
        kernel for) when it runs. Then nothing ran: run it compiled without XLA."""
        try:
            self.executor.wait()
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as error:
            if not xla_refused(error):
                return values  # an op failed: confirmed as such in order
            self.executor.clear_error()
            segment = make_segment(item.key, item.entries)
            function = self._cache[item.key] = FunctionCall(
                compile_segment(segment, self.handles, False, stamped=True))
            with issuing_into(self.executor):
                return function(*args)
        return values

    def _run_op_by_op(self, item: WorkItem, segment: Segment) -> list:
        self.interpreted += 1
        item.issued = time.perf_counter()
        args = [real_argument(a, dtype) for a, (dtype, _) in zip(item.args, segment.args)]
        young = item.young
        calls = item.calls if young is not None and young.times_calls() else None
        item.env, item.unchecked, item.compiled = [], True, False
        with issuing_into(self.executor):
            return run_segment(segment, args, self.handles, calls, item.env, stamp)

    def _compile(self, item: WorkItem):
        """The compiled function of ``item``'s segment (its output shapes checked against the
        placeholders'); the segment itself when TensorFlow cannot build it as a graph although
        its ops ran eagerly (an argument whose value the graph needs for a static shape, as
        ``RaggedTensor.to_tensor`` has)."""
        segment = make_segment(item.key, item.entries)
        try:
            function = FunctionCall(compile_segment(segment, self.handles, self.xla,
                                                    stamped=True))
        except (ValueError, TypeError):
            if not interpretable(segment):
                raise
            return segment
        shapes = [t.shape for t in function.cf.outputs]
        if any(shape.rank is None or tuple(shape.as_list()) != ph.sig[1]
               for shape, ph in zip(shapes, item.returns)):
            self._unchecked.add(item.key)  # checked on every run, when confirmed
        self._segments[item.key] = segment
        return function

    # -- waiting, failures ------------------------------------------------------------------

    def _account(self) -> None:
        """The compile policy learns the rent of the runs confirmed since."""
        finished = self.completions.finished
        while finished:
            young, seconds, calls = finished.popleft()
            self.policy.ran(young, seconds, None if calls is None else sum(calls))
            self.long_calls.ran(young.segment, calls)

    def wait_for(self, item: WorkItem) -> None:
        """Block until ``item`` is confirmed or failed (a Ctrl-C interrupts the wait)."""
        self.completions.wait(item)

    def _wait_items(self) -> None:
        inflight = self._inflight
        if inflight:
            self.completions.wait(inflight[-1])  # confirmed in order: every one before it too
            inflight.clear()
        self._account()

    def wait_idle(self, deliver: bool = True) -> None:
        """Block until every submitted item has run; raise a failure Python was not told of
        (unless not ``deliver``: it is raised at the next wait that delivers)."""
        self._programs.join()
        self._wait_items()
        if deliver and self.failures.pending:
            self.deliver(self.failures.error)

    def failed(self, item: WorkItem, error: BaseException) -> None:
        """(Completions' thread) ``item`` is the first failure of its generation."""
        self.failures.failed(item, error)

    def deliver(self, error: BaseException) -> None:
        """Raise ``error`` in Python (see ``RunFailures.deliver``). Told of a failure, every run
        of its generation is confirmed first: a value that one dropped raises the failure where
        a later run takes it (``real_argument``), not an internal error (the review's
        r2_cascade: an argument of a run not confirmed yet was neither made nor failed)."""
        if self.failures.pending:
            self._wait_items()
        self.failures.deliver(error, self.executor)

    @property
    def busy(self) -> bool:
        """Whether submitted work has not finished yet."""
        inflight = self._inflight
        return self._programs.busy or bool(inflight) and not inflight[-1].done.is_set()

    def close(self) -> None:
        """Finish the issued work and stop the helper threads (idempotent); nothing is left
        queued in the executor."""
        if self._closed:
            return
        self._closed = True
        interrupted = None
        try:
            self._programs.close()
            while True:
                try:
                    self._wait_items()
                    break
                except KeyboardInterrupt as error:  # a Ctrl-C while it finishes: it still ends
                    interrupted = error
        finally:
            self.completions.stop()
            self._release_executor()
        if interrupted is not None:
            raise interrupted

    def _release_executor(self) -> None:
        """Delete the executor (its thread ends): nothing is pending, a failure no one read is
        cleared (drain raised it, if the loop got that far)."""
        executor, self.executor = self.executor, None
        try:
            executor.wait()
        except Exception:  # noqa: BLE001 - see the docstring
            pass
        executor.clear_error()
        del executor  # TensorFlow's Executor shuts its thread down when collected
        self.cores.release()

    @property
    def compiled(self) -> int:
        """How many segments are compiled (and kept)."""
        return sum(not isinstance(f, Segment) for f in self._cache.values())

    @property
    def programs(self) -> tuple[Segment, ...]:
        """The segments run so far, compiled or still interpreted (the generated program,
        inspectable)."""
        return tuple(self._segments.values()) + self.policy.segments()
