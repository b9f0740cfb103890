"""Lowering the whole program: its plan (control_flow.py) -> the body of one ``tf.function``.

Each op node is lowered by ``lower`` (lower.py), as in a segment; around the ops this builds a
``tf.switch_case`` per case item, a ``tf.while_loop`` (or an unrolled body) per loop item, the
reads from the path and feed queues and the writes to the fetch queues, and the variables'
local values, assigned at the commit.

A fetched value is enqueued only once every op issued before it has run (an *order token*
threaded through the program, its cases and its loops' trips): the program is a dataflow graph,
and without it a value could reach Python ahead of an earlier op that then fails, a value eager
never computed (eager raises at the failing op). Segments have the same order: a segment's
values come back once all of its ops ran.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops, gen_resource_variable_ops, list_ops

from ..trace.records import Source, TensorSpec
from ..trace.tracegraph import TraceGraph, TraceNode
from .control_flow import Block, CaseItem, LoopItem, OpItem, ProgramError, op_nodes
from .lower import SegmentOp, lower
from .program_constants import Constant
from .program_wiring import FEED, VARIABLE_OPS, WRITES, all_items, per_trip_values, variable_key


class ProgramBuilder:
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
        self.follow(tf.constant(0))
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
        with tf.control_dependencies([self.ran_so_far()]):
            gen_data_flow_ops.queue_enqueue_v2(self.fetch_q[value.dtype.name], [value])

    # -- issue order: a fetch waits for the ops issued before it ----------------------------

    def follow(self, token) -> None:
        """The ops lowered from now on in the current graph (a case's branch, a loop's body or
        the program) come after ``token``: it has a value once every op before them has run."""
        self.token = token
        self.mark = len(tf.compat.v1.get_default_graph().get_operations())

    def ran_so_far(self):
        """A token that has a value once every op lowered so far has run: those of the current
        graph since ``follow``, and through the token followed, those before them."""
        ops = tf.compat.v1.get_default_graph().get_operations()[self.mark :]
        # a captured outer value's placeholder is no op that runs here (the token covers it)
        with tf.control_dependencies([op for op in ops if op.type != "Placeholder"]):
            token = tf.identity(self.token)
        self.follow(token)
        return token

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
        index = self.decision()
        before = self.ran_so_far()

        def branch_fn(branch: Block, cut: str | None):
            def run():
                inner, inner_state = dict(env), dict(state)
                self.follow(before)
                if not cut:  # Python never selects a cut branch: it diverges first
                    self.block(branch, inner, inner_state)
                values = [self.pack(k, inner, listed) for k in keys]
                values += [self.current(v, inner_state) for v in written]
                return values + [self.ran_so_far()]  # the branch's ops ran: the order goes on
            return run

        out = tf.switch_case(index, [branch_fn(b, c) for b, c in zip(item.branches, item.cut)])
        out = [out] if not isinstance(out, (list, tuple)) else list(out)
        env.update((k, PerTrip(v) if k in listed else v) for k, v in zip(keys, out))
        state.update(zip(written, out[len(keys) : -1]))
        self.follow(out[-1])

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
        init += [self.ran_so_far()]  # the order token: carried from trip to trip

        def cond(trips, *values):
            return tf.cast(self.decision(), tf.bool)

        def body(trips, *values):
            inner, inner_state = dict(env), dict(state)
            inner.update((k, PerTrip(v) if k in listed else v) for k, v in zip(keys, values))
            inner_state.update(zip(written, values[len(keys) :]))
            lists = values[len(keys) + len(written) : -1]
            self.follow(values[-1])  # the trips before this one ran
            self.block(item.body, inner, inner_state)
            pushed = [self.push(trip_list, k, inner) for trip_list, k in zip(lists, exports)]
            return ([trips + 1] + [self.pack(k, inner, listed) for k in keys]
                    + [inner_state[v] for v in written] + pushed + [self.ran_so_far()])

        invariants = [tf.TensorShape([])] + [tf.TensorShape(None)] * (len(keys) + len(written))
        invariants += [tf.TensorShape([])] * (len(exports) + 1)
        out = tf.while_loop(cond, body, [tf.constant(0)] + init, shape_invariants=invariants)
        env.update((k, PerTrip(v) if k in listed else v) for k, v in zip(keys, out[1:]))
        state.update(zip(written, out[1 + len(keys) : 1 + len(keys) + len(written)]))
        lists = out[1 + len(keys) + len(written) : -1]
        env.update((k, PerTrip(trip_list)) for k, trip_list in zip(exports, lists))
        self.follow(out[-1])

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
        rank = None if spec.shape is None else len(spec.shape)
        zeros = tf.zeros([0] if rank is None else [0] * rank, tf.as_dtype(spec.dtype))
        # of no static shape: an op in a nested branch no run takes with it may read it, and a
        # graph checks shapes on every branch (a MatMul of [0, 0] by [16, 1] fails to build)
        return tf.compat.v1.placeholder_with_default(zeros, None if rank is None else [None] * rank)

    # -- ops --------------------------------------------------------------------------------

    def op(self, node: TraceNode, env: dict, state: dict) -> None:
        inputs = [self.input(node, i, env) for i in range(len(node.sources))]
        rule = _VARIABLE_RULES.get(node.op_type)
        with tf.device(node.device) if node.device else contextlib.nullcontext():
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


def _read(b: ProgramBuilder, node: TraceNode, inputs: list, state: dict) -> list:
    return [b.current(variable_key(node), state)]


def _assign(combine):
    def rule(b: ProgramBuilder, node: TraceNode, inputs: list, state: dict) -> list:
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
