"""Adversarial programs for whole-program co-execution (``Terra(mode="coexec", program="whole")``).

Each test runs a small loop plainly (eager) and under the whole program, in a worker thread with
a timeout (a deadlock fails the test instead of hanging), and compares Python values, printed
text and variables. Each bug this review found is fixed; the test that showed it stays as a
regression test.
"""

import contextlib
import io
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_coexec import assert_same_values, graph_threads
from watchdog import in_thread

from terra_nb import Terra

VARIANT = {"mode": "coexec", "program": "whole"}
TIMEOUT = 180  # seconds per run: longer means a deadlock


def run_plain(program, seed=0):
    def fn():
        keras.utils.set_random_seed(seed)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            values, variables = program(lambda it: it)
        return values, variables, out.getvalue()

    return in_thread(fn, TIMEOUT)


def run_whole(program, seed=0, **options):
    def fn():
        keras.utils.set_random_seed(seed)
        out = io.StringIO()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.redirect_stdout(out), Terra(**{**VARIANT, **options}) as terra:
                values, variables = program(terra.loop)
        terra.caught_warnings = [str(w.message) for w in caught]
        return values, variables, out.getvalue(), terra

    return in_thread(fn, TIMEOUT)


def assert_same_variables(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-5, atol=1e-6)


def compare(program, seed=0, **options):
    """Run ``program`` eagerly and in the whole program; assert equal; return the Terra."""
    values, variables, printed = run_plain(program, seed)
    values2, variables2, printed2, terra = run_whole(program, seed, **options)
    assert_same_values(values2, values)
    assert printed2 == printed
    assert_same_variables(variables, variables2)
    assert not graph_threads()
    return terra


def phases(terra):
    return [s.phase for s in terra.stats]


def floats(xs):
    return [float(x) for x in xs]


# -- nested loops, branches in loops, loops in branches ---------------------------------------


def nested_loops_varying_trips(loop):
    w = tf.Variable(np.linspace(0.1, 0.5, 4).astype(np.float32))
    out = []
    for i in loop(range(14)):
        h = w * 0.5
        for t in range(1 + i % 3):
            h = tf.tanh(h + w)
            for _ in range((i + t) % 2 + 1):
                h = h * 0.9
        total = tf.reduce_sum(h)
        w.assign_add(0.01 * h)
        out.append(float(total))
    return out, [w.numpy()]


def test_nested_loops_with_varying_trip_counts_and_value_read_after():
    compare(nested_loops_varying_trips)


def nested_loops_inner_value_stays_inside(loop):
    """The inner loop's value is consumed inside the outer body only (no fallback needed)."""
    w = tf.Variable(np.linspace(0.1, 0.5, 4).astype(np.float32))
    acc = tf.Variable(np.zeros(4, np.float32))
    out = []
    for i in loop(range(14)):
        for t in range(1 + i % 3):
            g = w * 1.0
            for _ in range((i + t) % 2 + 1):
                g = g * 0.9
            acc.assign_add(g)
        out.append(float(tf.reduce_sum(acc)))
    return out, [w.numpy(), acc.numpy()]


def test_nested_loops_whose_inner_values_stay_in_the_outer_body():
    terra = compare(nested_loops_inner_value_stays_inside)
    assert "coexec" in phases(terra)


def branch_inside_loop_body(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for i in loop(range(16)):
        h = w * 1.0
        for t in range(2 + i % 3):
            if (t + i) % 2 == 0:
                h = h * 1.1
            else:
                h = h - 0.05
        w.assign(h)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def test_branch_inside_a_loop_body():
    terra = compare(branch_inside_loop_body)
    assert "coexec" in phases(terra)


def loop_inside_branch(loop):
    w = tf.Variable(np.arange(3, dtype=np.float32))
    out = []
    for i in loop(range(16)):
        if i % 3 == 0:
            for _ in range(1 + (i // 3) % 2):
                w.assign_add(tf.sin(w))
        else:
            w.assign_sub(0.1 * w)
        out.append(float(w[0] + w[2]))
    return out, [w.numpy()]


def test_loop_inside_a_branch():
    terra = compare(loop_inside_branch)
    assert "coexec" in phases(terra)


def loop_values_read_in_later_trips_and_after(loop):
    w = tf.Variable(np.full(3, 0.5, np.float32))
    out = []
    for i in loop(range(12)):
        h = w * 1.0
        hs = []
        for _t in range(2 + i % 2):
            h = tf.tanh(h) + (0.1 * hs[-2] if len(hs) >= 2 else 0.0)
            hs.append(h)
        total = tf.add_n(hs)
        w.assign_add(0.01 * total)
        out.append(float(tf.reduce_sum(total)))
    return out, [w.numpy()]


def test_loop_values_read_in_later_trips_and_after_the_loop():
    compare(loop_values_read_in_later_trips_and_after)


def per_trip_values_stacked_after_loop(loop):
    w = tf.Variable(np.full((2, 3), 0.3, np.float32))
    out = []
    for i in loop(range(14)):
        h = w * 1.0
        hs = []
        for _ in range(1 + i % 3):
            h = tf.tanh(h * 1.2)
            hs.append(h)
        stacked = tf.stack(hs)
        w.assign(w * 0.9 + 0.1 * tf.reduce_mean(stacked, axis=0))
        out.append(float(tf.reduce_sum(stacked)))
    return out, [w.numpy()]


def test_every_trips_value_stacked_after_a_while_loop():
    compare(per_trip_values_stacked_after_loop)


def zero_trip_loops(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for i in loop(range(15)):
        for _ in range(i % 3):  # 0, 1 or 2 trips
            w.assign(w * 0.9 + 0.2)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_loops_that_sometimes_run_no_trip():
    compare(zero_trip_loops)


def early_return_from_loop(loop):
    w = tf.Variable(np.array([0.1, 0.2, 0.3], np.float32))

    def grow(h, limit):
        for t in range(12):
            h = h * 1.5 + 0.01
            if float(tf.reduce_max(h)) > limit:
                return h, t
        return h, 12

    out = []
    for i in loop(range(12)):
        h, t = grow(w * 1.0, 1.0 + (i % 3))
        w.assign(w * 0.9 + 0.01 * h)
        out.append((t, float(tf.reduce_sum(h))))
    return out, [w.numpy()]


def test_early_return_of_a_value_computed_in_a_loop():
    compare(early_return_from_loop)


# -- constants, feeds ---------------------------------------------------------------------


def occasional_constant(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for i in loop(range(20)):
        lr = 0.1 if i < 5 else (0.05 if i < 11 else (0.1 if i < 15 else 0.02))
        w.assign_sub(lr * w)
        out.append(float(w[1]))
    return out, [w.numpy()]


def test_python_floats_that_change_only_occasionally():
    terra = compare(occasional_constant)
    assert phases(terra)[-3:] == ["coexec"] * 3


def signed_zero_constant(loop):
    v = tf.Variable(2.0)
    out = []
    for i in loop(range(10)):
        # numpy, not Python floats: TF's own scalar cache already conflates 0.0 and -0.0
        s = np.array([0.0 if i < 6 else -0.0], np.float32)
        out.append(float(1.0 / (v * s)[0]))
    return out, [v.numpy()]


def test_a_constant_zero_that_becomes_minus_zero():
    compare(signed_zero_constant)


def int_and_bool_feeds(loop):
    w = tf.Variable(np.arange(1, 5, dtype=np.float32))
    out = []
    for i in loop(range(16)):
        flag = i % 4 == 0
        k = i % 4
        y = tf.where(flag, w * 2.0, w)
        picked = tf.gather(y, k)
        n = tf.cast(i, tf.float32)  # a fed int converted in the program
        w.assign(w * 0.95 + 0.01 * picked + 0.001 * n)
        out.append(float(picked))
    return out, [w.numpy()]


def test_int_and_bool_feeds():
    compare(int_and_bool_feeds)


def fed_sometimes_node_other_time(loop):
    """The scale of ``w * s`` is a fed tensor (always 0.5, so held as a constant) or the value
    of node ``a``; once it is the value of node ``b``, computed every iteration but never fed
    there before."""
    v = tf.Variable(1.0)
    w = tf.Variable(1.0)
    out = []
    for i in loop(range(14)):
        a = v * 0.75
        b = v + 0.25
        s = a if i % 2 == 0 else tf.constant(0.5)
        if i == 11:
            s = b
        w.assign(w * s + 0.5)
        out.append(float(w))
    return out, [w.numpy(), v.numpy()]


def test_an_input_held_as_constant_then_fed_from_another_node():
    compare(fed_sometimes_node_other_time)


def value_fetched_then_used(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for _i in loop(range(12)):
        loss = tf.reduce_sum(w * w)
        if float(loss) > 1.0:
            w.assign_sub(0.01 * loss * w)  # the fetched value is also an op input
        out.append(float(loss))
    return out, [w.numpy()]


def test_a_value_read_mid_iteration_then_used_as_an_input_equals_eager():
    compare(value_fetched_then_used)


def test_a_value_read_mid_iteration_then_used_stays_in_the_program():
    _, _, _, terra = run_whole(value_fetched_then_used)
    assert phases(terra)[-4:] == ["coexec"] * 4, (phases(terra), terra.explain())


# -- values kept across iterations ----------------------------------------------------------


def losses_read_at_the_end(loop):
    w = tf.Variable(np.ones(4, np.float32))
    losses = []
    for i in loop(range(14)):
        loss = tf.reduce_mean(tf.square(w - float(i % 3)))
        w.assign_sub(0.05 * (w - float(i % 3)))
        losses.append(loss)
    return floats(losses), [w.numpy()]


def test_placeholders_kept_across_iterations_and_read_at_the_end():
    terra = compare(losses_read_at_the_end)
    assert phases(terra)[-4:] == ["coexec"] * 4, (phases(terra), terra.explain())


def two_iterations_ago(loop):
    w = tf.Variable(np.ones(3, np.float32))
    prev = []
    out = []
    for i in loop(range(14)):
        y = tf.reduce_sum(w * 1.5)
        if len(prev) >= 2:
            w.assign_add(0.01 * prev[-2] * tf.ones(3))
        else:
            w.assign_add(tf.ones(3) * 0.1)
        prev.append(y)
        if i % 5 == 4:
            out.append(float(prev[-3]))
    return out + floats(prev), [w.numpy()]


def test_reading_a_value_from_two_iterations_ago():
    compare(two_iterations_ago)


def ema_carried(loop):
    w = tf.Variable(np.linspace(1.0, 2.0, 3).astype(np.float32))
    ema = tf.constant(0.0)
    for _i in loop(range(16)):
        loss = tf.reduce_sum(w * w)
        ema = 0.9 * ema + 0.1 * loss
        w.assign_sub(0.01 * w)
    return [float(ema)], [w.numpy()]


def test_a_moving_average_carried_as_a_placeholder_across_iterations():
    compare(ema_carried)


def test_a_moving_average_carried_across_iterations_stays_in_the_program():
    _, _, _, terra = run_whole(ema_carried)
    assert "coexec" in phases(terra), (phases(terra), terra.explain())


# -- break, continue, exceptions ------------------------------------------------------------


def break_mid_body(loop):
    w = tf.Variable(np.ones(3, np.float32))
    v = tf.Variable(0.0)
    for i in loop(range(20)):
        w.assign(w * 1.01)
        if i == 9:
            break
        v.assign_add(tf.reduce_sum(w))
    return [float(v)], [w.numpy(), v.numpy()]


def test_break_in_the_middle_of_the_body():
    compare(break_mid_body)


def continue_mid_body(loop):
    w = tf.Variable(np.ones(3, np.float32))
    v = tf.Variable(0.0)
    out = []
    for i in loop(range(18)):
        w.assign(w * 1.01)
        if i % 4 == 3:
            continue
        v.assign_add(tf.reduce_sum(w))
        out.append(float(v))
    return out, [w.numpy(), v.numpy()]


def test_continue_in_the_middle_of_the_body():
    compare(continue_mid_body)


def empty_iterations(loop):
    w = tf.Variable(np.ones(3, np.float32))
    for i in loop(range(16)):
        if i % 3 == 1:
            continue  # no op at all
        w.assign(w * 1.1 - 0.05)
    return [], [w.numpy()]


def test_iterations_that_issue_no_op():
    compare(empty_iterations)


def exception_mid_iteration(exc_type):
    def program(loop):
        w = tf.Variable(np.ones(3, np.float32))
        v = tf.Variable(0.0)
        log = []
        try:
            for i in loop(range(14)):
                w.assign(w * 1.1)
                log.append(float(v))
                if i == 10:
                    raise exc_type("stop")
                v.assign_add(tf.reduce_sum(w))
        except exc_type:
            log.append("caught")
        log.append(float(v))
        return log, [w.numpy(), v.numpy()]
    return program


@pytest.mark.parametrize("exc_type", [ValueError, KeyboardInterrupt])
def test_exception_mid_iteration_leaves_state_as_eager(exc_type):
    compare(exception_mid_iteration(exc_type))


def exception_with_generator_held(loop):
    """The loop's generator is still referenced after the exception: the iteration stays open
    while Python reads variables."""
    w = tf.Variable(np.ones(3, np.float32))
    v = tf.Variable(0.0)
    it = loop(range(12))
    try:
        for i in it:
            w.assign(w * 1.1)
            if i == 8:
                raise ValueError("stop")
            v.assign_add(tf.reduce_sum(w))
    except ValueError:
        pass
    after = float(v) + float(tf.reduce_sum(w))
    del it
    return [after], [w.numpy(), v.numpy()]


def test_exception_while_the_loop_generator_is_still_referenced():
    compare(exception_with_generator_held)


def exception_caught_inside_body(loop):
    w = tf.Variable(np.ones(3, np.float32))
    out = []
    for i in loop(range(14)):
        try:
            w.assign(w * 1.05)
            if i % 4 == 2:
                raise RuntimeError("skip")
            w.assign_sub(0.01 * w)
        except RuntimeError:
            out.append("skip")
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_exception_caught_inside_the_body():
    compare(exception_caught_inside_body)


def runtime_error_run(use_terra, read):
    """A gather whose index (computed in the program) goes out of range at the 5th iteration;
    the error is caught around the whole ``with`` (where it surfaces may differ from eager)."""

    def fn():
        vec = tf.Variable(np.arange(4, dtype=np.float32))
        counter = tf.Variable(0.0)
        w = tf.Variable(0.0)
        seen = []
        terra = Terra(**VARIANT) if use_terra else contextlib.nullcontext()
        try:
            with terra:
                loop = terra.loop if use_terra else (lambda it: it)
                for _ in loop(range(10)):
                    w.assign_add(1.0)  # issued before the failing op: eager keeps it
                    k = tf.cast(counter, tf.int32)
                    y = tf.gather(vec * 1.0, k)  # index 4 is out of range at the 5th iteration
                    counter.assign_add(1.0)  # issued after it: eager never runs it
                    seen.append(y)
                    if read:
                        float(y)
        except tf.errors.InvalidArgumentError:
            pass
        return float(w), float(counter)

    return in_thread(fn, TIMEOUT)


def test_runtime_error_in_the_program_commits_like_eager():
    eager = runtime_error_run(False, read=False)
    assert eager == (5.0, 4.0)
    assert runtime_error_run(True, read=False) == eager
    assert not graph_threads()


def test_runtime_error_surfacing_at_a_read_ends_the_iteration_cleanly():
    unraisable = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda info: unraisable.append(info.exc_value)
    try:
        whole = runtime_error_run(True, read=True)
    finally:
        sys.unraisablehook = previous
    assert not unraisable, unraisable
    assert whole == runtime_error_run(False, read=True)


# -- variables ------------------------------------------------------------------------------


def variable_mix(loop):
    v = tf.Variable(np.array([1.0, 2.0], np.float32))
    c = tf.Variable(0, dtype=tf.int64)
    out = []
    for i in loop(range(14)):
        before = v.read_value()
        v.assign(v * 0.5 + 1.0)
        mid = v + 0.0
        v.assign_add(before * 0.1)
        if i % 2:
            v.assign_sub(mid * 0.01)
        c.assign_add(1)
        after = v.read_value()
        out.append((float(before[0]), float(mid[1]), float(after[0]), int(c)))
    return out, [v.numpy(), c.numpy()]


def test_variable_writes_mixed_with_reads_in_one_iteration():
    compare(variable_mix)


def test_variable_writes_mixed_with_reads_stay_in_the_program():
    _, _, _, terra = run_whole(variable_mix)
    assert "coexec" in phases(terra), (phases(terra), terra.explain())


def written_var_read_unfetched(loop):
    """Reads after writes whose values are never fetched mid-iteration, only at the end."""
    v = tf.Variable(np.array([1.0, 2.0], np.float32))
    u = tf.Variable(np.zeros(2, np.float32))
    for i in loop(range(14)):
        v.assign(v * 0.9)
        u.assign(v + u)  # reads v after its write
        v.assign_add(u * 0.01)
        if i % 3 == 0:
            u.assign(u * 0.5)
    return [], [v.numpy(), u.numpy()]


def test_reads_of_a_variable_after_its_write_in_the_same_iteration():
    terra = compare(written_var_read_unfetched)
    assert phases(terra)[-3:] == ["coexec"] * 3


# -- tapes, optimizers, keras -----------------------------------------------------------------


def tape_through_loop(loop):
    w = tf.Variable(np.array([[0.5, -0.2], [0.1, 0.3]], np.float32))
    b = tf.Variable(np.zeros(2, np.float32))
    opt = keras.optimizers.Adam(0.01)
    out = []
    for i in loop(range(14)):
        x = tf.constant([[1.0, 2.0]])
        with tf.GradientTape() as tape:
            h = x
            for t in range(1 + i % 3):
                h = tf.tanh(h @ w + b)
                if t % 2:
                    h = h * 0.5
            loss = tf.reduce_sum(h * h)
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        out.append(float(loss))
    return out, [w.numpy(), b.numpy()] + [v.numpy() for v in opt.variables]


def test_gradient_tape_through_a_loop_with_adam_slots():
    compare(tape_through_loop)


def keras_branchy(loop):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dropout(0.2, seed=3), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(0.01)
    rng = np.random.default_rng(5)
    out = []
    for i in loop(range(14)):
        x = rng.normal(size=(8, 4)).astype("float32")
        y = x.sum(axis=1, keepdims=True)
        with tf.GradientTape() as tape:
            pred = model(x, training=i % 2 == 0)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, model.trainable_variables)
        if i % 3 == 0:
            grads = [g * 0.5 for g in grads]
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append(float(loss))
    return out, [v.numpy() for v in model.weights] + [v.numpy() for v in opt.variables]


def test_keras_dropout_alternating_training_with_branchy_gradients():
    compare(keras_branchy)


def persistent_tape(loop):
    w = tf.Variable(np.array([0.5, -0.5], np.float32))
    out = []
    for _i in loop(range(12)):
        with tf.GradientTape(persistent=True) as tape:
            a = tf.reduce_sum(w * w)
            b = tf.reduce_sum(tf.sin(w))
        ga = tape.gradient(a, w)
        gb = tape.gradient(b, w)
        w.assign_sub(0.1 * (ga + gb))
        out.append(float(a))
    return out, [w.numpy()]


def test_persistent_tape_alive_across_the_iteration_end():
    compare(persistent_tape)


# -- stateful ops -----------------------------------------------------------------------------


def random_ops(loop):
    tf.random.set_seed(7)
    w = tf.Variable(np.zeros(3, np.float32))
    out = []
    for _i in loop(range(10)):
        noise = tf.random.uniform([3], seed=11)
        w.assign_add(noise * 0.1)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_tf_random_uniform_with_op_seeds():
    terra = compare(random_ops)
    # stateful on every path: the whole loop runs in segments, with a warning naming the op
    assert terra.program is None
    assert any("RandomUniform" in w for w in terra.caught_warnings), terra.caught_warnings


def random_on_some_paths(loop):
    tf.random.set_seed(7)
    w = tf.Variable(np.zeros(3, np.float32))
    out = []
    for i in loop(range(14)):
        w.assign(w * 0.9 + 0.1)
        if i % 4 == 3:
            w.assign_add(tf.random.uniform([3], seed=11) * 0.1)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_tf_random_on_some_paths_falls_back_and_is_explained():
    terra = compare(random_on_some_paths)
    assert terra.program is not None
    assert "coexec" in phases(terra)
    assert any("RandomUniform" in f.op_type for f in terra.explain()), terra.explain()


def generator_random(loop):
    gen = tf.random.Generator.from_seed(3)
    w = tf.Variable(np.zeros(3, np.float32))
    out = []
    for _i in loop(range(10)):
        w.assign_add(gen.normal([3]) * 0.1)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_tf_random_generator():
    terra = compare(generator_random)
    assert terra.program is None and terra.caught_warnings


def tf_print_loop(loop):
    w = tf.Variable(np.ones(2, np.float32))
    for _i in loop(range(8)):
        w.assign(w * 1.5)
        tf.print("w", w, output_stream=sys.stderr)
    return [], [w.numpy()]


def test_tf_print_equals_eager_and_is_explained(capfd):
    values, variables, _ = run_plain(tf_print_loop)
    eager_err = capfd.readouterr().err
    values2, variables2, _, terra = run_whole(tf_print_loop)
    whole_err = capfd.readouterr().err
    assert_same_variables(variables, variables2)
    assert [line for line in whole_err.splitlines() if line.startswith("w")] == \
        [line for line in eager_err.splitlines() if line.startswith("w")]
    assert terra.program is None  # PrintV2 on every path: segments, with a warning
    assert any("PrintV2" in w for w in terra.caught_warnings), terra.caught_warnings
    assert not graph_threads()


# -- long loops, alternating paths --------------------------------------------------------------


def long_alternating(loop):
    w = tf.Variable(np.ones((2, 2), np.float32))
    v = tf.Variable(0.0)
    out = []
    for i in loop(range(60)):
        y = tf.matmul(w, w) * 0.1
        if i % 2:
            w.assign(w * 0.99 + 0.01 * y)
        else:
            w.assign_sub(0.001 * y)
            v.assign_add(tf.reduce_sum(y))
        for _ in range(1 + i % 3):
            v.assign(v * 0.999)
        if i % 7 == 0:
            out.append(float(v))
    return out, [w.numpy(), v.numpy()]


def test_sixty_iterations_alternating_paths():
    terra = compare(long_alternating)
    assert phases(terra).count("coexec") >= 45, (phases(terra), terra.explain())


def late_new_path(loop):
    w = tf.Variable(np.ones(3, np.float32))
    for i in loop(range(16)):
        w.assign(w * 0.9)
        if i == 12:
            w.assign_add(tf.cos(w))  # a path first taken late
    return [], [w.numpy()]


def test_explain_names_the_late_path():
    terra = compare(late_new_path)
    (fallback, *_) = terra.explain()
    assert fallback.iteration == 12, terra.explain()
    assert "w.assign_add(tf.cos(w))" in fallback.location, fallback


# -- ordering of decisions, between-iteration code, unrolled loops that change --------------------


def case_in_loop_not_carried(loop):
    """A branch in a while-loop body whose outputs are never carried to the next trip (only
    fetched): its Case Select must still be read before the next trip's Loop Cond."""
    w = tf.Variable(np.array([0.3, 0.6], np.float32))
    out = []
    for i in loop(range(16)):
        h = w * 1.0
        for t in range(2 + i % 3):
            h = tf.tanh(h) * 1.3
            if (t * 7 + i) % 3 == 0:
                out.append(float(tf.reduce_sum(h * 2.0)))
            elif (t + i) % 3 == 1:
                out.append(float(tf.reduce_max(h)))
            else:
                out.append(round(float(tf.reduce_min(h)), 4))
        w.assign(w * 0.99)
    return out, [w.numpy()]


def test_branch_in_a_while_body_whose_outputs_are_not_carried():
    terra = compare(case_in_loop_not_carried)
    assert "coexec" in phases(terra)


def trip_only_loop(loop):
    """A loop body whose values never reach the next trip: only variable writes and a fetch."""
    w = tf.Variable(np.zeros(2, np.float32))
    out = []
    for i in loop(range(14)):
        for t in range(1 + i % 3):
            w.assign_add(tf.ones(2) * float(t + 1))
            if t % 2:
                out.append(float(w[0]))
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def test_loop_body_with_branch_and_only_variable_state():
    compare(trip_only_loop)


def generator_reading_variables(loop):
    w = tf.Variable(np.ones(3, np.float32))

    def items():
        for i in range(14):
            yield np.float32(w.numpy().sum() * 0.01 + i)  # reads the variable between iterations

    out = []
    for x in loop(items()):
        w.assign(w * 0.9 + x * 0.001)
        out.append(float(x))
    return out, [w.numpy()]


def test_the_iterable_reads_variables_between_iterations():
    compare(generator_reading_variables)


def unrolled_then_changes(loop):
    """Trip count 2 for ten iterations (an unrolled loop), then 3, then 1; the loop ends the
    iteration, so the short count is only seen at the iteration's end."""
    w = tf.Variable(np.ones(2, np.float32))
    out = []
    for i in loop(range(18)):
        out.append(float(tf.reduce_sum(w)))
        trips = 2 if i < 10 else (3 if i < 13 else 1)
        for _ in range(trips):
            w.assign(w * 1.01 + 0.01)
    return out, [w.numpy()]


def test_an_unrolled_loop_whose_trip_count_changes_late():
    compare(unrolled_then_changes)


def mixed_dtype_fetches(loop):
    w = tf.Variable(np.array([1.5, -2.0, 3.0], np.float32))
    c = tf.Variable(0, dtype=tf.int32)
    out = []
    for _i in loop(range(14)):
        idx = tf.argmax(w)
        c.assign_add(tf.cast(idx, tf.int32))
        pos = tf.reduce_sum(tf.cast(w > 0, tf.int32))
        top = tf.reduce_max(w)
        w.assign(w * -0.9 + 0.1)
        # read in another order than issued, across dtypes
        out.append((float(top), int(pos), int(idx), int(c), bool(top > 1.0)))
    return out, [w.numpy(), c.numpy()]


def test_fetches_of_several_dtypes_read_out_of_order():
    compare(mixed_dtype_fetches)


def per_trip_kept_across_iterations(loop):
    """Values of every trip kept in a list across iterations and read two iterations later."""
    w = tf.Variable(np.array([0.5, 0.25], np.float32))
    history = []
    out = []
    for i in loop(range(14)):
        h = w * 1.0
        trips = []
        for _ in range(1 + i % 3):
            h = tf.tanh(h + 0.1)
            trips.append(h)
        w.assign(h)
        history.append(trips)
        if len(history) >= 3:
            out.append([float(tf.reduce_sum(t)) for t in history[-3]])
    return out, [w.numpy()]


def test_per_trip_values_kept_and_read_two_iterations_later():
    compare(per_trip_kept_across_iterations)


def break_in_inner_loop(loop):
    w = tf.Variable(np.array([0.1, 0.2], np.float32))
    out = []
    for i in loop(range(16)):
        h = w * 1.0
        for t in range(6):
            h = h * 1.4 + 0.05
            if t >= 1 + i % 3:
                break
        w.assign(w * 0.95 + 0.01 * h)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def test_break_inside_an_inner_python_loop():
    compare(break_in_inner_loop)


def python_side_sometimes(loop):
    """An op whose input is a Python-made tensor on some iterations and a program value on
    others (python_side must not leave it out)."""
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    out = []
    for i in loop(range(16)):
        base = tf.constant([0.5, 0.5]) if i % 2 else w * 0.5
        y = tf.exp(base)  # an op on a fed or a computed input
        w.assign(w * 0.9 + 0.01 * y)
        out.append(float(tf.reduce_sum(y)))
    return out, [w.numpy()]


def test_an_op_on_a_fed_input_some_iterations_and_a_computed_one_others():
    terra = compare(python_side_sometimes)
    assert "coexec" in phases(terra)


def test_step_api_with_an_exception_inside_a_step():
    def run(use_terra):
        def fn():
            w = tf.Variable(np.ones(2, np.float32))
            v = tf.Variable(0.0)
            log = []
            terra = Terra(**VARIANT) if use_terra else None
            with terra if terra else contextlib.nullcontext():
                for i in range(12):
                    try:
                        with terra.step() if terra else contextlib.nullcontext():
                            w.assign(w * 1.1)
                            if i % 5 == 4:
                                raise ValueError("bad")
                            v.assign_add(tf.reduce_sum(w))
                            log.append(float(v))
                    except ValueError:
                        log.append("bad")
            return log, [w.numpy(), v.numpy()]
        return in_thread(fn, TIMEOUT)

    log, variables = run(False)
    log2, variables2 = run(True)
    assert_same_values(log2, log)
    assert_same_variables(variables, variables2)
    assert not graph_threads()
