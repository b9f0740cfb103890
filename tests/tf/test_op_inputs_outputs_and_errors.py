"""What ops take and give back equals eager: lists an op returned and changed by Python, numpy
buffers reused after the op, ``set_shape``, output shapes that depend on values, tuple shape
arguments, one Python number fed to inputs of two dtypes; and what errors do: a runtime error in the
graph caught while the loop goes on, a failing op stopping the side effects issued after it, an op
failing on real values after one that failed in the graph (eager raises the first), strict mode, a
value made before a failing write read afterwards; an output keyed by ``ref()``. (Each once broke
co-execution; they stay as regressions.) Each also asserts what ran (what_ran.py): every iteration
after the two traced ones co-executed, in segments."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_coexecuted, assert_fell_back, phases

from terra_nb import Terra


def both(body, setup, n=6):
    """``body(i, *state)`` run n times plainly and under coexec, each from a fresh ``setup()``."""

    def run(loop):
        state = setup()
        out = []
        for i in loop(range(n)):
            out.append(body(i, *state))
        return out

    plain = run(lambda it: it)
    with Terra(mode="coexec") as terra:
        co = run(terra.loop)
    return plain, co, terra


def variable():
    return (tf.Variable([1.0, 2.0, 3.0]),)


def test_changing_the_list_an_op_returned():
    def body(i, v):
        xs = tf.unstack(v * 1.0)
        xs.reverse()
        return [float(x) for x in xs]

    plain, co, terra = both(body, variable)
    assert co == plain and "coexec" in [s.phase for s in terra.stats]
    assert_coexecuted(terra, last=4)


def test_numpy_buffer_reused_after_the_op():
    def body(i, v, buf):
        buf[:] = i
        y = tf.subtract(v * 1.0, buf)  # the graph runs later: it must see the value at the call
        buf[:] = 100.0
        return float(y[0])

    plain, co, terra = both(body, lambda: (tf.Variable([0.0]), np.zeros(1, np.float32)))
    assert co == plain
    assert_coexecuted(terra, last=4)


def test_an_ops_output_keyed_by_its_ref():
    """``tensor.ref()`` (the hashable key Keras and users take for a tensor) and ``deref()``,
    on an op's output that is a placeholder in co-execution."""

    def body(i, v):
        y = v * float(i)
        seen = {y.ref(): "y"}
        assert seen[y.ref()] == "y" and y.ref().deref() is y
        return float(tf.reduce_sum(y.ref().deref()))

    plain, co, terra = both(body, variable)
    assert co == plain
    assert_coexecuted(terra, last=4)


@pytest.mark.parametrize(
    "body",
    [
        lambda i, v: tf.boolean_mask(v, v > 1.5).numpy().tolist(),
        lambda i, v: tf.image.resize(tf.reshape(v * 1.0, (1, 3, 1, 1)), (4, 4)).shape.as_list(),
    ],
    ids=["boolean_mask", "image_resize"],
)
def test_set_shape_on_placeholders(body):
    plain, co, terra = both(body, variable)
    assert co == plain
    assert_coexecuted(terra, last=4)


@pytest.mark.parametrize(
    "body",
    [
        lambda i, v: tf.pad(v * 1.0, tf.constant([[0, i % 2]])).numpy().tolist(),
        lambda i, v: tf.math.top_k(v * 1.0, k=1 + i % 2).values.numpy().tolist(),
        lambda i, v: tf.math.unsorted_segment_sum(v * 1.0, [0, 1, 1], 2 + i % 2).numpy().tolist(),
        lambda i, v: tf.scatter_nd([[0], [1], [1]], v * 1.0, [2 + i % 2]).numpy().tolist(),
        lambda i, v: tf.math.segment_sum(v * 1.0, tf.constant([0, i % 2, 1])).numpy().tolist(),
    ],
    ids=["pad", "top_k", "unsorted_segment_sum", "scatter_nd", "segment_sum"],
)
def test_output_shapes_that_depend_on_values(body):
    plain, co, terra = both(body, variable)
    assert co == plain
    assert_coexecuted(terra, last=4)  # the other value (i % 2) too, from iteration 3 on


def test_runtime_error_in_the_graph_is_caught_and_the_loop_goes_on():
    def body(i, v):
        try:
            return float(tf.gather(v * 1.0, i % 4))  # index 3 is out of range
        except tf.errors.InvalidArgumentError:
            return "caught"

    plain, co, terra = both(body, variable, n=8)
    assert co == plain and plain.count("caught") == 2
    assert_coexecuted(terra, last=6)  # iteration 3 and 7 catch the error, co-executed


def test_next_on_a_dataset_iterator_inside_the_loop():
    def body(i, it):
        try:
            return next(it).numpy().tolist()
        except StopIteration:
            return "stop"

    plain, co, terra = both(body, lambda: (iter(tf.data.Dataset.range(10).batch(3)),))
    assert co == plain and plain[-1] == "stop"
    # the body's one op is the iterator's next, which Python runs for real (no graph work
    # touches an iterator): no call to learn after one traced iteration, nothing for the graph
    # (the phase says eager: no graph work)
    assert phases(terra) == ["tracing"] + ["eager"] * 5
    assert_coexecuted(terra, last=5, plan="none")


def test_tuple_shape_arguments_co_execute_without_fallbacks():
    def body(i, v):
        v.assign(tf.reshape(v * 0.5, (-1,)))
        return float(v[0])

    plain, co, terra = both(body, variable, n=8)
    assert co == plain
    assert not terra.explain() and [s.phase for s in terra.stats][-3:] == ["coexec"] * 3
    assert_coexecuted(terra, last=6)


def test_one_python_number_fed_to_inputs_of_two_dtypes():
    def body(i, v):
        s = tf.reduce_sum(tf.reshape(v * 1.0, (1, 3)), axis=1)  # 1 as an int32 axis
        return float(tf.reduce_mean(s) ** 1)  # and 1 as a float32 exponent

    plain, co, terra = both(body, variable)
    assert co == plain and "coexec" in [s.phase for s in terra.stats]
    assert_coexecuted(terra, last=4)


def test_a_failing_op_stops_the_side_effects_issued_after_it():
    """The error surfaces later under coexec (at the next value read, here the loop's end), but
    no variable update issued after the failing op takes effect, as in eager."""

    def run(mode):
        v, params = tf.Variable([1.0]), tf.range(6.0)
        with pytest.raises(tf.errors.InvalidArgumentError), Terra(mode=mode) as terra:
            for i in terra.loop(range(10)):
                idx = tf.cast(tf.reduce_sum(v) * 0 + i, tf.int32) * 2  # bad from i == 3
                tf.gather(params, idx)
                v.assign_add(tf.ones_like(v))
        return float(v[0]), terra

    (plain, _), (co, terra) = run("eager"), run("coexec")
    assert co == plain == 4.0 and "coexec" in phases(terra)
    # every iteration ran: the gather failed in iteration 3, co-executed, and surfaced at the end
    assert phases(terra) == ["tracing"] * 2 + ["coexec"] * 8
    assert_coexecuted(terra, last=8)


def test_strict_mode_records_the_fallback_then_raises():
    from terra_nb import TerraError

    v = tf.Variable(1.0)
    strict = pytest.raises(TerraError, match="strict mode: iteration 5 fell back")
    with strict, Terra(mode="coexec", strict=True) as terra:
        for i in terra.loop(range(8)):
            v.assign(v * 1.5)
            if i >= 5:
                v.assign_add(1.0)
    assert len(terra.stats) == 6 and terra.stats[5].phase == "fallback"
    assert terra.explain()[0].iteration == 5
    assert_fell_back(terra, {5: "new op or new program location"})  # the new assign_add
    assert phases(terra) == ["tracing"] * 2 + ["coexec"] * 3 + ["fallback"]
    assert_coexecuted(terra, at_least=0.5)  # 2 to 4 co-executed, in segments
    assert all(s.python_exec >= 0 for s in terra.stats)


def two_failures_in_one_iteration(loop, fail_at: int = 9, steps: int = 14):
    """At ``fail_at`` an op on graph values fails, then one on Python's values (run in Python's
    thread at once) would too: eager raises the first only, and the loop goes on."""
    w = tf.Variable(1.0)
    y = np.arange(4, dtype="float32")
    caught = []
    for i in loop(range(steps)):
        s = np.array([0, 9 if i == fail_at else 1], "int32")
        try:
            h = tf.gather(w * y, s)  # the graph's: fails at fail_at
            d = h - tf.gather(y, s)  # Python's: would fail next
            w.assign_add(tf.reduce_sum(d) * 0.0 + 1.0)
            float(w)
        except tf.errors.InvalidArgumentError as error:
            caught.append((i, "GatherV2" in str(error), "[0, 4)" in str(error)))
    return caught, float(w)


@pytest.mark.parametrize("program", ["segments", "whole"])
def test_an_op_failing_on_real_values_raises_a_failure_the_graph_had_before_it(program):
    plain = two_failures_in_one_iteration(lambda it: it)
    with Terra(mode="coexec", program=program) as terra:
        co = two_failures_in_one_iteration(terra.loop)
    assert co == plain
    assert [i for i, *_ in plain[0]] == [9]  # eager raised once: the gather on w * y
    assert_coexecuted(terra, at_least=0.5)


def scatter_failing_at_6(loop):
    """A sum made before a scatter (an op without outputs, its segment's first write) that fails
    at iteration 6, and read in the except clause (the adversarial review of 2026-12-07, r2)."""
    v = tf.Variable(tf.zeros((5,)))
    out = []
    for i in loop(range(12)):
        idx = np.array([i % 5, 7 if i == 6 else 1], "int32")
        before = tf.reduce_sum(v) * 2.0
        try:
            v.scatter_add(tf.IndexedSlices(tf.ones([2]), idx))
            out.append(float(tf.reduce_sum(v)))
        except tf.errors.InvalidArgumentError:
            out.append(("failed", float(before)))
    return out, v.numpy().tolist()


def test_a_value_made_before_a_failing_write_stays_readable():
    """Run op by op (a short loop's young segment), the failed run's values made before the
    scatter are real, and taken as they are."""
    plain = scatter_failing_at_6(lambda it: it)
    with Terra() as terra:
        co = scatter_failing_at_6(terra.loop)
    assert co == plain and plain[0][6][0] == "failed"
    assert phases(terra)[6] == "coexec" and terra.runs_op_by_op > 0
    assert_coexecuted(terra, at_least=0.75)


def test_compiled_a_value_made_before_a_failing_write_raises_when_read():
    """Compiled, the failed run gave none of its values, and the ops before the scatter cannot
    run again (the scatter may have applied part of its update, as eager's did): reading one
    raises the failure again, never another value (README, Known limits), with a warning."""
    failure = pytest.raises(tf.errors.InvalidArgumentError, match="7 is not in")
    with warnings.catch_warnings(record=True) as said, failure:
        warnings.simplefilter("always")
        with Terra(compile_after=1) as terra:
            scatter_failing_at_6(terra.loop)
    assert phases(terra)[6] == "coexec" and terra.runs_op_by_op == 0
    # eager reads the value there: a warning says so, as for any error raised where eager's is not
    again = [w for w in said if "raises its InvalidArgumentError again" in str(w.message)]
    assert len(again) == 1 and again[0].filename == __file__, [str(w.message) for w in said]
