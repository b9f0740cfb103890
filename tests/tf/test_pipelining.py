"""How co-execution hands work to the GraphRunner: early, and without extra values.

Each test compares against eager and also checks the scheduling property it is about, which the
results alone cannot show (a late or bloated segment computes the same numbers, only slower), and
what ran (what_ran.py): which iterations co-executed, in segments, and where a test is about a
Python loop in the body, that the co-executed iterations ran it for their own trip counts.
"""

import gc

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted, plan_of, ran_at, watch

from terra_nb import Terra
from terra_nb.capture.placeholder import Placeholder


def _setup():
    return tf.Variable(tf.ones((4, 4))), tf.Variable(tf.fill((4, 4), 0.5))


def _run(body, loop, n=8):
    v, w = _setup()
    out = [body(v, w) for _ in loop(range(n))]
    return out, v.numpy().tolist()


@pytest.mark.parametrize("mode", ["coexec", "lazy"])
def test_a_value_read_every_iteration_is_handed_to_the_graph_when_issued(mode):
    submitted = []

    def body(v, w):
        loss = tf.reduce_sum(tf.matmul(v * 1.0, w))
        v.assign_add(tf.ones((4, 4)) * 0.01)  # more work after the value Python will read
        if type(loss) is Placeholder:
            submitted.append(loss.item is not None)  # already on its way to the GraphRunner?
        return float(loss)

    plain = _run(body, lambda it: it)
    submitted.clear()
    with Terra(mode=mode) as terra:
        co = _run(body, terra.loop)
    assert co == plain
    assert "coexec" in [s.phase for s in terra.stats]
    assert_coexecuted(terra, last=6)  # every iteration after the two traced ones
    # coexec: from the second co-executed iteration on, the loss left with the ops that make it;
    # lazy (LazyTensor) runs nothing before Python asks.
    assert submitted[1:] and all(submitted[1:]) if mode == "coexec" else not any(submitted)


def test_values_nobody_holds_do_not_leave_the_graph():
    def step(v, w):
        h = v * 2.0
        y = h * w  # a variable input: the fast path refuses, the slow path runs it
        w.assign(y * 0.5 + 0.25)

    def body(v, w):
        step(v, w)  # h and y die with step's frame, before the iteration's ops are flushed
        return None

    plain = _run(body, lambda it: it)
    with Terra(mode="coexec") as terra:
        co = _run(body, terra.loop)
    assert co == plain
    assert_coexecuted(terra, last=6)
    assert terra.programs, "no segment ran"
    assert all(not segment.returns for segment in terra.programs), [
        str(s) for s in terra.programs
    ]


def test_only_ops_with_side_effects_wait_for_every_earlier_op():
    from terra_nb.coexec.lower import Segment, SegmentOp, compile_segment

    f32, mul = (("dtype", tf.float32),), (("T", tf.float32),)
    v, w = _setup()
    segment = Segment(
        ops=(
            SegmentOp(0, "ReadVariableOp", f32, (("var", 1, 0),), 1),
            SegmentOp(1, "Mul", mul, (("op", 0, 0), ("op", 0, 0)), 1),
            SegmentOp(2, "ReadVariableOp", f32, (("var", 2, 0),), 1),
            SegmentOp(3, "Mul", mul, (("op", 2, 0), ("op", 2, 0)), 1),
            SegmentOp(4, "AssignVariableOp", f32 + (("validate_shape", False),),
                      (("var", 1, 0), ("op", 1, 0)), 0),
            SegmentOp(5, "Mul", mul, (("op", 3, 0), ("op", 3, 0)), 1),
            SegmentOp(6, "ReadVariableOp", f32, (("var", 1, 0),), 1),
            SegmentOp(7, "AssignVariableOp", f32 + (("validate_shape", False),),
                      (("var", 2, 0), ("op", 5, 0)), 0),
        ),
        args=(),
        returns=((3, 0), (6, 0)),
    )
    function = compile_segment(segment, {1: v.handle, 2: w.handle})
    ops = function.graph.get_operations()
    control = {op.name: {c.name for c in op.control_inputs} for op in ops}
    # A read changes nothing: it need not wait for the Mul issued before it (parallelism) ...
    assert "terra_node_1" not in control["terra_node_2"]
    # ... while the write runs only after every op issued before it that can fail has
    # succeeded (a read: not the Muls of known shapes, which cannot; test_effect_order.py), a
    # read issued after a write waits for it alone, and an op that reads no variable does not
    assert {"terra_node_0", "terra_node_2"} <= control["terra_node_4"]
    assert "terra_node_3" not in control["terra_node_4"]
    assert control["terra_node_6"] == {"terra_node_4"} and not control["terra_node_5"]
    # the writes run although nothing reads them, and the reads are waited for where the
    # function is inlined (test_compiled_graphs_keep_eager_bits.py)
    assert {f"terra_node_{i}" for i in (0, 2, 4, 6, 7)} == {
        op.name for op in function.graph.control_outputs}
    w2, v2 = (w * w).numpy(), (v * v).numpy()
    values = function()
    assert values[0].numpy().tolist() == w2.tolist() and values[1].numpy().tolist() == v2.tolist()
    assert v.numpy().tolist() == v2.tolist() and w.numpy().tolist() == (w2 * w2).tolist()


def _tanh_loop(loop, trip_counts):
    """A loop whose inner Python loop runs ``trip_counts[i]`` times in iteration ``i``."""
    v = tf.Variable(tf.fill((4, 4), 0.5))
    out = []
    for trips in loop(trip_counts):
        h = v * 1.0
        for _ in range(trips):
            h = tf.tanh(h) * 1.5
        v.assign(h)
        out.append(float(tf.reduce_sum(h)))
    return out, v.numpy().tolist()


def test_a_new_trip_count_co_executes_and_runs_eagerly_instead_of_compiling():
    trip_counts = range(3, 14)  # a trip count never seen before, every iteration
    plain = _tanh_loop(lambda it: it, trip_counts)
    runs, seen = {}, {}
    for compile_after in (1, 2):
        with Terra(mode="coexec", compile_after=compile_after) as terra:
            seen[terra] = watch(terra)
            runs[compile_after] = (_tanh_loop(terra.loop, trip_counts), terra)
    (at_once, at_once_terra), (default, default_terra) = runs[1], runs[2]
    assert at_once == plain and default == plain
    for terra in (at_once_terra, default_terra):
        # every call is known after two iterations, though the TraceGraph grows each time
        assert [s.phase for s in terra.stats][2:] == ["coexec"] * 9
        assert_coexecuted(terra, last=9)
        # each co-executed iteration ran the inner loop for its own new trip count
        assert ran_at(terra, seen[terra], "h = tf.tanh(h) * 1.5", "Tanh") == {
            i: trip_counts[i] for i in range(2, 11)}
    # Compiling each one-off segment costs far more than running its ops once (both list them).
    assert len(at_once_terra.programs) >= 9 and len(default_terra.programs) >= 9
    assert at_once_terra.runs_op_by_op == 0 and default_terra.runs_op_by_op >= 9


def test_a_new_slice_index_is_answered_without_a_fallback():
    def run(loop):
        v = tf.Variable(tf.reshape(tf.range(40.0), (10, 4)))
        out = []
        for i in loop(range(10)):
            row = v[i] * 2.0  # an index never seen before: a new shape-defining value
            v.assign(v * 0.5 + tf.reduce_sum(row))
            out.append(float(tf.reduce_sum(v[: i + 1])))  # a new slice size, too
        return out, v.numpy().tolist()

    plain = run(lambda it: it)
    with Terra(mode="coexec") as terra:
        co = run(terra.loop)
    assert co == plain
    assert [s.phase for s in terra.stats][2:] == ["coexec"] * 8
    assert not terra.explain()
    assert_coexecuted(terra, last=8)


@pytest.mark.parametrize("regions", [False, True])
def test_an_rnn_over_ever_longer_sequences_co_executes(regions):
    """Op by op, each co-executed iteration runs the cell's ops once per step; with regions (the
    default) the cell's calls are region hits once two iterations formed them."""
    import keras

    def run(loop):
        keras.utils.set_random_seed(0)
        cell, head = keras.layers.SimpleRNNCell(8), keras.layers.Dense(1)
        cell.build((None, 3))
        head.build((None, 8))
        variables = cell.trainable_variables + head.trainable_variables
        opt = keras.optimizers.SGD(0.05)
        losses = []
        for length in loop(range(2, 12)):  # a new length, and new slice indices, every time
            seq = tf.reshape(tf.range(4 * length * 3, dtype=tf.float32) / 50.0, (4, length, 3))
            with tf.GradientTape() as tape:
                h = [tf.zeros((4, 8))]
                for t in range(length):
                    _, h = cell(seq[:, t, :], h)
                loss = tf.reduce_mean(tf.square(head(h[0]) - 1.0))
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            losses.append(float(loss))
        return losses, [w.numpy() for w in variables]

    plain_losses, plain_weights = run(lambda it: it)
    with Terra(mode="coexec", regions=regions) as terra:
        seen = watch(terra)
        losses, weights = run(terra.loop)
    np.testing.assert_allclose(losses, plain_losses, rtol=1e-5)
    for a, b in zip(weights, plain_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if regions:  # two traced runs form the cell's region, one more learns its calls
        assert [s.phase for s in terra.stats][4:] == ["coexec"] * 6, terra.explain()
        cell = next(r for r in terra.regions.rows if r.name == "SimpleRNNCell.__call__")
        assert cell.state == "formed" and cell.hits >= sum(range(6, 12))
        return
    assert [s.phase for s in terra.stats][2:] == ["coexec"] * 8, terra.explain()
    assert_coexecuted(terra, last=8)
    # each co-executed iteration ran the cell once per step of its new, longer sequence
    assert ran_at(terra, seen, "_, h = cell(", "Tanh") == {i: 2 + i for i in range(2, 10)}


def test_a_loop_whose_path_never_repeats_goes_eager():
    trip_counts = range(1, 19)  # a trip count never seen before, every iteration
    plain = _tanh_loop(lambda it: it, trip_counts)
    with pytest.warns(RuntimeWarning, match="never taken before"), Terra() as terra:
        co = _tanh_loop(terra.loop, trip_counts)
    assert co == plain
    phases = [s.phase for s in terra.stats]
    assert phases == ["tracing"] * 2 + ["coexec"] * 10 + ["eager"] * 6
    assert plan_of(terra) == "segments" and not terra.explain()  # co-executed in segments first


@pytest.mark.parametrize("keep", [False, True])
def test_eager_iterations_run_without_hooks_once_no_placeholder_lives(monkeypatch, keep):
    """In a stretch of eager iterations the graph is idle: once no placeholder is alive, eager
    ops pay for no hook or barrier (the hooks are out until co-execution is tried again). A loop
    that keeps its sums (placeholders) keeps the hooks: its objects stay as Python made them
    (the same object in the list and in a local name), as in eager."""
    from terra_nb import capture
    from terra_nb.modes import CoexecEngine

    monkeypatch.setattr(CoexecEngine, "eager_span", 3)
    trip_counts = list(range(1, 15)) + [3, 4] * 4

    def run(loop, seen: list):
        v, sums, last = tf.Variable(tf.fill((4, 4), 0.5)), [], None
        for trips in loop(trip_counts):
            seen.append((capture.is_installed(), bool(sums) and sums[-1] is last))
            h = v * 1.0
            for _ in range(trips):
                h = tf.tanh(h) * 1.5
            v.assign(h)
            last = tf.reduce_sum(h)
            sums.append(last if keep else float(last))
        return [float(x) for x in sums], v.numpy().tolist()

    plain = run(lambda it: it, [])
    for _ in range(3):  # placeholders of earlier tests keep the hooks until they are collected
        gc.collect()
    seen: list = []
    with pytest.warns(RuntimeWarning, match="never taken before"), Terra() as terra:
        co = run(terra.loop, seen)
    assert co == plain
    phases = [s.phase for s in terra.stats]
    assert phases[:15] == ["tracing"] * 2 + ["coexec"] * 10 + ["eager"] * 3
    assert phases[-6:] == ["coexec"] * 6
    hooked, same = zip(*seen)
    # iteration 12 still holds h and last, placeholders of iteration 11, until it assigns them
    assert all(hooked[:13]) and all(hooked[15:])
    assert hooked[13:15] == ((True, True) if keep else (False, False))
    assert all(same[1:]) if keep else not any(same)


def test_a_try_again_that_meets_new_paths_again_goes_eager_after_fewer_iterations(monkeypatch):
    from terra_nb.modes import CoexecEngine

    monkeypatch.setattr(CoexecEngine, "eager_span", 3)
    trip_counts = range(1, 31)  # never a trip count seen before
    plain = _tanh_loop(lambda it: it, trip_counts)
    with pytest.warns(RuntimeWarning, match="never taken before"), Terra() as terra:
        co = _tanh_loop(terra.loop, trip_counts)
    assert co == plain
    phases = [s.phase for s in terra.stats]
    # ten to tell the first time; a try again, three (then twice the eager stretch)
    assert phases == (["tracing"] * 2 + ["coexec"] * 10 + ["eager"] * 3 + ["coexec"] * 3
                      + ["eager"] * 6 + ["coexec"] * 3 + ["eager"] * 3)


def test_co_executed_iterations_count_their_feeds_as_traced_ones_do():
    v = tf.Variable(tf.ones((2, 3)))
    batches = [np.full((2, 3), i, np.float32) for i in range(6)]
    with Terra(mode="coexec") as terra:
        for x in terra.loop(batches):
            v.assign_add(v * x * 0.01)  # x comes from Python: one feed per use
            float(tf.reduce_sum(v * 2.0))
    stats = terra.stats
    assert [s.phase for s in stats] == ["tracing"] * 2 + ["coexec"] * 4
    assert_coexecuted(terra, last=4)
    assert stats[2].feeds == stats[1].feeds > 0
    assert all(s.feeds == stats[1].feeds and s.fetches == stats[1].fetches for s in stats[2:])


def test_after_going_eager_a_loop_tries_co_execution_again(monkeypatch):
    from terra_nb.modes import CoexecEngine

    monkeypatch.setattr(CoexecEngine, "eager_span", 3)
    trip_counts = list(range(1, 15)) + [3, 4] * 10  # new trip counts, then two that repeat
    plain = _tanh_loop(lambda it: it, trip_counts)
    with pytest.warns(RuntimeWarning, match="never taken before"), Terra() as terra:
        co = _tanh_loop(terra.loop, trip_counts)
    assert co == plain
    phases = [s.phase for s in terra.stats]
    assert phases[:15] == ["tracing"] * 2 + ["coexec"] * 10 + ["eager"] * 3
    assert phases[-10:] == ["coexec"] * 10  # the repeating paths co-execute, compiled
    assert terra.programs
    assert phases[15:] == ["coexec"] * 19 and not terra.explain()  # from the first try again
    assert_coexecuted(terra, at_least=29 / 34, last=19)


def test_calls_answered_by_shape_inference_are_kept_in_bounded_number(monkeypatch):
    from terra_nb.capture.signature import SignatureIndex

    monkeypatch.setattr(SignatureIndex, "max_inferred", 5)

    def run(loop):
        table = tf.Variable(tf.range(40.0))
        out = []
        for step in loop(range(30)):
            out.append(float(table[step] * 2.0))  # a new index every step: a new signature
            table.assign_add(tf.ones(40))
        return out, table.numpy().tolist()

    plain = run(lambda it: it)
    with Terra() as terra:
        co = run(terra.loop)
    assert co == plain
    assert [s.phase for s in terra.stats][2:] == ["coexec"] * 28
    assert_coexecuted(terra, last=28)
    index = terra.learned.index
    assert len(index.entries) < 20, len(index.entries)  # 28 new indices, 5 kept


def test_the_compiled_cache_keeps_only_the_most_recent_segments(monkeypatch):
    """A loop whose path is new every iteration does not keep every compiled segment."""
    from terra_nb.coexec.graph_runner import GraphRunner

    monkeypatch.setattr(GraphRunner, "max_compiled", 2)
    v = tf.Variable([1.0, 2.0, 3.0, 4.0])
    plain, co = [], []
    for n in [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]:
        plain.append(float(tf.reduce_sum(v[:n] * 2.0)))
    with Terra(compile_after=1) as terra:
        for n in terra.loop([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]):
            co.append(float(tf.reduce_sum(v[:n] * 2.0)))
    assert co == plain
    assert "coexec" in [s.phase for s in terra.stats]
    assert 0 < len(terra.programs) <= 2
    assert_coexecuted(terra, last=10)


@pytest.mark.parametrize("mode", ["lazy", "coexec"])
def test_a_read_value_whose_work_item_was_pruned_meanwhile(monkeypatch, mode):
    """Reading ``a`` flushes the ops up to it, then the rest; in lazy mode ``a`` is computed by
    then, and the second flush prunes the kept placeholders (here on every flush): ``a`` keeps
    its value, not its work item, and the read returns that value (it raised "not kept")."""
    from terra_nb.coexec.executor import KeptPlaceholders

    monkeypatch.setattr(KeptPlaceholders, "prune_from", 0)

    def body(loop):
        w, out, kept = tf.Variable([1.0, 2.0]), [], []
        for _ in loop(range(6)):
            a = tf.reduce_sum(w * 2.0)
            b = a + 1.0  # pending after a when a is read
            kept.append(b)
            out.append(float(a))
            w.assign_add([1.0, 1.0])
        return out, [float(b) for b in kept]

    eager = body(lambda it: it)
    with Terra(mode=mode) as terra:
        co = body(terra.loop)
    assert co == eager
    assert_coexecuted(terra, last=3)
