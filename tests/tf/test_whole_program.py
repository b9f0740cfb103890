"""Whole-program co-execution (``Terra(program="whole")``): one generated program per iteration,
with ``switch_case`` at branch points and ``while_loop`` for loop nodes, equal to eager; each
test also asserts what ran (what_ran.py): which iterations co-executed, in the whole program or
in segments, which fell back and why, and where a test is about a branch or a loop, how often
the co-executed iterations ran its arms or its body."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from programs import CORPUS, rnn_variable_length
from test_coexec import assert_same_values, graph_threads, run
from what_ran import assert_coexecuted, assert_fell_back, coexecuted_in, ran_at, watch

from terra_nb import Terra, TerraUsageError

VARIANT = {"mode": "coexec", "program": "whole"}


@pytest.fixture(autouse=True)
def whole_variant(monkeypatch):
    import test_coexec

    monkeypatch.setitem(test_coexec.VARIANTS, "whole", VARIANT)


OUTLIVES = "outlives the iteration"  # the program learns to keep a value Python still holds
NEW_PATH = "where the program has node"  # a path the TraceGraph does not have

# What each corpus program does in the whole program: after the first two traced iterations it
# co-executes, but for these fallbacks: a value that outlives the iteration (learned once, for
# each such value), and a path the TraceGraph never saw, which a switch_case cannot take and
# segments need not (a branch left untaken at the end, a combination of two branches, a new
# sequence length whose backward pass is a new path) or a value the program held as a constant
# that changed (the mean's gradient 1/8 in a smaller last batch); recursion traces until it has
# seen every depth (1 to 3).
CORPUS_IN_WHOLE = {
    "branch_on_loss": {"fell_back": {9: NEW_PATH}, "last": 0},
    "rnn_variable_length": {"fell_back": {2: NEW_PATH, 3: OUTLIVES, 5: NEW_PATH}, "last": 2},
    "periodic_and_late_branch": {"fell_back": {2: OUTLIVES, 10: "new op or new program location",
                                               12: "came after the last op of the program"},
                                 "last": 1},
    "break_and_continue": {"fell_back": {2: OUTLIVES}, "last": 9},
    "optional_none": {"fell_back": {2: OUTLIVES, 3: OUTLIVES}, "last": 4},
    "recursion": {"fell_back": {}, "last": 4},
    "gan": {"fell_back": {2: OUTLIVES}, "last": 3},
    "smaller_last_batch": {"fell_back": {6: "changed from the value the program holds"},
                           "last": 0},
}
@pytest.mark.parametrize("program", CORPUS, ids=lambda p: p.__name__)
def test_corpus_equals_eager_in_the_whole_program(program):
    values, variables, printed, _ = run(program, "plain")
    values2, variables2, printed2, terra = run(program, "whole")
    assert_same_values(values2, values)
    assert printed2 == printed
    for a, b in zip(variables, variables2):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert not graph_threads()
    n = len(terra.stats)
    ran = CORPUS_IN_WHOLE.get(program.__name__, {"fell_back": {}, "last": n - 2})
    assert_fell_back(terra, ran["fell_back"])
    traced = 4 if program.__name__ == "recursion" else 2
    coexecuted = (n - traced - len(ran["fell_back"])) / n  # every other iteration
    assert_coexecuted(terra, at_least=coexecuted, last=ran["last"], plan="whole")


@pytest.mark.parametrize("name", ["numpy_on_loss", "mutation_in_model", "dropout_seeded",
                                  "generator_batches", "try_except", "gan"])
def test_steady_loops_run_in_the_program(name):
    program = next(p for p in CORPUS if p.__name__ == name)
    _, _, _, terra = run(program, "whole")
    assert terra.program is not None
    phases = [s.phase for s in terra.stats]
    assert phases.count("coexec") >= len(phases) - 3, phases
    assert terra.runs_op_by_op == 0 and not terra.programs  # no segment ran
    learned = {"gan": {2: OUTLIVES}}.get(name, {})  # the one value Python holds, learned once
    assert_fell_back(terra, learned)
    assert_coexecuted(terra, last=len(phases) - 2 - len(learned), plan="whole")


def branchy_loop(loop):
    """A Python branch taken every third iteration and a user loop whose trip count cycles."""
    w = tf.Variable(np.ones((3, 3), np.float32))
    total = tf.Variable(0.0)
    seen = []
    for i, x in enumerate(loop([np.full((3, 3), k, np.float32) for k in range(12)])):
        y = tf.matmul(w, x)
        if i % 3 == 0:
            w.assign(w * 0.9 + 0.01 * y)
        else:
            w.assign_sub(0.001 * y)
        for _ in range(1 + i % 2):
            total.assign_add(tf.reduce_sum(w))
        seen.append(float(tf.reduce_mean(y)))
    return seen, [w.numpy(), total.numpy()]


def test_cases_and_while_loops_in_the_program():
    values, variables = branchy_loop(lambda it: it)
    with Terra(**VARIANT) as terra:
        seen = watch(terra)
        values2, variables2 = branchy_loop(terra.loop)
    assert_same_values(values2, values)
    for a, b in zip(variables, variables2):
        np.testing.assert_allclose(b, a, rtol=1e-5)
    text = str(terra.program)
    assert "case after" in text and "while (Loop Cond)" in text, text
    graph_def = terra.program.graph_def()
    kinds = {n.op for n in graph_def.node}
    kinds |= {n.op for f in graph_def.library.function for n in f.node_def}
    assert {"Case", "While", "QueueDequeueV2", "QueueEnqueueV2"} <= kinds, kinds
    assert [s.phase for s in terra.stats].count("coexec") >= 6
    # iteration 1 brought new calls (the other arm, a second trip), so 2 still traced; 3 learns
    # that y outlives the iteration; the rest ran in the program, through both arms of the
    # branch and 1 or 2 trips of the loop
    assert_fell_back(terra, {3: OUTLIVES})
    assert_coexecuted(terra, last=8, plan="whole")
    assert coexecuted_in(seen) == {i: "whole" for i in range(4, 12)}
    assert ran_at(terra, seen, "w.assign(w * 0.9", "AssignVariableOp") == {
        i: int(i % 3 == 0) for i in range(4, 12)}
    assert ran_at(terra, seen, "w.assign_sub(", "AssignSubVariableOp") == {
        i: int(i % 3 != 0) for i in range(4, 12)}
    assert ran_at(terra, seen, "total.assign_add(", "AssignAddVariableOp") == {
        i: 1 + i % 2 for i in range(4, 12)}


def test_an_error_mid_iteration_leaves_variables_as_eager():
    def program(loop):
        model, opt = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]), \
            keras.optimizers.SGD(0.1)
        x = np.ones((2, 4), np.float32)
        try:
            for i, _ in enumerate(loop(range(8))):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(model(x) ** 2)
                opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                        model.trainable_variables))
                if i == 5:
                    raise KeyError("stop")
        except KeyError:
            pass
        return [v.numpy() for v in model.weights]

    keras.utils.set_random_seed(0)
    eager = program(lambda it: it)
    keras.utils.set_random_seed(0)
    with Terra(**VARIANT) as terra:
        whole = program(terra.loop)
    for a, b in zip(eager, whole):
        np.testing.assert_allclose(b, a, rtol=1e-5)
    assert "coexec" in [s.phase for s in terra.stats]
    assert not graph_threads()
    assert_fell_back(terra, {2: OUTLIVES})  # the loss, held by Python
    assert_coexecuted(terra, last=3, plan="whole")  # 3 to 5, the error at 5 in the program


def test_whole_program_needs_coexec_and_a_known_kind():
    with pytest.raises(TerraUsageError, match="coexec"):
        Terra(mode="lazy", program="whole")
    with pytest.raises(TerraUsageError, match="segments"):
        Terra(program="one")


def schedule_loop(loop):
    """A Python float that stays the same for 8 iterations, then changes; one that always does."""
    w = tf.Variable(np.ones(3, np.float32))
    for i, x in enumerate(loop(range(16))):
        scale = 0.5 if i < 8 else 0.25
        w.assign(w * scale + float(x))
    return [], [w.numpy()]


def test_a_value_held_as_a_constant_that_changes_diverges_and_is_fed_again():
    _, eager = schedule_loop(lambda it: it)
    with Terra(**VARIANT) as terra:
        _, whole = schedule_loop(terra.loop)
    np.testing.assert_allclose(whole[0], eager[0], rtol=1e-6)
    reasons = [f.reason for f in terra.explain()]
    assert any("changed from the value the program holds" in r for r in reasons), reasons
    assert terra.program.constants == {}  # scale varies now, x always did
    assert [s.phase for s in terra.stats][-3:] == ["coexec"] * 3
    assert_fell_back(terra, {8: "input 1 of node 3 changed from the value the program holds"})
    assert_coexecuted(terra, at_least=13 / 16, last=7, plan="whole")


def rnn_cycling_lengths(loop):
    """An RNN over sequences whose length cycles: a while loop whose every trip the backward
    pass reads."""
    return rnn_variable_length(loop, lengths=(3, 5, 4) * 6)


def test_an_rnn_backward_pass_reads_every_trip_of_the_while_loop():
    keras.utils.set_random_seed(0)
    values, variables = rnn_cycling_lengths(lambda it: it)
    keras.utils.set_random_seed(0)
    with Terra(**VARIANT) as terra:
        seen = watch(terra)
        values2, variables2 = rnn_cycling_lengths(terra.loop)
    assert_same_values(values2, values)
    for a, b in zip(variables, variables2):
        np.testing.assert_allclose(b, a, rtol=1e-5)
    assert "while (Loop Cond)" in str(terra.program)
    assert terra.program.per_trip  # forward values the backward pass reads, one per trip
    assert [s.phase for s in terra.stats][-6:] == ["coexec"] * 6
    # length 4 (iteration 2) is a new backward path; iteration 3 learns that a value outlives
    # it; at 7 a value the rebuilt program held as a constant changed
    assert_fell_back(terra, {2: NEW_PATH, 3: OUTLIVES, 7: "changed from the value the program"})
    assert_coexecuted(terra, at_least=13 / 18, last=10, plan="whole")
    lengths = (3, 5, 4) * 6
    assert ran_at(terra, seen, "_, h = cell(", "Tanh") == {  # the while loop, once per trip
        i: lengths[i] for i in (4, 5, 6, *range(8, 18))}


def grow(loop):
    """A loop over ever-longer sequences: a trip count and slice indices new every iteration."""
    w = tf.Variable(tf.fill((3, 3), 0.1))
    out = []
    for length in loop(range(2, 14)):
        seq = tf.reshape(tf.range(length * 3, dtype=tf.float32) / 10.0, (length, 3))
        h = tf.zeros((1, 3))
        for t in range(length):
            h = tf.tanh(h @ w + seq[t : t + 1])
        w.assign_sub(0.01 * tf.reduce_mean(h) * tf.ones((3, 3)))
        out.append(float(tf.reduce_sum(h)))
    return out


def test_one_compiled_program_serves_every_new_trip_count():
    eager = grow(lambda it: it)
    programs = []
    with Terra(**VARIANT) as terra:
        terra.subscribe(lambda stats: programs.append(terra.program))
        seen = watch(terra)
        whole = grow(terra.loop)
    assert_same_values(whole, eager)
    assert [s.phase for s in terra.stats][4:] == ["coexec"] * 8
    assert_fell_back(terra, {2: OUTLIVES})  # h, held by Python
    assert_coexecuted(terra, last=9, plan="whole")
    # every co-executed iteration ran the while loop's body for its new length (2 + iteration)
    assert ran_at(terra, seen, "h = tf.tanh(h @ w", "Tanh") == {i: 2 + i for i in range(3, 12)}
    assert all(p is programs[-1] for p in programs[-6:])  # no new program for a new length
    assert "while (Loop Cond)" in str(programs[-1])


def rnn_new_lengths(loop):
    """An RNN whose sequence length is new every iteration: its backward pass (library code, no
    user loop) is a new path each time, so the whole program keeps falling back."""
    cell = keras.layers.SimpleRNNCell(4)
    cell.build((None, 2))
    opt = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(2)
    out = []
    for seq in loop([rng.normal(size=(1, n, 2)).astype("float32") for n in range(2, 20)]):
        with tf.GradientTape() as tape:
            h = [tf.zeros((1, 4))]
            for t in range(seq.shape[1]):
                _, h = cell(seq[:, t, :], h)
            loss = tf.reduce_sum(h[0] ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, cell.trainable_variables),
                                cell.trainable_variables))
        out.append(float(loss))
    return out, [v.numpy() for v in cell.trainable_variables]


def test_a_loop_that_keeps_leaving_the_program_goes_on_in_segments():
    keras.utils.set_random_seed(0)
    values, variables = rnn_new_lengths(lambda it: it)
    keras.utils.set_random_seed(0)
    warned = pytest.warns(RuntimeWarning, match="co-executing in segments from now on")
    with warned, Terra(**VARIANT) as terra:
        values2, variables2 = rnn_new_lengths(terra.loop)
    assert_same_values(values2, values)
    for a, b in zip(variables, variables2):
        np.testing.assert_allclose(b, a, rtol=1e-5)
    assert terra.program is None
    phases = [s.phase for s in terra.stats]
    assert "tracing" not in phases[-8:] and "coexec" in phases[-8:], phases  # not given up
    # five new backward paths in the program (max_fallbacks), then in segments, where every
    # length is new again: after ten one-off iterations the last runs eagerly (it warned)
    assert_fell_back(terra, {i: NEW_PATH for i in range(2, 7)})
    assert phases == ["tracing"] * 2 + ["fallback"] * 5 + ["coexec"] * 10 + ["eager"]
    assert_coexecuted(terra, at_least=10 / 18, plan="segments")


def branch_in_a_loop_body(loop):
    """An ``if`` inside a user loop whose trip count changes: the next op alone cannot tell the
    same trip from the next one; where tracing saw a new trip begin decides."""
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for i in loop(range(24)):
        h = w * 1.0
        for t in range(2 + i % 3):
            if (t + i) % 2:
                h = tf.tanh(h)
            else:
                h = h * 0.5
        w.assign(h + 0.1)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def test_a_branch_inside_a_while_loop_body():
    values, variables = branch_in_a_loop_body(lambda it: it)
    with Terra(**VARIANT) as terra:
        seen = watch(terra)
        values2, variables2 = branch_in_a_loop_body(terra.loop)
    assert_same_values(values2, values)
    np.testing.assert_allclose(variables2[0], variables[0], rtol=1e-6)
    text = str(terra.program)
    loop_at = text.index("while (Loop Cond)")
    assert "case after" in text[loop_at:], text  # a case inside the while loop's body
    assert [s.phase for s in terra.stats][-8:] == ["coexec"] * 8
    # learning the program: a third trip (2), the value that leaves the loop (3), values Python
    # holds (4, 6); from 7 on every iteration in it, through both arms inside the loop's body
    assert_fell_back(terra, {2: "ran more than 2 trips", 3: "which the program never feeds",
                             4: OUTLIVES, 6: OUTLIVES})
    assert_coexecuted(terra, last=17, plan="whole")
    assert coexecuted_in(seen) == {i: "whole" for i in (5, *range(7, 24))}
    arms = {i: [(t + i) % 2 for t in range(2 + i % 3)] for i in coexecuted_in(seen)}
    assert ran_at(terra, seen, "h = tf.tanh(h)", "Tanh") == {i: sum(a) for i, a in arms.items()}
    assert ran_at(terra, seen, "h = h * 0.5", "Mul") == {
        i: len(a) - sum(a) for i, a in arms.items()}


def test_a_constant_that_changes_after_the_last_rebuild_is_dropped(monkeypatch):
    from terra_nb.coexec.program_constants import ConstantLearner

    monkeypatch.setattr(ConstantLearner, "max_rebuilds", 1)  # spent on learning the constants
    _, eager = schedule_loop(lambda it: it)
    with Terra(**VARIANT) as terra:
        _, whole = schedule_loop(terra.loop)
    np.testing.assert_allclose(whole[0], eager[0], rtol=1e-6)
    changed = [f for f in terra.explain() if "changed from the value" in f.reason]
    assert len(changed) == 1 and terra.program is not None
    assert [s.phase for s in terra.stats][-3:] == ["coexec"] * 3
    assert_fell_back(terra, {8: "changed from the value the program holds"})
    assert_coexecuted(terra, at_least=13 / 16, last=7, plan="whole")


def one_layer_with_a_smaller_last_batch(loop):
    """The mean's gradient scale (1/8, a small fed value) becomes a constant of the program; the
    last batch of 3 changes it, and the program's run fails on shapes before Python's check."""
    v = tf.Variable(tf.ones((4, 1)))
    out = []
    batches = [np.full((8, 4), 0.5 + i, np.float32) for i in range(6)]
    for x in loop([*batches, np.ones((3, 4), np.float32)]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(x @ v))
        v.assign_sub(0.01 * tape.gradient(loss, v))
        out.append(float(loss))
    return out, v.numpy().ravel().tolist()


def test_a_run_that_fails_ahead_of_a_changed_constant_falls_back_with_eager_values():
    """The run's shape error is not eager's (eager runs the smaller batch fine): Python replays
    the iteration eagerly, leaves the program there and ends equal to eager."""
    eager = one_layer_with_a_smaller_last_batch(lambda it: it)
    with Terra(**VARIANT) as terra:
        seen = watch(terra)
        got = one_layer_with_a_smaller_last_batch(terra.loop)
    assert_same_values(got, eager)
    assert_fell_back(terra, {6: "changed from the value the program holds"})
    assert coexecuted_in(seen) == {i: "whole" for i in range(2, 6)}
