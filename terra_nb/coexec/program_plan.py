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
from tensorflow.python.ops import gen_data_flow_ops, gen_resource_variable_ops, list_ops

from ..trace.records import Source, TensorSpec
from ..trace.tracegraph import TraceGraph, TraceNode
from .control_flow import (
    Block,
    CaseItem,
    LoopItem,
    OpItem,
    ProgramError,
    describe,
    op_nodes,
    plan,
    same_op,
)
from .lower import SegmentOp, lower
from .program_wiring import (
    FEED,
    VARIABLE_OPS,
    WRITES,
    all_items,
    candidates,
    per_trip_values,
    python_side,
    unfit,
    variable_key,
)

_CAPACITY = 1 << 20


class Constant:
    """The candidate of a fed input that had one small value in every co-executed iteration so
    far: the program holds it, and Python checks it (another value is a divergence)."""

    __slots__ = ("value", "_bytes", "_last")

    def __init__(self, value) -> None:
        self.value = np.array(value)  # a copy
        self._bytes = self.value.tobytes()
        self._last: Any = None  # the last immutable object found to hold it (a fast check)

    def holds(self, value) -> bool:
        """Whether ``value`` is this value bit for bit (so -0.0 is not 0.0), of its dtype."""
        if value is self._last:
            return True
        other = small_value(value)
        if (other is None or other.dtype != self.value.dtype or other.shape != self.value.shape
                or other.tobytes() != self._bytes):
            return False
        if not isinstance(value, np.ndarray):  # tensors and Python numbers cannot change
            self._last = value
        return True


SMALL = 16  # values of at most this many elements may become constants


def small_value(value):
    """``value`` as a numpy array if it is a small number or array, else None."""
    kind = type(value)
    if kind is float or kind is int or kind is bool or isinstance(value, np.generic):
        return np.asarray(value)
    if kind is np.ndarray:
        return value if value.size <= SMALL and value.dtype.kind in "biuf" else None
    if isinstance(value, tf.Tensor) and hasattr(value, "_numpy_internal"):  # eager, real
        size = 1
        for d in value._shape_tuple():
            size *= d
        if size > SMALL:
            return None
        array = value._numpy_internal()  # not a read of Python's: no fetch is reported
        return array if array.dtype.kind in "biuf" else None
    return None


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
    builder = _Builder(graph, block, handles, feeds, fetches, options)
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


class _Builder:
    """Builds the program body; ``env`` maps (node, output) to tensors, ``state`` maps keys of
    written variables to their current local values."""

    def __init__(self, graph: TraceGraph, block: Block, handles: dict, feeds: list,
                 fetches: list, options: dict) -> None:
        self.graph = graph
        self.options = options
        self.handles = handles
        self.feed_dtypes = feeds
        self.fetch_dtypes = fetches
        self.plan = block
        self.read = {
            (s.index, s.output) for n in graph.nodes for seen in n.sources for s in seen
            if s.kind == "node"
        }
        self.written: tuple[str, ...] = ()
        self.per_trip = per_trip_values(graph, block)
        self.dtypes = {  # variable key -> dtype, from the ops that read or write it
            variable_key(n): _dtype_attr(n) for n in graph.nodes_of("op")
            if n.op_type in VARIABLE_OPS and variable_key(n) in handles
        }

    def body(self, path, *queues):
        self.path_q = path
        self.feed_q = dict(zip(self.feed_dtypes, queues[: len(self.feed_dtypes)]))
        self.fetch_q = dict(zip(self.fetch_dtypes, queues[len(self.feed_dtypes) :]))
        env: dict = {}
        state: dict = {}
        self.block(self.plan, env, state)
        # Every op of the iteration runs before the commit: if one fails, nothing is written.
        everything = tf.compat.v1.get_default_graph().get_operations()
        commit = self.decision()
        self.written = tuple(sorted(state))
        with tf.control_dependencies([commit, *everything]):
            for key in self.written:
                gen_resource_variable_ops.assign_variable_op(self.handles[key], state[key])
        return commit

    # -- communication ----------------------------------------------------------------------

    def decision(self):
        return gen_data_flow_ops.queue_dequeue_v2(self.path_q, [tf.int32])[0]

    def feed(self, dtype: str):
        return gen_data_flow_ops.queue_dequeue_v2(self.feed_q[dtype], [tf.as_dtype(dtype)])[0]

    def fetch(self, value) -> None:
        gen_data_flow_ops.queue_enqueue_v2(self.fetch_q[value.dtype.name], [value])

    # -- structure --------------------------------------------------------------------------

    def block(self, block: Block, env: dict, state: dict) -> None:
        for item in block:
            if type(item) is OpItem:
                self.op(self.graph.nodes[item.node], env, state)
            elif type(item) is CaseItem:
                self.case(item, env, state)
            elif item.unrolled is not None:
                self.unrolled(item, env, state)
            else:
                self.loop(item, env, state)

    def case(self, item: CaseItem, env: dict, state: dict) -> None:
        live = [b for b, cut in zip(item.branches, item.cut) if not cut]
        keys = sorted(set().union(*(self.defs(b) for b in live)) & self.read)
        written = sorted(set().union(*(self.writes(b) for b in live)))

        listed = self.listed(live)

        def branch_fn(branch: Block, cut: str | None):
            def run():
                inner, inner_state = dict(env), dict(state)
                if not cut:  # Python never selects a cut branch: it diverges first
                    self.block(branch, inner, inner_state)
                values = [self.pack(k, inner, listed) for k in keys]
                values += [self.current(v, inner_state) for v in written]
                return values or [tf.constant(0)]
            return run

        index = self.decision()
        out = tf.switch_case(index, [branch_fn(b, c) for b, c in zip(item.branches, item.cut)])
        out = [out] if not isinstance(out, (list, tuple)) else list(out)
        env.update((k, PerTrip(v) if k in listed else v) for k, v in zip(keys, out))
        state.update(zip(written, out[len(keys) :]))

    def listed(self, blocks: list[Block]) -> set:
        """The keys that are per-trip lists once ``blocks`` have run (their loops' exports)."""
        loops = {item.node for b in blocks for item in all_items(b) if type(item) is LoopItem}
        return {k for k, loop in self.per_trip.items() if loop in loops}

    def pack(self, key: tuple[int, int], env: dict, listed: set):
        """``env``'s value of ``key`` as a tensor that can cross a case or loop boundary."""
        value = env.get(key)
        if key in listed:
            return value.list if value is not None else self.empty_list(key)
        if type(value) is PerTrip:  # an inner loop's value, carried by an outer loop
            raise ProgramError(f"node {key[0]}: a value of a loop inside a loop is carried "
                               f"from one trip of the outer loop to the next")
        return value if value is not None else self.dummy(key)

    def loop(self, item: LoopItem, env: dict, state: dict) -> None:
        keys = sorted(self.defs(item.body) & self.read)
        written = sorted(self.writes(item.body))
        exports = self.exports(item)
        listed = self.listed([item.body])
        init = [self.pack(k, env, listed) for k in keys]
        init += [self.current(v, state) for v in written]
        init += [self.empty_list(k) for k in exports]

        def cond(trips, *values):
            return tf.cast(self.decision(), tf.bool)

        def body(trips, *values):
            inner, inner_state = dict(env), dict(state)
            inner.update((k, PerTrip(v) if k in listed else v) for k, v in zip(keys, values))
            inner_state.update(zip(written, values[len(keys) :]))
            lists = values[len(keys) + len(written) :]
            self.block(item.body, inner, inner_state)
            pushed = [self.push(trip_list, k, inner) for trip_list, k in zip(lists, exports)]
            return ([trips + 1] + [self.pack(k, inner, listed) for k in keys]
                    + [inner_state[v] for v in written] + pushed)

        invariants = [tf.TensorShape([])] + [tf.TensorShape(None)] * (len(keys) + len(written))
        invariants += [tf.TensorShape([])] * len(exports)
        out = tf.while_loop(cond, body, [tf.constant(0)] + init, shape_invariants=invariants)
        env.update((k, PerTrip(v) if k in listed else v) for k, v in zip(keys, out[1:]))
        state.update(zip(written, out[1 + len(keys) : 1 + len(keys) + len(written)]))
        lists = out[1 + len(keys) + len(written) :]
        env.update((k, PerTrip(trip_list)) for k, trip_list in zip(exports, lists))

    def unrolled(self, item: LoopItem, env: dict, state: dict) -> None:
        exports = self.exports(item)
        lists = [self.empty_list(k) for k in exports]
        for _ in range(item.unrolled):
            self.block(item.body, env, state)
            lists = [self.push(trip_list, k, env) for trip_list, k in zip(lists, exports)]
        env.update((k, PerTrip(trip_list)) for k, trip_list in zip(exports, lists))

    # -- values of every trip of a loop, for what reads them after it -----------------------

    def exports(self, item: LoopItem) -> list:
        return sorted(k for k, loop in self.per_trip.items() if loop == item.node)

    def empty_list(self, key: tuple[int, int]):
        dtype = tf.as_dtype(self.graph.nodes[key[0]].outputs[key[1]].dtype)
        return list_ops.empty_tensor_list(None, dtype)

    def push(self, trip_list, key: tuple[int, int], env: dict):
        value = env.get(key)
        if type(value) is PerTrip:
            raise ProgramError(f"node {key[0]}: a value of a nested loop is read after the loop "
                               f"around it")
        return list_ops.tensor_list_push_back(trip_list, self.dummy(key) if value is None
                                              else value)

    def defs(self, block: Block) -> set:
        """The (node, output) values ``block`` computes on some path."""
        nodes = (self.graph.nodes[n] for n in op_nodes(block))
        return {(node.id, k) for node in nodes for k in range(len(node.outputs))}

    def writes(self, block: Block) -> set:
        """The keys of the variables ``block`` writes on some path."""
        nodes = (self.graph.nodes[n] for n in op_nodes(block))
        return {variable_key(node) for node in nodes if node.op_type in WRITES}

    def dummy(self, key: tuple[int, int]):
        """A stand-in for a value a path did not compute (no op on that path reads it)."""
        spec: TensorSpec = self.graph.nodes[key[0]].outputs[key[1]]
        if spec.dtype in ("variant", "resource"):
            raise ProgramError(
                f"node {key[0]}: a {spec.dtype} value computed on some paths only cannot cross "
                f"a case or loop boundary"
            )
        shape = [0] * len(spec.shape) if spec.shape is not None else [0]
        return tf.zeros(shape, tf.as_dtype(spec.dtype))

    # -- ops --------------------------------------------------------------------------------

    def op(self, node: TraceNode, env: dict, state: dict) -> None:
        inputs = [self.input(node, i, env) for i in range(len(node.sources))]
        rule = _VARIABLE_RULES.get(node.op_type)
        if rule is not None:
            outputs = rule(self, node, inputs, state)
        else:
            outputs = lower(SegmentOp(node.id, node.op_type, node.attrs, (), len(node.outputs)),
                            inputs)
        for k, value in enumerate(outputs):
            env[(node.id, k)] = value
        for k in node.fetches:
            self.fetch(outputs[k])

    def input(self, node: TraceNode, i: int, env: dict):
        options = self.options[node.id][i]
        dtype = node.input_specs[i].dtype
        if not options:  # a variable
            return None
        if len(options) == 1:
            return self.source(options[0], dtype, env)
        index = self.decision()
        return tf.switch_case(index, [
            (lambda s=s: self.source(s, dtype, env)) for s in options
        ])

    def source(self, source: Source | str | Constant, dtype: str, env: dict):
        if type(source) is Constant:
            return tf.constant(source.value, tf.as_dtype(dtype))
        if source == FEED:
            return self.feed(dtype)
        key = (source.index, source.output)
        value = env[key] if key in env else self.dummy(key)
        if type(value) is PerTrip:  # Python says which trip's value
            return list_ops.tensor_list_get_item(value.list, self.decision(), tf.as_dtype(dtype))
        return value

    def current(self, key: str, state: dict):
        """The variable's value at this point of the iteration."""
        if key in state:
            return state[key]
        return gen_resource_variable_ops.read_variable_op(self.handles[key], self.dtypes[key])


@dataclass(frozen=True, slots=True)
class PerTrip:
    """After a loop, a value its body computes: a TensorList with one element per trip."""

    list: Any


def _dtype_attr(node: TraceNode):
    return tf.as_dtype(dict(node.attrs)["dtype"])


def _read(b: _Builder, node: TraceNode, inputs: list, state: dict) -> list:
    return [b.current(variable_key(node), state)]


def _assign(combine):
    def rule(b: _Builder, node: TraceNode, inputs: list, state: dict) -> list:
        key = variable_key(node)
        value = inputs[1]
        if combine is not None:
            value = combine(b.current(key, state), value)
        state[key] = value
        return []
    return rule


_VARIABLE_RULES = {
    "ReadVariableOp": _read,
    "AssignVariableOp": _assign(None),
    "AssignAddVariableOp": _assign(tf.add),
    "AssignSubVariableOp": _assign(tf.subtract),
}
