"""What the views get of a loop under ``Terra(regions=True)`` (issue 14): the TraceGraph's
``region_calls`` name every region function node (forward, backward, by call, object and
source line, with the op types it runs), its JSON carries them, the listing prints them, and
the graph view's plan draws each as one collapsed node that opens to those op types."""

import json
import re

import keras
import numpy as np
import tensorflow as tf

from terra_nb import Terra
from terra_nb.views.graph_dot import view_dot
from terra_nb.views.graph_model import plan_view

ITERATIONS = 12


def train(mode: str = "coexec") -> Terra:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4)])
    opt, loss_fn = keras.optimizers.Adam(1e-2), keras.losses.MeanSquaredError()
    rng = np.random.default_rng(0)
    xs = rng.random((ITERATIONS, 32, 8), dtype=np.float32)
    ys = rng.random((ITERATIONS, 32, 4), dtype=np.float32)
    # the Keras calls' regions only: a tape's G, where it forms, holds the B calls named here
    with Terra(mode=mode, regions="calls") as terra:
        for i in terra.loop(range(ITERATIONS)):
            x, y = tf.constant(xs[i]), tf.constant(ys[i])
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
    return terra


def test_graph_names_the_region_functions():
    terra = train()
    rows = {r.name: r for r in terra.regions.rows}
    assert {r.state for r in rows.values()} == {"formed"}, str(terra.regions)
    g = terra.graph
    assert g is terra.graph  # the same object while nothing changed (the dashboard relies on it)
    by = {(c.name, c.kind): c for c in g.region_calls}
    fwd = by[("Sequential.__call__", "forward")]
    assert fwd.call == "model(x)" and "loss = loss_fn(y, model(x))" in fwd.source
    assert len(fwd.ops) == rows["Sequential.__call__"].ops
    assert fwd.ops == ("ReadVariableOp", "MatMul", "ReadVariableOp", "BiasAdd", "Relu",
                       "ReadVariableOp", "MatMul", "ReadVariableOp", "BiasAdd")
    assert fwd.label == "model(x): Sequential · 9 ops"
    bwd = by[("Sequential.__call__", "backward")]
    assert {"ReluGrad", "BiasAddGrad", "MatMul"} <= set(bwd.ops) and bwd.label.startswith("∇ ")
    adam = by[("Adam.apply_gradients", "forward")]
    assert len(adam.ops) == rows["Adam.apply_gradients"].ops
    assert adam.label == f"Adam.apply_gradients · {len(adam.ops)} ops"
    assert ("MeanSquaredError.__call__", "backward") in by
    present = {n.op_type for n in g.nodes}
    assert all(c.op_type in present for c in g.region_calls)  # only functions the graph holds
    exported = json.loads(g.to_json())["region_calls"]
    assert exported[fwd.op_type]["ops"] == list(fwd.ops)
    assert exported[bwd.op_type]["kind"] == "backward"
    listing = repr(g)
    assert "region[model(x): Sequential · 9 ops]" in listing
    assert "__inference_region" not in listing


def test_view_plan_collapses_a_region_and_opens_it_to_its_ops():
    g = train(mode="trace").graph
    fwd = next(c for c in g.region_calls if c.kind == "forward" and c.name.startswith("Seq"))
    node = next(n for n in g.nodes if n.op_type == fwd.op_type)
    plan = plan_view(g)
    key = plan.key_of[node.id]
    assert key == f"r{node.id}" and plan.groups[key]["collapsed"] is True
    assert f'{key} [label="[+] ▶ model(x): Sequential · 9 ops' in view_dot(g, plan)
    opened = plan_view(g, toggled=[key])
    dot = view_dot(g, opened)
    assert f"subgraph cluster_{key} {{" in dot
    inner = re.findall(rf"^\s*{key}_\d+ \[label=\"?(\w+)", dot, re.M)
    assert tuple(inner) == fwd.ops


def test_the_timeline_marks_region_calls():
    """Each call a region answered is a ``region`` span of the PythonRunner, labelled by the
    call: as many as the rows' hits, drawn in the timeline picture and named in the Chrome
    trace."""
    from terra_nb.timeline import to_chrome_trace
    from terra_nb.views.timeline_svg import timeline_svg

    terra = train()
    hits = {r.name: r.hits for r in terra.regions.rows if r.hits}
    assert set(hits) >= {"Sequential.__call__", "Adam.apply_gradients"}, terra.regions
    marks = [s for s in terra.spans if s.kind == "region"]
    assert {s.label for s in marks} == set(hits)
    for name, count in hits.items():
        assert sum(s.label == name for s in marks) == count
    assert all(s.runner == "python" and s.t_end >= s.t_start for s in marks)
    coexec = {s.iteration for s in terra.stats if s.phase == "coexec"}
    assert coexec and coexec <= {s.iteration for s in marks}  # every co-executed one has some
    svg = timeline_svg(terra.spans, terra.stats, window=ITERATIONS)
    assert svg.count("terra-region") == len(marks)
    assert "region call Sequential.__call__ · iteration" in svg
    events = json.loads(to_chrome_trace(terra.spans))["traceEvents"]
    assert sum(e["name"] == "region call Adam.apply_gradients" for e in events) == \
        hits["Adam.apply_gradients"]
