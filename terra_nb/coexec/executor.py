"""The seam between the PythonRunner and the graph side of co-execution.

The PythonRunner matches calls, makes placeholders and decides on divergence; everything after
that is an ``Executor``'s: it takes the ops Python issued (``IssuedOp``, the one op record from
the hook to the graph), runs them through its GraphRunner (TensorFlow's asynchronous executor),
writes the values into the placeholders it made, and answers value requests. Two executors
implement the protocol, one per plan shape:

- ``SegmentExecutor`` (segment_executor.py): straight-line segments of issued ops, flushed when
  they grow, when Python needs a value, and at the end of the iteration.
- ``WholeProgram`` (program_runner.py): one program per iteration for every path of the
  TraceGraph, fed decisions and values as Python issues ops.

An executor that cannot go on with an iteration (the whole program, on an op or a path it does not
hold) raises ``PathError``; the PythonRunner then leaves the plan (``abandon``) and goes on tracing.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from ..capture.placeholder import Placeholder
from ..capture.signature import Entry
from .handover import hand_over

# The one flush policy of both plans: work Python issued goes to the graph when it holds this many
# items (ops of a segment; decisions and feeds of the whole program), when Python issues an op
# whose value it read in an earlier iteration (the graph computes it while Python goes on), when
# Python waits for a value, and at the end of the iteration.
FLUSH_AT = 512


@dataclass(slots=True)
class IssuedOp:
    """One op Python issued in co-execution, answered with ``outputs``.

    ``inputs`` are flat: placeholders, eager tensors, variable handles and Python values (numpy
    arrays already copied: the graph reads them later). ``loc`` is the op's program location and
    ``prev_loc`` that of the op Python ran before it (where a new loop trip begins)."""

    entry: Entry
    inputs: list
    outputs: list[Placeholder]
    device: str = ""  # the user's tf.device scope ("": the default)
    loc: int = -1
    prev_loc: int | None = None

    @property
    def node(self) -> int:
        """The TraceGraph node this op is (errors map back to its source line through it)."""
        return self.entry.node


class Executor(Protocol):
    """The graph side of co-execution, as the PythonRunner sees it (see the module docstring)."""

    failed: BaseException | None  # a run failed and Python was told: the iteration is traced
    claims_pure_calls: bool  # whether ops on real values may be its work too (``computes``)

    def computes(self, entry: Entry) -> bool:
        """Whether a pure call on real values with ``entry`` is this executor's work."""

    def issue(self, op: IssuedOp) -> int:
        """Take ``op``; the number of its inputs fed from Python. ``PathError``: not held."""

    def materialise(self, placeholder: Placeholder) -> Any:
        """The value of ``placeholder`` (waiting for the graph); None if this plan cannot give
        it (the PythonRunner then leaves the plan, whose replay gives it)."""

    def catch_up(self) -> None:
        """Let the graph run everything issued, before Python runs an op for real."""

    def end_iteration(self) -> None:
        """Close the iteration: what is held back goes to the graph. ``PathError``: it cannot end
        in this plan (``escaping`` on the error lists the placeholders that outlive it)."""

    def abandon(self) -> None:
        """The iteration leaves this plan: nothing of it commits beyond what Python confirmed,
        and every placeholder Python holds gets its real value."""

    def sync(self, deliver: bool = True) -> None:
        """Wait for every run; raise a failure Python was not told of (if ``deliver``)."""

    def close(self) -> None:
        """Finish every confirmed run and stop the GraphRunner."""


class KeptPlaceholders:
    """Placeholders that may outlive the loop: handed over (replaced by their values) at close.

    Held weakly; pruned when the list doubles, so a long loop does not pile up references."""

    prune_from = 512  # references held before the first pruning

    def __init__(self) -> None:
        self._refs: list[weakref.ref] = []
        self._limit = self.prune_from

    def add(self, placeholders: list[Placeholder]) -> None:
        self._refs.extend(weakref.ref(ph) for ph in placeholders)
        if len(self._refs) > self._limit:  # amortised: the limit doubles with what lives
            alive = self.alive()
            for ph in alive:  # settled: the work item is no longer needed (only its error was)
                item = ph.item
                if ph.value is not None and item is not None and item.done.is_set() \
                        and item.error is None:
                    ph.bind(None)
            self._refs = [weakref.ref(ph) for ph in alive]
            self._limit = max(self.prune_from, 2 * len(alive))

    def alive(self) -> list[Placeholder]:
        return [ph for ref in self._refs if (ph := ref()) is not None]

    def hand_over(self) -> list:
        """Replace the live placeholders where Python holds them; what could not be replaced."""
        alive, self._refs = self.alive(), []
        return hand_over(alive)
