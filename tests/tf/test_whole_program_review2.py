"""Second adversarial review of co-execution: whole program and segments.

Each program runs plainly (eager), in segments (``Terra(mode="coexec")``) and in the whole program
(``Terra(mode="coexec", program="whole")``), in a worker thread with a timeout (a deadlock fails
the test instead of hanging), and the Python values, printed text and variables are compared.
Areas: runtime op errors at several points, control flow in the body (the ``loop_ranges`` change),
values fetched out of order, constants of several Python types, ``learned=`` reuse, datasets,
lazily created variables, and bookkeeping that must not grow.
"""

import contextlib
import io
import math
import threading
import time
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_coexec import assert_same_values, graph_threads
from watchdog import in_thread

from terra_nb import Terra
from terra_nb.location import loop_ranges

SEGMENTS = {"mode": "coexec"}
WHOLE = {"mode": "coexec", "program": "whole"}
MODES = {"segments": SEGMENTS, "whole": WHOLE}
TIMEOUT = 120  # seconds per run: longer means a deadlock


def _nan_safe(x):
    """NaN compares unequal to itself: make it a marker so values can be compared."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, (list, tuple)):
        return type(x)(_nan_safe(y) for y in x)
    return x


def run(program, options, seed=0):
    def fn():
        keras.utils.set_random_seed(seed)
        out = io.StringIO()
        terra = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(out):
                if options is None:
                    values, variables = program(lambda it: it)
                else:
                    with Terra(**options) as terra:
                        values, variables = program(terra.loop)
        return _nan_safe(values), variables, out.getvalue(), terra

    return in_thread(fn, TIMEOUT)


def assert_same_variables(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-5, atol=1e-6)


def compare(program, options, seed=0):
    values, variables, printed, _ = run(program, None, seed)
    values2, variables2, printed2, terra = run(program, options, seed)
    assert_same_values(values2, values)
    assert printed2 == printed
    assert_same_variables(variables, variables2)
    assert not graph_threads()
    return terra


def phases(terra):
    return [s.phase for s in terra.stats]


# Bugs this review found, each fixed (the tests below are their regression tests):
# - segments: an op error of an iteration Python had finished was not raised when the loop
#   ended (Terra._iterate now drains the engine);
# - whole: a flush after the run failed reached a closed queue (CancelledError) instead of
#   raising eager's error;
# - whole: values of iterations before the failing one were marked failed;
# - whole: an error raised while an iteration began left the Terra stuck "in an iteration";
# - whole: runs queued with a failed run's channels still ran on the values left in them.


def cases(programs):
    """(program, mode) parameters."""
    return [pytest.param(program, mode, id=f"{program.__name__}-{mode}")
            for program in programs for mode in MODES]


# -- runtime op errors ------------------------------------------------------------------------


def _catching(body):
    """A program running ``body(loop, state)`` and catching TensorFlow's error around the loop;
    returns what Python saw and every variable's value after the error."""

    def program(loop):
        state = {"w": tf.Variable(np.array([0.5, 1.0, 1.5], np.float32)),
                 "v": tf.Variable(0.0), "n": tf.Variable(0, dtype=tf.int32)}
        log = []
        try:
            body(loop, state, log)
        except tf.errors.InvalidArgumentError as error:
            log.append(("error", type(error).__name__))
        log.append(float(state["v"]))
        log.append(int(state["n"]))
        return log, [state[k].numpy() for k in sorted(state)]

    return program


def error_on_first_op(loop, s, log):
    vec = tf.constant([1.0, 2.0, 3.0, 4.0])
    for i in loop(range(12)):
        y = tf.gather(vec, s["n"])  # the iteration's first op: index 4 is out of range
        s["w"].assign(s["w"] * 1.01)
        s["v"].assign_add(y)
        s["n"].assign_add(1)
        if i % 3 == 0:
            log.append(float(s["v"]))


def error_inside_an_inner_loop_trip(loop, s, log):
    vec = tf.constant(np.arange(10, dtype=np.float32))
    for i in loop(range(12)):
        h = s["w"] * 1.0
        for t in range(1 + i % 3):
            k = s["n"] + t  # out of range in a late trip of iteration 7
            h = h + tf.gather(vec, k)
            s["v"].assign_add(0.5)
        s["w"].assign(h * 0.1)
        s["n"].assign_add(1)


def error_after_the_optimizer_step(loop, s, log):
    opt = keras.optimizers.SGD(0.1)
    for i in loop(range(12)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(s["w"] * s["w"])
        grads = tape.gradient(loss, [s["w"]])
        opt.apply_gradients(zip(grads, [s["w"]]))
        bad = tf.math.log(s["v"] - 5.0)  # NaN from iteration 6 on (v counts up)
        tf.debugging.check_numerics(tf.where(s["v"] > 5.5, bad, 0.0), "nan")
        s["v"].assign_add(1.0)
        s["n"].assign_add(1)
        if i % 4 == 0:
            log.append(float(loss))


def error_two_iterations_after_a_fetch(loop, s, log):
    for i in loop(range(14)):
        s["w"].assign(s["w"] + 1.0)
        if i == 6:
            log.append(float(tf.reduce_sum(s["w"])))
        size = tf.cast(tf.reduce_sum(s["w"]), tf.int32) - 30  # 3 elements until iteration 8
        y = tf.reshape(s["w"], tf.stack([size]))  # fails when size is no longer 3
        s["v"].assign_add(tf.reduce_sum(y))
        s["n"].assign_add(1)


def error_in_a_while_loop_on_a_read_value(loop, s, log):
    vec = tf.constant(np.arange(5, dtype=np.float32))
    for _ in loop(range(10)):
        j = 0
        while float(s["v"]) < 3.0 + j and j < 4:  # a read in the condition
            s["v"].assign_add(tf.gather(vec, s["n"] + j) * 0.1)
            j += 1
        s["n"].assign_add(1)
        s["w"].assign(s["w"] * 0.9)


@pytest.mark.parametrize(("body", "mode"), cases([
    error_on_first_op, error_inside_an_inner_loop_trip, error_after_the_optimizer_step,
    error_two_iterations_after_a_fetch, error_in_a_while_loop_on_a_read_value]))
def test_runtime_error_state_equals_eager(body, mode):
    compare(_catching(body), MODES[mode])


def flush_after_failed_run(loop):
    """The run fails early in the iteration; Python (slowed down) then issues an op with a fed
    value whose result it reads, which flushes the held-back feeds to the closed queues."""
    vec = tf.constant([1.0, 2.0, 3.0, 4.0])
    w = tf.Variable(np.array([0.5, 1.0], np.float32))
    k = tf.Variable(0)
    v = tf.Variable(0.0)
    log = []
    try:
        for i in loop(range(8)):
            v.assign_add(tf.gather(vec, k))  # fails at k == 4 (iteration 4)
            k.assign_add(1)
            if i >= 3:
                time.sleep(0.3)  # the program fails meanwhile
            s = w * float(i)  # a fed value
            log.append(float(tf.reduce_sum(s)))  # a read node: issue() flushes the feed
    except tf.errors.InvalidArgumentError as error:
        log.append(type(error).__name__)
    return log + [float(v), int(k)], [w.numpy(), v.numpy(), k.numpy()]


def test_flush_after_the_run_failed_raises_eager_error():
    compare(flush_after_failed_run, WHOLE)


def test_flush_after_the_run_failed_in_segments():
    compare(flush_after_failed_run, SEGMENTS)


def caught_error_continues(loop):
    """User code catches the op error inside the body (around the op and its read) and goes on."""
    vec = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])
    w = tf.Variable(np.ones(2, np.float32))
    v = tf.Variable(0.0)
    log = []
    for i in loop(range(16)):
        w.assign(w * 1.05)
        try:
            y = tf.gather(vec, i % 7)  # out of range when i % 7 >= 5
            v.assign_add(y)
            log.append(float(v))
        except tf.errors.InvalidArgumentError:
            log.append("skip")
            continue
        w.assign_add(tf.fill([2], y * 0.01))
    return log, [w.numpy(), v.numpy()]


@pytest.mark.parametrize("mode", list(MODES))
def test_op_error_caught_in_the_body_and_the_loop_goes_on(mode):
    compare(caught_error_continues, MODES[mode])


def caught_error_from_program_value(loop):
    """As above, but the failing index is computed by the program (a variable), so the error
    comes from a co-executed run, and the loop goes on after it."""
    vec = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0])
    w = tf.Variable(np.ones(2, np.float32))
    k = tf.Variable(0)
    v = tf.Variable(0.0)
    log = []
    for _ in loop(range(20)):
        w.assign(w * 1.05)
        try:
            y = tf.gather(vec, k % 7)  # out of range when k % 7 >= 5
            v.assign_add(y)
            log.append(float(v))
        except tf.errors.InvalidArgumentError:
            log.append("skip")
        k.assign_add(1)
        log.append(float(tf.reduce_sum(w)))
    return log, [w.numpy(), v.numpy(), k.numpy()]


@pytest.mark.parametrize("mode", list(MODES))
def test_program_op_error_caught_in_the_body_and_the_loop_goes_on(mode):
    compare(caught_error_from_program_value, MODES[mode])


def error_not_reached_before_python_finishes(loop):
    """No value is read: Python finishes the failing iteration (and more) before the program
    reaches the failing op. Variables after the error equal eager's; what Python logged after
    the failing op is the known limit and is not compared."""
    vec = tf.constant([1.0, 2.0, 3.0])
    w = tf.Variable(np.ones(64, np.float32))
    k = tf.Variable(0)
    v = tf.Variable(0.0)
    caught = []
    try:
        for _ in loop(range(12)):
            h = w
            for _ in range(20):  # enough work that Python is ahead of the program
                h = tf.tanh(h * 1.01 + 0.01)
            w.assign(h)
            v.assign_add(tf.gather(vec, k))  # fails at k == 3
            k.assign_add(1)
            w.assign_add(tf.ones(64) * 0.001)
    except tf.errors.InvalidArgumentError:
        caught.append("error")
    return caught + [float(v), int(k)], [w.numpy(), v.numpy(), k.numpy()]


@pytest.mark.parametrize(("program", "mode"), cases([error_not_reached_before_python_finishes]))
def test_error_python_got_past_before_the_program_failed(program, mode):
    compare(program, MODES[mode])


def error_then_values_of_earlier_iterations(loop):
    """Placeholders of iterations before the failing one are read after the error: they were
    committed, so they hold eager's values. Python ran ahead of the graph, so it also kept
    values of iterations eager never ran (the documented limit): reading those raises."""
    vec = tf.constant([1.0, 2.0, 3.0, 4.0])
    k = tf.Variable(0)
    v = tf.Variable(0.0)
    kept = []
    try:
        for _ in loop(range(10)):
            y = tf.gather(vec, k)  # fails at k == 4
            v.assign_add(y)
            k.assign_add(1)
            kept.append(v * 2.0)
    except tf.errors.InvalidArgumentError:
        pass
    values = []
    for x in kept:
        try:
            values.append(float(x))
        except tf.errors.InvalidArgumentError:
            values.append("error")
    return values, [v.numpy(), k.numpy()]


@pytest.mark.parametrize("mode", ["segments", "whole"])
def test_values_kept_from_before_the_error_are_eager(mode):
    program = error_then_values_of_earlier_iterations
    values, variables, _, _ = run(program, None)
    values2, variables2, _, terra = run(program, MODES[mode])
    assert values2[: len(values)] == values  # the iterations eager ran
    assert set(values2[len(values) :]) <= {"error"}  # issued after the failing op: never ran
    for a, b in zip(variables, variables2):
        np.testing.assert_allclose(b, a, rtol=1e-6)
    assert not [t for t in threading.enumerate() if t.name == "terra-graph-runner"]


def error_twice_in_two_loops(loop):
    """A Terra loop whose error is caught, then a second loop over the same Terra."""
    vec = tf.constant([1.0, 2.0, 3.0])
    k = tf.Variable(0)
    v = tf.Variable(0.0)
    log = []
    for attempt in range(2):
        try:
            for _ in loop(range(8)):
                v.assign_add(tf.gather(vec, k))
                k.assign_add(1)
        except tf.errors.InvalidArgumentError:
            log.append(("error", attempt, float(v), int(k)))
        k.assign(0)
    return log, [v.numpy(), k.numpy()]


@pytest.mark.parametrize(("program", "mode"), cases([error_twice_in_two_loops]))
def test_two_loops_that_both_fail(program, mode):
    compare(program, MODES[mode])


# -- control flow inside the body (loop_ranges) -----------------------------------------------


def while_with_continue_and_tensor_test(loop):
    w = tf.Variable(np.array([0.2, 0.4], np.float32))
    out = []
    for i in loop(range(14)):
        h = w * 1.0
        t = 0
        while float(tf.reduce_sum(h)) < 2.0 + (i % 3):  # a read in the while test
            t += 1
            h = h * 1.3 + 0.01
            if t % 2 == 0:
                continue
            h = h + 0.02
        w.assign(w * 0.99 + 0.001 * h)
        out.append((t, float(tf.reduce_sum(h))))
    return out, [w.numpy()]


def while_continue_without_reads(loop):
    w = tf.Variable(np.array([0.2, 0.4], np.float32))
    out = []
    for i in loop(range(16)):
        h = w * 1.0
        t = 0
        while t < 2 + i % 3:
            t += 1
            if t == 2:
                h = h * 0.5
                continue
            h = tf.tanh(h + 0.1)
        w.assign(w * 0.9 + 0.1 * h)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def nested_for_while_with_breaks_and_else(loop):
    w = tf.Variable(np.array([0.3, 0.1, 0.2], np.float32))
    out = []
    for i in loop(range(15)):
        h = w * 1.0
        for a in range(3):
            if a == i % 4:
                continue
            b = 0
            while True:
                h = h * 1.1
                b += 1
                if b > a:
                    break
            if a == 2 and i % 5 == 0:
                break
        else:
            h = h - 0.05
        w.assign(w * 0.9 + 0.05 * h)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def if_elif_chain_on_read_values(loop):
    w = tf.Variable(np.array([1.0, -1.0], np.float32))
    out = []
    for _ in loop(range(18)):
        s = float(tf.reduce_sum(w))
        if s > 0.5:
            w.assign(w - 0.3)
        elif s < -0.5:
            w.assign(w + 0.7)
        elif s > 0:
            w.assign(w * 1.5)
            continue
        else:
            w.assign(w * -1.0 + 0.01)
        out.append(float(w[0]))
    return out, [w.numpy()]


def loop_over_a_tensor(loop):
    w = tf.Variable(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32))
    out = []
    for i in loop(range(10)):
        rows = w * 0.5
        acc = tf.zeros([2])
        for r, row in enumerate(rows):  # iterating a tensor (strided slices)
            if r == i % 3:
                continue
            acc = acc + row
        for x in tf.unstack(acc):
            w.assign_add(tf.fill([3, 2], x * 0.001))
        out.append(float(tf.reduce_sum(acc)))
    return out, [w.numpy()]


def helper_with_loop(h, n):
    k = 0
    while k < n:
        k += 1
        if k == 1:
            continue
        h = h * 0.9 + 0.1
    return h


def loop_in_a_called_helper(loop):
    w = tf.Variable(np.array([0.5, 0.6], np.float32))
    out = []
    for i in loop(range(14)):
        h = helper_with_loop(w * 1.0, 1 + i % 4)
        h = helper_with_loop(h, 3)  # the same helper from another call site
        w.assign(h)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def try_except_inside_inner_loop(loop):
    w = tf.Variable(np.array([0.5, 0.6], np.float32))
    out = []
    for i in loop(range(14)):
        h = w * 1.0
        for t in range(4):
            try:
                if (t + i) % 3 == 0:
                    raise KeyError(t)
                h = h * 1.05
            except KeyError:
                h = h - 0.01
                continue
            finally:
                h = h + 0.001
            h = tf.sqrt(h * h + 0.01)
        w.assign(w * 0.5 + 0.5 * h)
        out.append(float(tf.reduce_sum(h)))
    return out, [w.numpy()]


def while_true_as_the_body(loop):
    """The body is a ``while True`` with breaks and continues; the training loop itself is a
    ``for`` inside a ``while`` of the user (only the for is the Terra loop)."""
    w = tf.Variable(np.array([0.5, 0.6], np.float32))
    out = []
    epoch = 0
    while epoch < 2:
        epoch += 1
        for i in loop(range(8)):
            n = 0
            while True:
                n += 1
                w.assign(w * 1.01)
                if n < 1 + i % 3:
                    continue
                if n > 5:
                    break
                break
            out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


CONTROL_FLOW = [while_with_continue_and_tensor_test, while_continue_without_reads,
                nested_for_while_with_breaks_and_else, if_elif_chain_on_read_values,
                loop_over_a_tensor, loop_in_a_called_helper, try_except_inside_inner_loop,
                while_true_as_the_body]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", CONTROL_FLOW, ids=lambda p: p.__name__)
def test_control_flow_in_the_body_equals_eager(program, mode):
    compare(program, MODES[mode])


def test_loop_ranges_of_a_while_with_continue_are_one_loop():
    ranges = loop_ranges(while_continue_without_reads.__code__)
    # the training for-loop and one while loop (continue and the test at the bottom merged)
    assert len(ranges) == 2, ranges
    outer, inner = ranges
    assert outer[0] < inner[0] <= inner[1] <= outer[1]


def test_loop_ranges_of_a_helper_with_a_while_and_continue():
    assert len(loop_ranges(helper_with_loop.__code__)) == 1


# -- values fetched out of order ---------------------------------------------------------------


def kept_and_read_in_reverse(loop):
    w = tf.Variable(np.array([0.5, -0.25], np.float32))
    kept = []
    ints = {}
    for i in loop(range(40)):
        y = tf.reduce_sum(w * w)
        kept.append(y)
        ints[i] = tf.argmax(w)
        w.assign(w * -0.97 + 0.01)
    out = [float(y) for y in reversed(kept)]
    out += [int(ints[i]) for i in sorted(ints, reverse=True)]
    return out, [w.numpy()]


def read_five_back(loop):
    w = tf.Variable(np.array([0.5, -0.25], np.float32))
    kept = []
    out = []
    for i in loop(range(30)):
        a = tf.reduce_sum(w)
        b = tf.reduce_max(w)
        kept.append((a, b))
        w.assign(tf.tanh(w * 1.3 + 0.05))
        if i >= 5 and i % 2:
            old_a, old_b = kept[i - 5]
            out.append((float(old_b), float(old_a), float(kept[i - 1][0])))
    return out, [w.numpy()]


def read_in_a_different_order_each_iteration(loop):
    w = tf.Variable(np.array([0.5, -0.25, 1.0], np.float32))
    out = []
    for i in loop(range(20)):
        xs = [tf.reduce_sum(w * k) for k in (1.0, 2.0, 3.0)]
        w.assign(w * 0.9 + 0.1)
        order = [(i + j) % 3 for j in range(3)]
        if i % 2:
            order.reverse()
        out.append([float(xs[j]) for j in order])
    return out, [w.numpy()]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", [kept_and_read_in_reverse, read_five_back,
                                     read_in_a_different_order_each_iteration],
                         ids=lambda p: p.__name__)
def test_values_read_out_of_order(program, mode):
    compare(program, MODES[mode])


# -- constants of several Python types ---------------------------------------------------------


def mixed_number_types(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    kinds = [1, 1.0, np.float32(1.0), np.float64(1.0), np.int64(1), 2, 0.5]
    out = []
    for i in loop(range(40)):
        c = kinds[0] if i < 12 else kinds[i % len(kinds)]
        w.assign(w * 0.99 + c * 0.01)
        out.append(float(w[0]))
    return out, [w.numpy()]


def nan_constant(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    m = tf.Variable(np.zeros(2, np.float32))
    out = []
    for i in loop(range(30)):
        c = float("nan") if i < 20 else 0.25
        m.assign(tf.maximum(w * 0.0 + c, -1.0))  # NaN then 0.25
        w.assign(w * 0.9 + 0.1)
        out.append(float(m[0]))
    return out, [w.numpy(), m.numpy()]


def value_changes_after_many_iterations(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    out = []
    for i in loop(range(70)):
        lr = 0.1 if i < 55 else 0.01
        scale = np.array([1.0, 2.0], np.float32) if i < 60 else np.array([2.0, 1.0], np.float32)
        w.assign(w - lr * (w - scale))
        if i % 5 == 0:
            out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def bool_and_int_flags(loop):
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    c = tf.Variable(0, dtype=tf.int64)
    out = []
    for i in loop(range(36)):
        flag = i < 25 or i % 2 == 0
        y = tf.where(tf.constant(flag), w * 2.0, w * 0.5)
        w.assign(y * 0.7 + 0.1)
        c.assign_add(int(flag) * 3)
        out.append((float(w[1]), int(c)))
    return out, [w.numpy(), c.numpy()]


def int_then_float_same_value(loop):
    """The same number fed as an int (int32 tensor) and as a float; via ``tf.cast`` both end as
    float32, but eager converts them to different dtypes."""
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    out = []
    for i in loop(range(30)):
        c = 3 if i < 15 or i % 3 else 3.5
        w.assign(w * 0.9 + tf.cast(c, tf.float32) * 0.01)
        out.append(float(w[0]))
    return out, [w.numpy()]


def small_array_constant_mutated_in_place(loop):
    """A numpy array fed every iteration and mutated in place by Python after 20 iterations."""
    w = tf.Variable(np.array([1.0, 2.0], np.float32))
    scale = np.array([0.5, 0.25], np.float32)
    out = []
    for i in loop(range(30)):
        if i == 20:
            scale[0] = 2.0  # same object, new content
        w.assign(w * 0.9 + tf.constant(scale) * 0.1)
        y = w * scale
        out.append(float(tf.reduce_sum(y)))
    return out, [w.numpy()]


CONSTANTS = [mixed_number_types, nan_constant, value_changes_after_many_iterations,
             bool_and_int_flags, int_then_float_same_value, small_array_constant_mutated_in_place]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", CONSTANTS, ids=lambda p: p.__name__)
def test_constants_equal_eager(program, mode):
    compare(program, MODES[mode])


# -- learned= reuse, iterables, lazily created variables, bookkeeping --------------------------


def lr_program(lr):
    def program(loop):
        w = tf.Variable(np.array([1.0, -2.0], np.float32))
        out = []
        for _ in loop(range(12)):
            w.assign(w - lr * tf.tanh(w))
            out.append(float(tf.reduce_sum(w)))
        return out, [w.numpy()]
    return program


def test_learned_reused_by_a_second_whole_loop_with_new_variables_and_constants():
    def run_two(use_terra):
        def fn():
            results = []
            learned = None
            for lr in (0.1, 0.3):
                if use_terra:
                    with Terra(**WHOLE, learned=learned) as terra:
                        results.append(lr_program(lr)(terra.loop))
                    learned = terra.learned
                else:
                    results.append(lr_program(lr)(lambda it: it))
            return results
        return in_thread(fn, TIMEOUT)

    eager, whole = run_two(False), run_two(True)
    for (v1, w1), (v2, w2) in zip(eager, whole):
        assert_same_values(v2, v1)
        assert_same_variables(w1, w2)
    assert not graph_threads()


def dataset_iterable(loop):
    xs = np.linspace(-1, 1, 22).astype(np.float32).reshape(11, 2)
    ds = tf.data.Dataset.from_tensor_slices(xs).batch(3)  # a last partial batch
    w = tf.Variable(np.array([0.5, -0.5], np.float32))
    out = []
    for _epoch in range(2):
        for batch in loop(ds):
            y = tf.reduce_sum(batch * w, axis=1)
            w.assign_add(0.01 * tf.reduce_mean(batch, axis=0) * tf.reduce_mean(y))
            out.append(float(tf.reduce_sum(y)))
    return out, [w.numpy()]


def generator_of_tensors(loop):
    w = tf.Variable(np.array([0.5, -0.5], np.float32))

    def gen():
        for i in range(16):
            yield tf.constant([float(i), 1.0]) * 0.1, i % 3

    out = []
    for x, k in loop(gen()):
        for _ in range(k):
            w.assign(w * 0.95 + x)
        out.append(float(tf.reduce_sum(w)))
    return out, [w.numpy()]


def lazily_built_layer(loop):
    first = keras.layers.Dense(3)
    late = keras.layers.Dense(2)  # built at iteration 5
    opt = keras.optimizers.Adam(0.01)  # slots made at the first apply
    opt_late = keras.optimizers.Adam(0.02)  # slots made at iteration 5
    x = tf.constant(np.linspace(0, 1, 8).reshape(2, 4).astype(np.float32))
    out = []
    for i in loop(range(14)):
        with tf.GradientTape() as tape:
            h = first(x)
            if i >= 5:
                h = late(h)
            loss = tf.reduce_mean(h * h)
        variables = first.trainable_variables + (late.trainable_variables if i >= 5 else [])
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads[:2], variables[:2]))
        if i >= 5:
            opt_late.apply_gradients(zip(grads[2:], variables[2:]))
        out.append(float(loss))
    return out, [v.numpy() for v in first.weights + late.weights]


def variable_made_once_mid_loop(loop):
    w = tf.Variable(np.array([0.5, -0.5], np.float32))
    extra = []
    out = []
    for i in loop(range(14)):
        if i == 6:
            extra.append(tf.Variable(w * 2.0))
        w.assign(w * 0.9)
        for e in extra:
            e.assign_add(w)
        out.append(float(tf.reduce_sum(w)) + sum(float(tf.reduce_sum(e)) for e in extra))
    return out, [w.numpy()] + [e.numpy() for e in extra]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("program", [dataset_iterable, generator_of_tensors, lazily_built_layer,
                                     variable_made_once_mid_loop], ids=lambda p: p.__name__)
def test_iterables_and_lazy_variables(program, mode):
    compare(program, MODES[mode])


def many_small_iterations(loop):
    w = tf.Variable(np.array([0.5, -0.5], np.float32))
    kept = []
    out = []
    for i in loop(range(200)):
        y = tf.reduce_sum(w * w)
        w.assign(w * 0.999 + 0.001)
        kept.append(y)
        if i % 50 == 0:
            out.append(float(y))
    out.append(float(kept[3]))
    return out, [w.numpy()]


def test_two_hundred_iterations_keep_bookkeeping_bounded():
    terra = compare(many_small_iterations, WHOLE)
    whole = terra._engine.runner.whole
    assert len(whole._unfinished) <= 3
    assert sum(len(o) for o in whole._fetch_order.values()) <= 3
