"""A run that failed on the executor, until Python is told of it.

Runs are issued in generations: a failed op makes the executor drop everything queued after it,
and every run issued after it in its generation fails with it (one held back before it is issued
never runs). Python is told of the first failure at its next synchronisation point (a read, a
wait, the end of the loop): then the executor is cleared, the values made before the failing op
are readable (salvage.py), and a new generation starts. The error names the op's source line.
"""

from __future__ import annotations

import re
import sys
import warnings
from typing import Any

from tensorflow.python.eager import record

from .. import capture
from ..capture import catching
from ..capture.location import is_user_code
from .lower import make_segment
from .salvage import made_shape, values_before_failure
from .work_items import WorkItem


class RunFailures:
    """The failure of the current generation of runs (``handles``: variable key -> handle;
    ``where(node)``: a TraceGraph node's ``Location``, or None)."""

    def __init__(self, handles: dict[int, Any], where) -> None:
        self.handles = handles
        self.where = where
        self.error: BaseException | None = None  # the last failure
        self.generation = 0  # bumped when Python is told of a failure
        self.iteration = 0  # the Terra iteration Python is in (the engine's), for a late one
        self._failed_generation = -1
        self._item: WorkItem | None = None  # the failed run, for its values before the failure

    def holds(self, generation: int) -> bool:
        """Whether runs of ``generation`` are held back (an earlier one failed)."""
        return generation == self._failed_generation

    def hold(self, generation: int) -> None:
        """A run of ``generation`` could not be issued: hold back the rest of it (the failure
        itself is found when that run is confirmed, in order)."""
        self._failed_generation = generation

    @property
    def pending(self) -> bool:
        """Whether a failure waits for Python to be told."""
        return self.error is not None and self._failed_generation == self.generation

    def failed(self, item: WorkItem, error: BaseException) -> None:
        """(Completions' thread) ``item`` is the first failure of its generation."""
        error._terra_node = _failing_node(item, error)
        error._terra_iteration = item.iteration
        self.error = error
        self._item = item
        self._failed_generation = item.generation

    def deliver(self, error: BaseException, executor) -> None:
        """Raise ``error`` in Python. A failed op stops the work Python issued after it (as an
        eager error would have); work issued once Python has seen the error runs again."""
        if self._failed_generation == self.generation:
            self._recover(executor)
            self.generation += 1
        self.note(error, getattr(error, "_terra_node", None))
        raise error

    def note(self, error: BaseException, node: int | None) -> None:
        """Before ``error`` (of the op at TraceGraph ``node``, run in iteration
        ``error._terra_iteration``) is raised where it surfaced: a note naming the op's line
        (once), and a warning where eager would have raised it elsewhere (``_warn_if_late``;
        each time: a value the failed run was to make raises it again wherever it is read)."""
        location = None if node is None else self.where(node)
        op = "an op" if location is None else f"the op at {location.text}"
        again = getattr(error, "_terra_noted", False)
        if not again:
            error._terra_noted = True
            error.add_note(
                f"terra-nb: raised by {op} when TensorFlow's executor ran it; Python had already "
                f"gone on to the line where this surfaced (the next read of a value)."
            )
        self._warn_if_late(error, op, location, again)

    def _warn_if_late(self, error: BaseException, op: str, location, again: bool) -> None:
        """Say so where eager would have raised the error elsewhere: in an earlier iteration
        (the iterations between ran their Python past it), or inside other ``except`` clauses
        than where it surfaced (``catching``: another clause, or none, catches it); ``again``:
        raised before, now by a value its run was to make. Either way the state goes on from
        another point than eager's."""
        failed = getattr(error, "_terra_iteration", None)
        if failed is None:
            return
        later = self.iteration > failed
        if not later and (location is None or not _caught_elsewhere(location.frames)):
            return
        name = type(error).__name__
        if again:
            said = (f"in iteration {failed}, and a value its run was to make, read here, raises "
                    f"its {name} again where eager reads the value (README, Known limits: what "
                    f"a failed run leaves readable)")
        elif later:
            said = (f"in iteration {failed}, and nothing of that iteration was read after it, "
                    f"so its {name} surfaced in iteration {self.iteration}; eager raises it in "
                    f"iteration {failed}. The iterations between ran their Python past the "
                    f"failing op")
        else:
            said = (f"in this iteration, and nothing was read after it inside the try around "
                    f"it (if any), so its {name} surfaced here, among other except clauses than "
                    f"the op's (or in another call or activation of them); eager raises it at "
                    f"the op, where those catch it. Python ran past the failing op")
        warnings.warn(
            f"terra-nb: {op} failed on TensorFlow's executor {said}, and the updates issued "
            f"after it were dropped: from here the state may differ from eager's. To catch such "
            f"an error where eager does, read a value of the step (float(loss), say) inside the "
            f"try around the op.", RuntimeWarning, stacklevel=_user_level())

    def _recover(self, executor) -> None:
        """The executor goes on from the failure (cleared; what was queued after the failing op
        was dropped), and the values made before the failing op are readable, as in eager."""
        if executor is not None:  # (None: a value read after the loop, the executor released)
            try:
                executor.wait()
            except Exception:  # noqa: BLE001 - the failure Python is told of
                pass
            executor.clear_error()
        item, self._item = self._item, None
        if item is None or item.key is None or not isinstance(item.error, Exception):
            return
        segment = make_segment(item.key, item.entries)
        with capture.bypass(), record.stop_recording():
            salvaged = values_before_failure(segment, item.args, self.handles, item.returns,
                                             item.env)
        for placeholder, value in salvaged:
            placeholder.resolve(value)
            placeholder.bind(None)
        item.release()


def _caught_elsewhere(frames) -> bool:
    """Whether an error raised at the op of ``frames`` (root first) meets other ``except``
    clauses than one raised here, at the line it surfaced at."""
    here = catching.chain_here(frames[0][0]) if frames else ()
    return catching.catching(frames) != catching.catching(here)


def _failing_node(item: WorkItem, error: BaseException) -> int | None:
    """The TraceGraph node of the op that failed: a compiled segment's error names its graph op
    (``terra_node_N``; an error a function call raises has no op, node_def or payload in TF
    2.21, only text); an op-by-op run's is its first op whose output was never made, or an op
    without outputs before it whose type the error's text names."""
    nodes = re.findall(r"terra_node_(\d+)", str(error))
    if nodes:
        return int(nodes[0])
    if not item.env or item.key is None:
        return None
    first = next(
        (p for p, outputs in enumerate(item.env) if outputs and made_shape(outputs[0]) is None),
        len(item.env))
    if first >= len(item.entries):
        return None
    # an op without outputs (a variable's update) that failed leaves nothing unmade: the first
    # unmade output is the next op's, and the error's text names the op type that failed
    named = re.search(r"__wrapped__(\w+?)_device_|\[Op:(\w+)\]", str(error))
    op_type = named and (named.group(1) or named.group(2))
    if op_type and item.entries[first].op_type != op_type:
        for p in range(first - 1, -1, -1):
            if not item.env[p] and item.entries[p].op_type == op_type:
                return item.entries[p].node
    return item.entries[first].node


def _user_level() -> int:
    """The stack level of the first frame of the user's code (not terra-nb's, TensorFlow's,
    Keras's or another library's, through which a value may be read): the line a warning
    names."""
    frame, level = sys._getframe(2), 2
    while frame is not None and not is_user_code(frame.f_code):
        frame, level = frame.f_back, level + 1
    return level
