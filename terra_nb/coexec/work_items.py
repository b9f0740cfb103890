"""What the GraphRunner runs: a ``WorkItem`` per segment flush, a ``ProgramRun`` per iteration of
the whole program (``ProgramRuns``: how those ended; ``ProgramThread``: where they run)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.eager import context

from .. import capture
from ..timeline import RunnerSpan
from .compile_policy import Young
from .function_call import eager_equal_config


class WorkItem:
    """One flush: run the segment ``key`` (built from ``entries`` on first use) on ``args``; its
    returned values go into the placeholders ``returns``.

    Issued into the executor by the loop's thread, it ends with a ``Timestamp`` op (``end``);
    ``done`` is set once that was read (completion.py): the run is confirmed (its placeholders
    hold their values) or failed (``error``)."""

    __slots__ = (
        "key", "entries", "args", "returns", "iteration", "phase", "done", "error", "generation",
        "young", "issued", "end", "calls", "env", "issue_error", "skipped", "unchecked",
        "label", "ops", "compiled", "compiling", "seq",
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
        self.young: Young | None = None  # run op by op: the segment is not compiled yet
        self.issued = 0.0  # perf_counter when the loop's thread began to issue it
        self.end: Any = None  # the pending Timestamp after its ops (None: not issued)
        self.calls: list[tuple] = []  # (Timestamp before, after) each function call, if timed
        self.env: list[list] | None = None  # op by op: each op's outputs (names a failing op)
        self.issue_error: BaseException | None = None  # raised while it was issued
        self.skipped = False  # not issued: an earlier op of its generation failed
        self.label = ""  # the segment's name in the timeline (segment_names.py)
        self.ops = len(entries)
        self.compiled: bool | None = None  # run as one compiled function, or op by op
        self.compiling = 0.0  # perf_counter when its segment's compile began (0: none)
        self.unchecked = False  # its values' shapes are checked when confirmed (op by op)
        self.seq = 0  # its place in issue order (completion.py)

    def release(self) -> None:
        """Drop what running it needed: a placeholder Python keeps holds its value and this
        item (for its error), not the segment's arguments and sibling outputs."""
        self.entries = self.args = self.returns = ()
        self.key = self.young = self.end = self.env = None
        self.calls = []


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
        self.submitted = 0  # runs queued
        self.abandoned = 0  # runs dropped on a divergence
        self.cond = threading.Condition()

    def wait(self, count: int) -> None:
        """Block until ``count`` runs have finished."""
        with self.cond:
            self.cond.wait_for(lambda: self.done >= count)


class ProgramThread:
    """The whole program's runs, in order, on a thread of their own (started by the first run).

    A run waits on its channels for Python's decisions, and one Python abandons (a divergence)
    ends by failing on its closed queues: on the executor that failure would drop the segment
    work queued behind it, and the confirmations of segments would wait behind a run waiting for
    Python. So the whole program keeps a thread (graph_runner.py says when it waits for it)."""

    def __init__(self, spans: list) -> None:
        self.spans = spans
        self._queue: queue.Queue = queue.Queue(maxsize=8)
        self._thread: threading.Thread | None = None

    def submit(self, run: ProgramRun) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="terra-graph-program",
                                            daemon=True)
            self._thread.start()
        self._queue.put(run)

    @property
    def busy(self) -> bool:
        return self._queue.unfinished_tasks > 0

    def join(self) -> None:
        """Block until every run queued has ended."""
        if self.busy:
            self._queue.join()

    def close(self) -> None:
        """Finish the queued runs and stop the thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            try:
                self._thread.join()
            except KeyboardInterrupt:  # a Ctrl-C while it finishes: it still ends, then raise
                self._thread.join()
                raise

    def _run(self) -> None:
        # this thread's program calls run with the config of every compiled function: no
        # grappler, as in eager (thread-local, so the user's own calls keep theirs)
        context.context().function_call_options = context.FunctionCallOptions(
            config_proto=config_pb2.ConfigProto.FromString(eager_equal_config()))
        idle_since = time.perf_counter()
        while True:
            run = self._queue.get()
            if run is None:
                self._queue.task_done()
                return
            start = time.perf_counter()
            self.spans.append(RunnerSpan("graph", "stall", run.iteration, "coexec", idle_since,
                                         start))
            try:
                run.execute()
            finally:
                idle_since = time.perf_counter()
                self.spans.append(RunnerSpan("graph", "exec", run.iteration, "coexec", start,
                                             idle_since, "whole program", compiled=True))
                self._queue.task_done()
