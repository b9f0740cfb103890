"""The timeline of real loops tells what ran (issue 40, item 2): every span lies in its
iteration's column of time and each runner's numbers add up to at most the column; GraphRunner
spans name their segment, op count and compiled or not, compiles are spans of their own (also in
the Chrome trace); an iteration in which nothing ran on the graph is not called co-executed."""

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

import terra_nb  # noqa: E402
from terra_nb.timeline import columns, to_chrome_trace  # noqa: E402
from terra_nb.views.timeline_window import column_times  # noqa: E402

EPS = 1e-9


def _quickstart(compile_after: int):
    """The quickstart's loop: a Keras model, SGD, a branch on the loss; regions on."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    data = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)] * 8
    with terra_nb.Terra(compile_after=compile_after) as terra:
        for xb, yb in terra.loop(data):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb) - yb))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            if float(loss) < 7.0:
                opt.learning_rate.assign(0.02)
    return terra


@pytest.fixture(scope="module")
def quickstart():
    """Segments compiled on their first run (whether the default policy compiles within 32
    iterations depends on the machine's speed)."""
    return _quickstart(compile_after=1)


def test_every_span_lies_in_its_iterations_column(quickstart):
    stats, spans = quickstart.stats, quickstart.spans
    cols = columns(stats, spans)
    for s in spans:
        a, b = cols[s.iteration]
        assert a - EPS <= s.t_start <= s.t_end <= b + EPS, s


def test_each_runners_numbers_add_up_to_the_column(quickstart):
    stats, spans = quickstart.stats, quickstart.spans
    for s, col in zip(stats, columns(stats, spans)):
        t = column_times(s, col, spans)
        assert t["exec"] + t["stall"] + t["views"] <= t["wall"] + EPS
        graph = t["graph_exec"] + t["graph_compile"] + t["graph_stall"]
        assert graph <= t["wall"] + EPS, (s.iteration, t)
        # the statistics say the same as the spans
        assert s.graph_exec == pytest.approx(t["graph_exec"], abs=1e-9)
        assert s.graph_stall == pytest.approx(t["graph_stall"], abs=1e-9)
        assert s.graph_compile == pytest.approx(t["graph_compile"], abs=1e-9)


def test_graph_spans_name_their_segment_and_compiles_are_spans(quickstart):
    graph = [s for s in quickstart.spans if s.runner == "graph" and s.kind in ("exec", "compile")]
    assert graph
    for s in graph:
        assert s.label.startswith("segment s") and s.ops > 0 and s.compiled is not None, s
    compiles = [s for s in graph if s.kind == "compile"]
    assert compiles and all(s.compiled for s in compiles)
    assert any("region_Sequential" in s.label for s in graph)  # a region's call, by its region
    names = {e["name"] for e in json.loads(to_chrome_trace(quickstart.spans))["traceEvents"]}
    assert any(n.startswith("compile segment s") for n in names)
    assert any(n.startswith("segment s") and n.endswith("· compiled") for n in names)


def test_segments_not_compiled_yet_say_op_by_op():
    terra = _quickstart(compile_after=1000)
    graph = [s for s in terra.spans if s.runner == "graph" and s.kind == "exec"]
    assert graph and all(s.compiled is False for s in graph)
    names = {e["name"] for e in json.loads(to_chrome_trace(terra.spans))["traceEvents"]}
    assert any(n.startswith("segment s") and n.endswith("· op by op") for n in names)


def test_an_iteration_with_no_graph_work_is_not_coexec():
    """Small ops on real values run in Python: nothing for the graph, so the phase says eager,
    and why."""
    with terra_nb.Terra() as terra:
        total = 0.0
        for i in terra.loop(range(8)):
            total += float(tf.reduce_sum(tf.constant([1.0, 2.0]) * i))
    phases = [s.phase for s in terra.stats]
    assert "coexec" not in phases and phases[-1] == "eager", phases
    assert terra.stats[-1].why.startswith("no graph work: every op ran on real values")
    assert not [s for s in terra.spans if s.runner == "graph" and s.kind == "exec"]


def test_the_timeline_tooltip_says_why_an_iteration_did_not_co_execute(quickstart):
    from terra_nb.views.timeline_svg import iteration_tip

    stats, spans = quickstart.stats, quickstart.spans
    cols = columns(stats, spans)
    for s, col in zip(stats, cols):
        if s.phase != "coexec":
            assert s.why and f"iteration {s.iteration}: {s.phase} — {s.why}" in iteration_tip(
                s, col, spans)
    assert any(s.why.startswith("fallback: new op or new program location at "
                                "AssignVariableOp") for s in stats)
    assert any(s.why.startswith("regions forming: run for real for ") for s in stats)
