"""The reference interpreter: eval_graph on the path an iteration took gives eager's values.

Programs run eagerly through ``Traced.loop``, which records each iteration as Terra's tracing
does (the recorder, then GraphBuilder) and also keeps what eager computed: every op's input and
output values and the variables before and after the iteration. ``eval_graph`` on the iteration's
path, started from the variables as they were before it, must give the same op outputs and leave
the variables as eager left them: bit for bit, as it runs the same kernels on the same inputs.
"""

import contextlib
import io
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf
from programs import branch_on_loss, numpy_on_loss, rnn_variable_length

from terra_nb import capture
from terra_nb.capture.attrs import split_call
from terra_nb.capture.location import LocationTable
from terra_nb.capture.recorder import TraceRecorder
from terra_nb.capture.signature import op_type_of
from terra_nb.coexec.eval_graph import eval_graph, iteration_path, latest_outputs, path_segment
from terra_nb.coexec.lower import compile_segment
from terra_nb.errors import TerraError
from terra_nb.trace.merge import GraphBuilder
from terra_nb.trace.records import Trace
from terra_nb.trace.tracegraph import TraceGraph


def _flat(value) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    return [value]


class _KeepValues:
    """A capture sink that hands every op to the recorder and keeps its inputs and outputs."""

    intercepts = False

    def __init__(self, recorder: TraceRecorder) -> None:
        self.recorder = recorder
        self.calls: list[tuple[list, list]] = []

    def on_op(self, op_name, args, attrs, outputs, frame):
        self.recorder.on_op(op_name, args, attrs, outputs, frame)
        inputs, _ = split_call(op_type_of(op_name), args, attrs)
        self.calls.append((list(inputs), _flat(outputs)))

    def on_fetch(self, tensor):
        self.recorder.on_fetch(tensor)

    def on_fast_fallback(self, op_name, args, frame):
        self.recorder.on_fast_fallback(op_name, args, frame)


@dataclass
class Iteration:
    trace: Trace
    calls: list[tuple[list, list]]  # per op: input values, output values (eager's)
    before: dict[str, np.ndarray]  # variable key -> value before the iteration
    after: dict[str, np.ndarray]


class Traced:
    """Runs ``program(self.loop)`` eagerly, tracing every iteration into one TraceGraph."""

    def __init__(self, program) -> None:
        locations = LocationTable()
        self.recorder = TraceRecorder(locations)
        self.builder = GraphBuilder(locations.loop_text)
        self.iterations: list[Iteration] = []
        self._variables: list[tf.Variable] = []
        with tf.variable_creator_scope(self._created), contextlib.redirect_stdout(io.StringIO()):
            self.values, _ = program(self.loop)
        self.graph = self.builder.finish()

    def _created(self, next_creator, **kwargs):
        variable = next_creator(**kwargs)
        self._variables.append(variable)
        return variable

    def _snapshot(self) -> dict[str, np.ndarray]:
        return {f"v{v.handle._id}": v.numpy().copy() for v in self._variables}

    def loop(self, iterable):
        for item in iterable:
            before = self._snapshot()
            sink = _KeepValues(self.recorder)
            self.recorder.begin(sys._getframe(1))
            with capture.capturing(sink):
                yield item
            trace = self.recorder.finish(len(self.iterations))
            self.builder.merge(trace)
            self.iterations.append(Iteration(trace, sink.calls, before, self._snapshot()))


def feeds_of(it: Iteration, walk) -> dict:
    """Eager's value of every input the iteration took from outside its ops (fed or carried)."""
    op_at = {p: j for j, p in enumerate(walk.positions)}
    return {(p, i): it.calls[op_at[p]][0][i] for p, i in [*walk.fed, *walk.carried]}


def fresh_variables(it: Iteration) -> dict[str, tf.Variable]:
    """New variables holding the values eager's variables had before the iteration."""
    return {key: tf.Variable(value) for key, value in it.before.items()}


def assert_outputs_equal_eager(it: Iteration, walk, outputs) -> int:
    """Every numeric output of every op equals eager's; returns how many were compared."""
    compared = 0
    for j, p in enumerate(walk.positions):
        eager = it.calls[j][1]
        assert len(outputs[p]) == len(eager), (j, it.trace.ops[j])
        for k, (ours, theirs) in enumerate(zip(outputs[p], eager)):
            if theirs.dtype in (tf.resource, tf.variant):
                continue
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy(),
                                          err_msg=f"op {j} output {k}: {it.trace.ops[j]}")
            compared += 1
    return compared


def assert_variables_equal_eager(it: Iteration, variables: dict[str, tf.Variable]) -> None:
    changed = [key for key in variables if not np.array_equal(it.before[key], it.after[key])]
    assert changed, "the iteration changed no variable: the comparison would prove nothing"
    for key, variable in variables.items():
        np.testing.assert_array_equal(variable.numpy(), it.after[key], err_msg=key)


def evaluate(traced: Traced, index: int, exact_reads: bool = True):
    """eval_graph on the path iteration ``index`` took; the walk, outputs and variables."""
    it = traced.iterations[index]
    walk = iteration_path(traced.graph, it.trace)
    variables = fresh_variables(it)
    reads = walk.reads if exact_reads else None
    outputs = eval_graph(traced.graph, walk.path, feeds_of(it, walk), variables, reads=reads)
    return it, walk, outputs, variables


@pytest.fixture(scope="module")
def mlp_adam():
    return Traced(numpy_on_loss)


@pytest.mark.parametrize("exact_reads", [True, False], ids=["reads", "graph-sources"])
@pytest.mark.parametrize("index", [1, 4])
def test_mlp_with_adam_iteration_equals_eager(mlp_adam, index, exact_reads):
    """A straight-line path (forward, backward, Adam): without ``reads`` every input has one
    source in the graph, so the path alone gives eager's values."""
    it, walk, outputs, variables = evaluate(mlp_adam, index, exact_reads)
    assert len(walk.positions) > 100 and not mlp_adam.graph.nodes_of("loop")
    assert assert_outputs_equal_eager(it, walk, outputs) > 100
    assert_variables_equal_eager(it, variables)


def test_first_iteration_that_makes_the_optimizer_variables_equals_eager(mlp_adam):
    """Iteration 0 creates Adam's slots (VarHandleOp nodes) and writes them through op outputs."""
    it, walk, outputs, variables = evaluate(mlp_adam, 0)
    made = [op for op in it.trace.ops if op.op_type == "VarHandleOp"]
    assert made
    assert_outputs_equal_eager(it, walk, outputs)
    assert_variables_equal_eager(it, variables)


def test_each_side_of_a_data_dependent_branch_equals_eager():
    traced = Traced(branch_on_loss)
    taken = traced.values
    shrink, keep = taken.index("shrink"), taken.index("keep")
    paths = set()
    for index in (shrink, keep, len(taken) - 1):
        it, walk, outputs, variables = evaluate(traced, index)
        paths.add(walk.path)
        assert_outputs_equal_eager(it, walk, outputs)
        assert_variables_equal_eager(it, variables)
    assert len(paths) >= 2  # both sides of the branch were evaluated
    assert traced.graph.branch_points


@pytest.fixture(scope="module")
def rnn():
    return Traced(rnn_variable_length)


def test_loop_node_run_for_each_trip_count_equals_eager(rnn):
    (loop,) = rnn.graph.nodes_of("loop")
    start = loop.body[0]
    trips = set()
    for index in (1, 2, 3):  # 5, 2 and 5 trips
        it, walk, outputs, variables = evaluate(rnn, index)
        trips.add(walk.path.count(start))
        assert_outputs_equal_eager(it, walk, outputs)
        assert_variables_equal_eager(it, variables)
    assert trips == {2, 5}


def test_which_trip_a_value_comes_from_needs_reads(rnn):
    """In the loop, the state the cell reads is the zeros made before it or the previous trip's
    output; after it, the graph does not say which trip's value a node read (the backward pass
    reads every trip's). Where the path does not tell, eval_graph refuses to guess."""
    it = rnn.iterations[1]
    walk = iteration_path(rnn.graph, it.trace)
    (loop,) = rnn.graph.nodes_of("loop")
    feeds, variables = feeds_of(it, walk), fresh_variables(it)
    with pytest.raises(TerraError, match=r"input \d of node \d+ \(MatMul at programs.py:\d+\) at "
                                         r"path position \d+ read node \d+ output 0, node \d+ "
                                         r"output 0 in different iterations; pass reads\["):
        eval_graph(rnn.graph, walk.path, feeds, variables)
    in_loop = {key: read for key, read in walk.reads.items()
               if rnn.graph.nodes[walk.path[key[0]]].parent == loop.id}
    with pytest.raises(TerraError, match=rf"ran in each of 5 trips of loop node {loop.id}: the "
                                         rf"graph does not say which trip's value; pass reads"):
        eval_graph(rnn.graph, walk.path, feeds, variables, reads=in_loop)


def test_an_op_in_a_loop_reads_the_latest_run_of_its_source(rnn):
    """Given ``reads`` only where the graph is ambiguous, every other input reads the latest run
    of its one source: in trip 3, the slice and the state of trip 3, not of trip 1."""
    graph = rnn.graph
    (loop,) = graph.nodes_of("loop")
    it = rnn.iterations[1]
    walk = iteration_path(graph, it.trace)

    def ambiguous(p, i):
        node = graph.nodes[walk.path[p]]
        from_loop = any(graph.nodes[s.index].parent == loop.id for s in node.sources[i])
        return len(node.sources[i]) > 1 or from_loop and node.parent != loop.id

    reads = {key: read for key, read in walk.reads.items() if ambiguous(*key)}
    in_loop = [(p, i) for p, i in walk.reads
               if (p, i) not in reads and graph.nodes[walk.path[p]].parent == loop.id]
    assert len(in_loop) > 20  # body ops reading body ops: by default, from the same trip
    variables = fresh_variables(it)
    outputs = eval_graph(graph, walk.path, feeds_of(it, walk), variables, reads=reads)
    assert_outputs_equal_eager(it, walk, outputs)
    assert_variables_equal_eager(it, variables)


def python_values_and_carry(loop):
    """Feeds numpy arrays and Python floats and ints; ``h`` is carried from iteration to
    iteration (fed as an eager tensor made outside the loop in the first)."""
    w = tf.Variable([1.0, -0.5, 0.25])
    h = tf.constant([0.5, -1.0, 2.0])
    xs = np.linspace(-1.0, 1.0, 15, dtype="float32").reshape(5, 3)
    out = []
    for i, x in enumerate(loop(xs)):
        h = tf.tanh(h * 0.9 + w * x)
        w.assign_sub(h * 0.01 * (i + 1))
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


@pytest.fixture(scope="module")
def carry():
    return Traced(python_values_and_carry)


def test_python_and_numpy_feeds_equal_eager(carry):
    it, walk, outputs, variables = evaluate(carry, 2)
    kinds = {s.detail for op in it.trace.ops for s in op.inputs if s.kind == "feed"}
    assert {"python", "numpy"} <= kinds and walk.carried
    assert_outputs_equal_eager(it, walk, outputs)
    assert_variables_equal_eager(it, variables)


def test_carried_value_by_node_equals_eager(carry):
    """The carry source names a node of the previous iteration: ``carried[(node, output)]``."""
    it = carry.iterations[2]
    walk = iteration_path(carry.graph, it.trace)
    (((p, i), (j, k)),) = walk.carried.items()
    previous = iteration_path(carry.graph, carry.iterations[1].trace)
    node = previous.path[previous.positions[j]]
    feeds = {key: value for key, value in feeds_of(it, walk).items() if key != (p, i)}
    with pytest.raises(TerraError, match=rf"missing feed: input {i} of node {walk.path[p]} "):
        eval_graph(carry.graph, walk.path, feeds, fresh_variables(it))
    variables = fresh_variables(it)
    carried = {(node, k): carry.iterations[1].calls[j][1][k]}
    outputs = eval_graph(carry.graph, walk.path, feeds, variables, carried=carried)
    assert_outputs_equal_eager(it, walk, outputs)
    assert_variables_equal_eager(it, variables)


def test_iterations_chained_through_carried_outputs_equal_eager(carry):
    """Iteration 3 evaluated from iteration 2's evaluation (its outputs carried, its variables
    continued) equals eager's iteration 3."""
    _, walk2, outputs2, variables = evaluate(carry, 2)
    it = carry.iterations[3]
    walk = iteration_path(carry.graph, it.trace)
    feeds = {key: value for key, value in feeds_of(it, walk).items() if key not in walk.carried}
    carried = latest_outputs(walk2.path, outputs2)
    outputs = eval_graph(carry.graph, walk.path, feeds, variables, carried=carried)
    assert_outputs_equal_eager(it, walk, outputs)
    assert_variables_equal_eager(it, variables)


@pytest.mark.parametrize("name", ["mlp_adam", "rnn"])
def test_a_trace_graph_read_back_from_json_runs_as_eager(name, request):
    """The exported TraceGraph holds everything a path needs to run (op types, attrs, sources)."""
    traced = request.getfixturevalue(name)
    graph = TraceGraph.from_json(traced.graph.to_json())
    it = traced.iterations[2]
    walk = iteration_path(graph, it.trace)
    variables = fresh_variables(it)
    outputs = eval_graph(graph, walk.path, feeds_of(it, walk), variables, reads=walk.reads)
    assert assert_outputs_equal_eager(it, walk, outputs) > 50
    assert_variables_equal_eager(it, variables)


def test_compiled_segment_of_a_path_equals_eval_graph(mlp_adam):
    """Lowering against the oracle: the path's ops compiled as one tf.function (the engine's
    compile_segment) give eval_graph's values and variable updates."""
    it = mlp_adam.iterations[3]
    walk = iteration_path(mlp_adam.graph, it.trace)
    feeds = feeds_of(it, walk)
    expected_vars = fresh_variables(it)
    expected = eval_graph(mlp_adam.graph, walk.path, feeds, expected_vars, reads=walk.reads)
    variables = fresh_variables(it)
    built, args, handles = path_segment(mlp_adam.graph, walk.path, feeds, variables,
                                        reads=walk.reads)
    function = compile_segment(built.segment, handles)
    values = function(*args)[: len(built.segment.returns)]
    assert len(values) > 100
    for (s, k), value in zip(built.segment.returns, values):
        reference = expected[built.positions[s]][k]
        if reference.dtype != tf.resource:
            np.testing.assert_allclose(value.numpy(), reference.numpy(), rtol=1e-6, atol=1e-7)
    for key, variable in variables.items():
        np.testing.assert_allclose(variable.numpy(), expected_vars[key].numpy(), rtol=1e-6)
    assert_variables_equal_eager(it, variables)


# -- paths that are not paths of the graph ------------------------------------------------------


@pytest.fixture(scope="module")
def small(carry):
    it = carry.iterations[2]
    walk = iteration_path(carry.graph, it.trace)
    return carry.graph, it, walk, feeds_of(it, walk)


def test_path_not_starting_at_the_start_node_raises(small):
    graph, it, walk, feeds = small
    with pytest.raises(TerraError, match="starts at the start node 0, this one starts at"):
        eval_graph(graph, walk.path[1:], feeds, fresh_variables(it))


def test_step_that_is_not_an_edge_raises_naming_both_nodes(small):
    graph, it, walk, feeds = small
    path = list(walk.path)
    skipped = path.pop(2)  # the second op: the first is followed by the third
    assert graph.nodes[skipped].kind == "op"
    with pytest.raises(TerraError, match=rf"position 2: node {path[2]} \(\w+ at .*\) does not "
                                         rf"follow node {path[1]} \(\w+ at "):
        eval_graph(graph, path, feeds, fresh_variables(it))


def test_path_stopping_before_the_end_node_raises(small):
    graph, it, walk, feeds = small
    with pytest.raises(TerraError, match="a path ends at the end node 1"):
        eval_graph(graph, walk.path[:-1], feeds, fresh_variables(it))


def test_missing_python_feed_raises_naming_the_node(small):
    graph, it, walk, feeds = small
    feeds = dict(feeds)
    op_at = {p: j for j, p in enumerate(walk.positions)}
    p, i = next((p, i) for p, i in walk.fed if it.trace.ops[op_at[p]].inputs[i].detail == "python")
    node = graph.nodes[walk.path[p]]
    del feeds[(p, i)]
    with pytest.raises(TerraError, match=rf"missing feed: input {i} of node {node.id} "
                                         rf"\({node.op_type} at {node.location}\).*"
                                         rf"pass feeds\[\({p}, {i}\)\]"):
        eval_graph(graph, walk.path, feeds, fresh_variables(it))


def test_missing_variable_raises_naming_its_key(small):
    graph, it, walk, feeds = small
    with pytest.raises(TerraError, match=r"missing value: input 0 of node \d+ \(ReadVariableOp "
                                         r"at .*pass variables\['v\d+'\]$"):
        eval_graph(graph, walk.path, feeds, {})


def test_read_the_graph_never_saw_raises(small):
    graph, it, walk, feeds = small
    (p, i), (_, k) = max(walk.reads.items())  # the first op (position 1) is not its source
    with pytest.raises(TerraError, match=rf"reads\[\({p}, {i}\)\] = \(1, {k}\): .*never read"):
        eval_graph(graph, walk.path, feeds, fresh_variables(it), reads={(p, i): (1, k)})


def test_loop_node_not_followed_by_its_body_raises(rnn):
    it = rnn.iterations[1]
    walk = iteration_path(rnn.graph, it.trace)
    (loop,) = rnn.graph.nodes_of("loop")
    at = walk.path.index(loop.id)
    path = walk.path[: at + 1] + walk.path[at + 2 :]  # the first trip's body start left out
    with pytest.raises(TerraError, match=rf"position {at + 1}: node \d+ .* does not follow node "
                                         rf"{loop.id} \(loop\); after it come {loop.body[0]}$"):
        eval_graph(rnn.graph, path, feeds_of(it, walk), fresh_variables(it), reads=walk.reads)


def test_feed_where_the_graph_never_fed_and_misplaced_keys_raise(small):
    graph, it, walk, feeds = small
    (p, i), _ = max(walk.reads.items())
    with pytest.raises(TerraError, match=rf"feeds\[\({p}, {i}\)\]: input {i} of node "
                                         rf"{walk.path[p]} .* always read an op's output"):
        eval_graph(graph, walk.path, {**feeds, (p, i): 1.0}, fresh_variables(it))
    with pytest.raises(TerraError, match=r"feeds\[\(0, 0\)\]: keys are \(path position, input "
                                         r"index\) of an op on the path; position 0 holds node 0"):
        eval_graph(graph, walk.path, {**feeds, (0, 0): 1.0}, fresh_variables(it))
