"""The whole program: a TraceGraph -> one ``tf.function`` for a whole iteration, on any path.

The program follows the TraceGraph's plan (``control_flow.py``): a ``tf.switch_case`` at each branch
point, a ``tf.while_loop`` (or an unrolled body) at each loop node, every op node lowered as in a
segment. It talks to Python through ``Channels``, FIFO queues passed in as arguments:

- **Case Select / Loop Cond** (``path``, int32): before each case, the branch; before each trip of
  a while loop, 1 or 0; at an op input with several sources, which one; at a read of a value a
  loop computed, which trip's; at the end, 1 (commit).
- **Input Feeding** (``feeds``, one queue per dtype): a value Python made for an op input, unless
  the program holds it as a ``Constant``.
- **Output Fetching** (``fetches``, one queue per dtype): each fetch point's value, in order.

Variables are captured, and written only at the end: inside the program a variable's writes
become local values (reads see them), and the commit releases the assignments once every other
op has run. Until then an iteration can be abandoned by closing its channels, and nothing it did
is visible: Python replays its ops eagerly on the untouched variables. An op whose effects cannot
wait for the commit (making a variable, a stateful random op, a print) cuts the branches that
hold it (``unfit``); on every path, it makes the TraceGraph unfit for one program
(``ProgramError``), and co-execution runs segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ..trace.tracegraph import TraceGraph, TraceNode
from .control_flow import (
    Block,
    CaseItem,
    LoopItem,
    describe,
    plan,
    same_op,
)
from .program_constants import Constant
from .program_lower import ProgramBuilder
from .program_wiring import (
    FEED,
    all_items,
    candidates,
    python_side,
    unfit,
)

_CAPACITY = 1 << 20


@dataclass(slots=True)
class Channels:
    """The queues of one run of a program (fresh after an abandoned iteration)."""

    path: Any
    feeds: dict[str, Any]
    fetches: dict[str, Any]
    closed: bool = False  # runs still queued with them must not start (values may be left)

    def handles(self) -> list:
        return [self.path.queue_ref] + [q.queue_ref for _, q in sorted(self.feeds.items())] + [
            q.queue_ref for _, q in sorted(self.fetches.items())
        ]

    def close(self) -> None:
        """Abandon the run: a program waiting on a queue fails at once (``OutOfRangeError``)."""
        self.closed = True
        for q in [self.path, *self.feeds.values(), *self.fetches.values()]:
            q.close(cancel_pending_enqueues=True)


@dataclass(frozen=True, slots=True)
class Program:
    """The generated program of a TraceGraph: its plan, its channels' dtypes, the function."""

    graph: TraceGraph
    plan: Block
    feed_dtypes: tuple[str, ...]
    fetch_dtypes: tuple[str, ...]
    written: tuple[str, ...]  # keys of the variables an iteration may write (at commit)
    function: Any  # ConcreteFunction(path, *feeds, *fetches)
    options: dict[int, tuple[tuple, ...]]  # node -> per input, its ``candidates``
    same: dict[int, int]  # ``same_op`` of the graph, for the PathWalker
    constants: dict[tuple[int, int], Any]  # (node, input) -> value held instead of a feed
    per_trip: dict[tuple[int, int], int]  # values read after their loop -> the loop node
    python_side: frozenset[int]  # nodes Python computes itself (``python_side``)

    def __str__(self) -> str:
        head = (
            f"Program({len(self.graph.nodes)} TraceGraph nodes; feeds {list(self.feed_dtypes)}; "
            f"fetches {list(self.fetch_dtypes)}; commits {len(self.written)} variables)"
        )
        return head + "\n" + describe(self.plan, self.graph, "  ", self._inputs)

    def _inputs(self, node: TraceNode) -> str:
        """Which inputs of ``node`` are fed, and which the program holds as constants."""
        options = self.options[node.id]
        fed = [i for i, o in enumerate(options) if FEED in o]
        held = [i for i, o in enumerate(options) if any(type(c) is Constant for c in o)]
        return (f"  <- feed {fed}" if fed else "") + (f"  <- const {held}" if held else "")

    def summary(self) -> str:
        """One line: the program's cases, loops, constants and per-trip values."""
        items = list(all_items(self.plan))
        cases = sum(type(i) is CaseItem for i in items)
        loops = [i for i in items if type(i) is LoopItem]
        whiles = sum(i.unrolled is None for i in loops)
        return (f"{cases} cases, {whiles} while loops, {len(loops) - whiles} unrolled loops, "
                f"{len(self.constants)} constants, {len(self.per_trip)} per-trip values")

    def channels(self) -> Channels:
        path = tf.queue.FIFOQueue(_CAPACITY, [tf.int32], shapes=[[]])
        feeds = {d: tf.queue.FIFOQueue(_CAPACITY, [tf.as_dtype(d)]) for d in self.feed_dtypes}
        fetches = {d: tf.queue.FIFOQueue(_CAPACITY, [tf.as_dtype(d)]) for d in self.fetch_dtypes}
        return Channels(path, feeds, fetches)

    def run(self, channels: Channels) -> None:
        """Run one iteration (blocks until it commits, or fails when the channels close)."""
        self.function(*channels.handles())

    def graph_def(self):
        """The TensorFlow GraphDef of the program (``switch_case`` and ``while_loop`` bodies are
        in its function library)."""
        return self.function.graph.as_graph_def()


def build_program(graph: TraceGraph, handles: dict[str, Any],
                  constants: dict[tuple[int, int], Any] | None = None) -> Program:
    """Generate the program of ``graph``; ``handles`` maps variable keys (``v<id>``, as in
    ``Source.detail``) to their resource handles; ``constants`` maps (node, input) to the value
    the program holds instead of a feed there. Raises ``ProgramError`` if it cannot."""
    python = python_side(graph)
    block = plan(graph, unfit(graph, handles, python), python)
    ops = [n for n in graph.nodes_of("op") if n.id not in python]
    constants = constants or {}
    options = {
        n.id: tuple(
            _hold(candidates(n, i, python), constants.get((n.id, i)))
            for i in range(len(n.sources))
        )
        for n in ops
    }
    feeds = sorted({
        n.input_specs[i].dtype for n in ops for i, o in enumerate(options[n.id]) if FEED in o
    })
    fetches = sorted({n.outputs[k].dtype for n in ops for k in n.fetches})
    builder = ProgramBuilder(graph, block, handles, feeds, fetches, options)
    resource = tf.TensorSpec([], tf.resource)
    specs = [resource] * (1 + len(feeds) + len(fetches))
    function = tf.function(builder.body, autograph=False).get_concrete_function(*specs)
    return Program(graph, block, tuple(feeds), tuple(fetches), builder.written, function,
                   options, same_op(graph), dict(constants), builder.per_trip, python)


def _hold(options: tuple, value) -> tuple:
    """``options`` with the fed candidate replaced by a ``Constant`` of ``value`` (if given)."""
    if value is None:
        return options
    return tuple(Constant(np.asarray(value)) if o == FEED else o for o in options)
