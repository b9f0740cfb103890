"""Which runs the executor finished: a helper thread that waits when Python does.

Every ``WorkItem`` the GraphRunner issues into TensorFlow's asynchronous executor ends with a
``Timestamp`` op. ``Completions`` reads those stamps in issue order (a blocking read, in C++
with the GIL released): a run whose stamp reads is confirmed (its placeholders get their values,
the timeline its span, the compile policy its rent); a run whose stamp raises failed, or was
dropped by the executor after an earlier failure. The first failure is the one Python is told
of; every later run of its generation failed with it.

The helper confirms runs when Python asks for one (``wait``: a value read, the runs ahead
limit, a wait for all), every run up to it, while the loop's thread waits on the run's ``done``
event in slices, so a Ctrl-C is raised within 0.1 s (a blocking read in TensorFlow would hold it
until the value is computed). Python's own waits are the only moments it needs to know, and then
it has nothing else to do. A helper that confirmed each run as soon as it ended took the GIL
twice a run while the loop's thread ran Python, and preempted it on its core (mlp-small: 11
switches of the loop's thread an iteration, 3 confirming on demand).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import deque

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context, core
from tensorflow.python.framework import errors

from ..errors import TerraError
from ..timeline import RunnerSpan
from .work_items import WorkItem

WAIT_SLICE = 0.1  # seconds the loop's thread waits at a time (a Ctrl-C is raised between)


def wait_for(event: threading.Event, confirming: threading.Thread | None = None) -> None:
    """Block until ``event`` is set, a Ctrl-C raising ``KeyboardInterrupt`` meanwhile (a
    signal may reach another thread, which would not wake this one); ``confirming``: the thread
    that sets it (its end without setting it is an error, not a wait for ever)."""
    while not event.wait(WAIT_SLICE):
        if confirming is not None and not confirming.is_alive() and not event.is_set():
            raise TerraError("internal: the GraphRunner's helper thread has stopped")


@contextlib.contextmanager
def issuing_into(executor):
    """Ops this thread runs go to ``executor`` (TensorFlow's ``executor_scope`` without its trap:
    the Python wrapper it makes of the executor it replaces waits for all of that executor's work
    when collected, so a scope inside another waited for every run issued). The executor it
    replaces (the thread's own, or one the user's ``async_scope`` set) is held by its C handle,
    restored at the end, and the handle deleted without a wait."""
    ctx = context.context()
    ctx.ensure_initialized()
    previous = pywrap_tfe.TFE_ContextGetExecutorForThread(ctx._context_handle)
    pywrap_tfe.TFE_ContextSetExecutorForThread(ctx._context_handle, executor.handle())
    try:
        yield
    finally:
        pywrap_tfe.TFE_ContextSetExecutorForThread(ctx._context_handle, previous)
        pywrap_tfe.TFE_DeleteExecutor(previous)  # an unowned wrapper: nothing waits


def stamp(executor=None):
    """A ``Timestamp`` op issued into ``executor`` (None: the one this thread issues into, inside
    ``issuing_into``): a pending float64 of seconds (``time.time``'s clock) when the executor
    reached it; None if the executor holds a failure."""
    ctx = context.context()
    try:
        with issuing_into(executor) if executor is not None else contextlib.nullcontext():
            return pywrap_tfe.TFE_Py_Execute(ctx._handle, None, "Timestamp", [], (), 1)[0]
    except Exception:  # noqa: BLE001 - the executor's failure, confirmed in order
        return None


def read(handle) -> float:
    """A stamp's seconds (blocks until it ran); raises the executor's failure."""
    try:
        return float(handle._numpy_internal())
    except core._NotOkStatusException as error:
        raise core._status_to_exception(error) from None


_ORIGIN = re.compile(r"^Exception originated from\n.*?\n\n", re.S)


def plain_error(error: BaseException) -> BaseException:
    """``error`` without the issuing Python stack the asynchronous executor puts first (it names
    terra-nb's frames, not the user's: the note added when Python is told names the line)."""
    if isinstance(error, errors.OpError) and _ORIGIN.match(error.message):
        message = _ORIGIN.sub("", error.message, count=1)
        clean = type(error)(error.node_def, error.op, message)
        clean.__traceback__ = error.__traceback__
        return clean
    return error


class Completions:
    """Confirms the runs of ``runner`` (a GraphRunner) in order, on its own thread, when asked."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.offset = time.time() - time.perf_counter()  # a stamp's clock to perf_counter's
        self._items: deque[WorkItem] = deque()  # added, not yet confirmed, in order
        self._cond = threading.Condition()
        self._seq = 0  # the last run added
        self._asked = 0  # the helper confirms every run up to this one
        self._stopping = False
        self._failure: tuple[int, BaseException] | None = None  # (generation, first error)
        self._last_end = 0.0  # perf_counter when the last confirmed run ended
        self.finished: deque = deque()  # (young, seconds, each call's) for the compile policy
        self._thread = threading.Thread(target=self._run, name="terra-graph-wait", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def wait(self, item: WorkItem) -> None:
        """Block until ``item`` is confirmed or failed (a Ctrl-C interrupts the wait)."""
        if not item.done.is_set():
            with self._cond:  # the helper confirms every run up to it
                if item.seq > self._asked:
                    self._asked = item.seq
                    self._cond.notify()
            wait_for(item.done, self._thread)

    def add(self, item: WorkItem) -> None:
        """(The loop's thread) ``item`` was issued (or held back)."""
        with self._cond:
            self._seq += 1
            item.seq = self._seq
            self._items.append(item)

    def stop(self) -> None:
        """End the thread once every run added is confirmed (idempotent)."""
        if self._thread.is_alive():
            with self._cond:
                self._stopping = True
                self._cond.notify()
            self._thread.join()

    def _run(self) -> None:
        items = self._items
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or items and items[0].seq <= self._asked)
                if not items:  # stopping, every run confirmed
                    return
                item = items.popleft()
            try:
                self._confirm(item)
            except BaseException as error:  # never leave Python waiting on it
                item.error = item.error or error
            finally:
                item.done.set()

    def _confirm(self, item: WorkItem) -> None:
        failure = self._failure
        if failure is not None and failure[0] == item.generation:
            item.error = failure[1]  # dropped (or never issued): an earlier op failed
            item.release()
            return
        if item.skipped:
            self._fail(item, TerraError("internal: a run was held back for a failure not seen"))
            return
        try:
            end, calls = self._stamps(item)
        except Exception as error:  # its own op failed (earlier runs were confirmed)
            self._fail(item, plain_error(error))
            return
        mismatch = self._resolve(item)
        if mismatch is not None:
            self._fail(item, mismatch)
            return
        self._record(item, end - self.offset, calls)
        item.release()

    def _stamps(self, item: WorkItem) -> tuple[float, list[float] | None]:
        """When ``item`` ended (a stamp's clock) and the seconds each timed call took."""
        if item.issue_error is not None or item.end is None:  # the executor's failure first
            self.runner.executor.wait()
            raise item.issue_error or TerraError("internal: a run's end was not issued")
        end = read(item.end)
        if not item.calls:
            return end, None
        return end, [read(after) - read(before) for before, after in item.calls]

    def _resolve(self, item: WorkItem) -> TerraError | None:
        """Give the placeholders their values; an op-by-op value whose shape is not the traced
        one is an error (a compiled segment's were checked when it compiled)."""
        for placeholder in item.returns:
            value = placeholder.pending
            if item.unchecked and value._shape_tuple() != placeholder.sig[1]:
                return TerraError(
                    f"op output shape {value.shape} differs from the traced {placeholder.shape} "
                    f"(node {placeholder.node}); the op's output shape depends on input values")
            placeholder.resolve(value)
        return None

    def _fail(self, item: WorkItem, error: BaseException) -> None:
        """``item`` is the first failure of its generation: the runner raises it in Python."""
        item.error = error
        self._failure = (item.generation, error)
        self.runner.failed(item, error)

    def _record(self, item: WorkItem, end: float, calls: list[float] | None) -> None:
        """The run's span on the timeline (from when the executor could start it to its end
        stamp; a compile the loop's thread did first is a span of its own) and its rent."""
        start = max(self._last_end, item.issued)
        end = max(end, start)
        spans, idle = self.runner.spans, self._last_end
        begin = max(idle, item.compiling) if item.compiling else start  # a compile comes first
        if begin > idle > 0.0:
            spans.append(RunnerSpan("graph", "stall", item.iteration, item.phase, idle, begin))
        if item.compiling:  # its compile held up the run's issue
            spans.append(RunnerSpan("graph", "compile", item.iteration, item.phase, begin, start,
                                    item.label, item.ops, True))
        spans.append(RunnerSpan("graph", "exec", item.iteration, item.phase, start, end,
                                item.label, item.ops, item.compiled))
        self._last_end = end
        if item.young is not None:
            self.finished.append((item.young, end - start, calls))
