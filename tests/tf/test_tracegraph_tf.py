"""TraceGraphs built from real TensorFlow programs run under Terra(mode="trace")."""

import keras
import numpy as np
import tensorflow as tf

from terra_nb import Terra, check_graph


def op_types(graph, parent=None):
    return [
        n.op_type for n in graph.nodes if n.kind == "op" and (parent is None or n.parent == parent)
    ]


def test_figure3_branch_merges_back_and_loop_node():
    """The paper's Figure 3: if/else with different ops, then a loop; two traces."""
    w = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    x = tf.constant([[1.0, 1.0]])
    with Terra(mode="trace") as terra:
        for i in terra.loop(range(2)):
            if i == 0:
                y = tf.matmul(x, w)
            else:
                y = tf.nn.relu(tf.matmul(x, w) - 3.0)
            for _ in range(3 + i):
                y = tf.tanh(y)
            float(tf.reduce_sum(y))
    g = terra.graph
    check_graph(g)
    (loop,) = g.nodes_of("loop")
    assert loop.trip_counts == (3, 4)
    assert op_types(g, loop.id) == ["Tanh"]  # both traces' loop ops merged into one body node
    (body,) = [n for n in g.nodes if n.parent == loop.id and n.kind == "op"]
    assert body.hits == 7
    (branch,) = g.branch_points
    assert g.nodes[branch].kind == "start"  # the two branches differ from the first op on
    assert g.merge_points == (loop.id,)  # and merge back at the loop
    assert op_types(g).count("MatMul") == 2
    (total,) = [n for n in g.nodes if n.op_type == "Sum"]
    assert total.fetches == (0,)


def test_nested_loops():
    x = tf.constant([1.0, 2.0])
    with Terra(mode="trace") as terra:
        for n in terra.loop([2, 3]):
            y = x
            for _ in range(n):
                for _ in range(2):
                    y = tf.sin(y)
                y = y * 0.5
    g = terra.graph
    check_graph(g)
    outer, inner = sorted(g.nodes_of("loop"), key=lambda n: n.parent)
    assert inner.parent == outer.id
    assert outer.trip_counts == (2, 3)
    assert inner.trip_counts == (2,)
    assert op_types(g, inner.id) == ["Sin"]
    assert op_types(g, outer.id) == ["Mul"]


def scale(t):
    return t * 3.0


def test_helper_called_from_two_call_sites_gives_two_nodes():
    x = tf.constant([1.0])
    with Terra(mode="trace") as terra:
        for _ in terra.loop(range(2)):
            a = scale(x)
            b = scale(a)
            float(b[0])
    g = terra.graph
    muls = [n for n in g.nodes if n.op_type == "Mul"]
    assert len(muls) == 2
    assert muls[0].location != muls[1].location or muls[0].loc != muls[1].loc
    assert [n.hits for n in muls] == [2, 2]


def test_several_ops_on_one_line_are_distinct_nodes():
    x = tf.constant([1.0])
    with Terra(mode="trace") as terra:
        for _ in terra.loop(range(2)):
            y = tf.exp(x) + tf.exp(x) * tf.exp(x)
    g = terra.graph
    exps = [n for n in g.nodes if n.op_type == "Exp"]
    assert len(exps) == 3 and len({n.loc for n in exps}) == 3
    assert len({n.location for n in exps}) == 1  # one source line
    assert not g.nodes_of("loop")
    del y


def make_model():
    return keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)]
    )


def test_keras_model_backward_and_optimizer_covered_after_warmup():
    model = make_model()
    opt = keras.optimizers.Adam(0.01)
    x = np.ones((6, 3), "float32")
    y = np.zeros((6, 1), "float32")
    with Terra(mode="trace") as terra:
        for _ in terra.loop(range(4)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            float(loss)
    g = terra.graph
    check_graph(g)
    types = set(op_types(g))
    assert {"MatMul", "BiasAdd", "Relu"} <= types  # inside the Keras model
    assert {"ReluGrad", "BiasAddGrad"} <= types  # the backward pass
    assert "AssignSubVariableOp" in types  # the optimizer update
    covered = [s.covered for s in terra.stats]
    assert covered[0] is False  # first iteration builds the optimizer slots
    assert covered[-2:] == [True, True]
    # an optimizer loops over variables inside Keras: that is library code, not a user loop
    assert not g.nodes_of("loop")


def test_rnn_over_variable_length_sequences_is_one_loop_node():
    cell = keras.layers.SimpleRNNCell(4)
    cell.build((None, 2))
    with Terra(mode="trace") as terra:
        for length in terra.loop([3, 5, 2]):
            seq = tf.ones((1, length, 2))
            h = [tf.zeros((1, 4))]
            for t in range(length):
                _, h = cell(seq[:, t, :], h)
    g = terra.graph
    check_graph(g)
    (loop,) = g.nodes_of("loop")
    assert loop.trip_counts == (2, 3, 5)
    body_types = op_types(g, loop.id)
    assert "MatMul" in body_types and "Tanh" in body_types
    # the cell's ops merged over every step of every sequence; slicing `seq` (whose shape
    # differs per sequence) gives one node per input shape
    body = [n for n in g.nodes if n.parent == loop.id and n.kind == "op"]
    hits = {n.op_type: n.hits for n in body if n.op_type != "StridedSlice"}
    assert set(hits.values()) == {10}
    slices = sorted(n.hits for n in body if n.op_type == "StridedSlice")
    assert slices == [2, 3, 5]
