"""A user ``tf.function`` called again with argument specs that dispatched without tracing goes
straight to the concrete function TensorFlow picked (``regions/function_calls.py``): its
dispatch Python does not run, the same op runs, the values are eager's. Each test compares with
eager and counts what ran: calls answered without dispatch, dispatches, traces."""

import contextlib
import gc
import itertools
import logging
import logging.handlers

import keras
import numpy as np
import pytest
import tensorflow as tf
from against_eager import SEGMENTS, assert_same_variables, compare, run
from tensorflow.python.eager.polymorphic_function import tracing_compilation
from tensorflow.python.util import tf_stack
from test_coexec import assert_same_values
from test_function_calls import keras_step_functions
from what_ran import assert_coexecuted

from terra_nb import Terra
from terra_nb.regions import function_calls
from terra_nb.regions.hidden_frames import HiddenFrames


@pytest.fixture
def dispatches(monkeypatch):
    """Counts TensorFlow's dispatch of ``tf.function`` calls (``call_function``), by thread-free
    list: the loop runs in a worker thread."""
    seen = []
    original = tracing_compilation.call_function

    def counted(*args, **kwargs):
        seen.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(tracing_compilation, "call_function", counted)
    return seen


def function_rows(terra):
    return [r for r in terra.regions.rows if r.name.endswith("(tf.function)")]


def test_repeated_calls_skip_the_dispatch_and_equal_eager(dispatches):
    values, variables, _, _ = run(keras_step_functions, None)
    eager_dispatches = len(dispatches)
    dispatches.clear()
    values2, variables2, _, terra = run(keras_step_functions, SEGMENTS)
    assert_same_values(values2, values)
    assert_same_variables(variables, variables2)
    assert_coexecuted(terra, at_least=0.6, last=4)
    rows = function_rows(terra)
    assert len(rows) == 4 and all(r.state == "formed" for r in rows), rows
    hits = sum(r.hits for r in rows)
    # 12 steps x 4 calls (a first call may go to TensorFlow's initialization, not its
    # dispatch): each call eager dispatched is a hit or dispatched here too
    assert eager_dispatches >= 44 and hits + len(dispatches) == eager_dispatches
    assert hits >= 36, (hits, len(dispatches))
    assert "(tf.function)" in str(terra.explain())


def specs_and_scalars(loop):
    """One function called with two batch shapes and a Python scalar that changes every eighth
    step: each (shape, scalar) traces, then dispatches untraced (remembered), then hits."""
    w = tf.Variable(tf.ones((3, 2)))
    f = tf.function(lambda x, k: tf.matmul(x, w) * k)
    out = []
    for i in loop(range(16)):
        y = f(tf.ones((2 + i % 2, 3)) * float(i), float(i // 8))
        out.append(float(tf.reduce_sum(y)))
        w.assign_add(tf.ones((3, 2)) * 0.1)
    return out, [w.numpy(), np.float32(f.experimental_get_tracing_count())]


def test_new_argument_specs_dispatch_again_and_trace_as_eager():
    terra = compare(specs_and_scalars, SEGMENTS, at_least=0.2)
    (row,) = function_rows(terra)
    # 4 (shape, scalar) pairs, each called four times: traced, remembered, two hits; the
    # traces (compared as a variable above) are eager's
    assert row.state == "formed" and row.hits == 8, row


def lazily_built(loop):
    """A module whose tf.function creates its variable on the first call."""

    class Scale(tf.Module):
        def __init__(self):
            self.w = None

        @tf.function
        def __call__(self, x):
            if self.w is None:
                self.w = tf.Variable(tf.ones((3,)))
            self.w.assign_add(x)
            return self.w * 2.0

    scale, out = Scale(), []
    for i in loop(range(10)):
        out.append(float(tf.reduce_sum(scale(tf.ones((3,)) * float(i)))))
    return out, [scale.w.numpy()]


def test_a_function_creating_its_variables_on_the_first_call_equals_eager():
    terra = compare(lazily_built, SEGMENTS, at_least=0.5)
    (row,) = function_rows(terra)
    assert row.hits >= 5, row


def new_function_each_step(loop):
    """A new tf.function every step, each called three times (traced, remembered, a hit)."""
    out, x = [], tf.ones((2,))
    for i in loop(range(12)):
        f = tf.function(lambda t, k=float(i): t * 0.0 + tf.constant(k))
        out.append(sum(float(tf.reduce_sum(f(x))) for _ in range(3)))
        del f
        gc.collect()  # the next function may take its address (see the next test)
    return out, []


def test_a_new_function_each_step_equals_eager():
    values, _, _, _ = run(new_function_each_step, None)
    values2, _, _, terra = run(new_function_each_step, SEGMENTS)
    assert values2 == values == [6.0 * i for i in range(12)]
    rows = function_rows(terra)
    assert sum(r.hits for r in rows) == 12  # each third call
    # each collected function's row is listed as collected; the last one's, gone after the
    # loop's last call, still formed
    assert [r.reason for r in rows].count("its object was collected") == 11
    assert [r.state for r in rows].count("formed") == 1


def test_a_function_at_another_ones_address_is_not_taken_for_it(monkeypatch):
    """Every function at one address (``id`` made constant in function_calls): a function must
    not get the concrete function of another that had its address."""
    monkeypatch.setattr(function_calls, "id", lambda obj: 1, raising=False)
    x, out = tf.ones((2,)), []
    first = tf.function(lambda t: t * 1.0)
    second = tf.function(lambda t: t * 2.0)
    with Terra() as terra:
        for _ in terra.loop(range(3)):
            out += [float(tf.reduce_sum(first(x))) for _ in range(3)]
            out += [float(tf.reduce_sum(second(x))) for _ in range(3)]
    assert out == ([2.0] * 3 + [4.0] * 3) * 3
    (row,) = function_rows(terra)  # one row: one address
    assert row.hits >= 6  # each function's calls after the one remembered


def keyword_and_object(loop):
    """Keyword arguments and an object argument keep TensorFlow's dispatch."""
    layer = keras.layers.Dense(2)
    f = tf.function(lambda x, scale=1.0: x * scale)
    g = tf.function(lambda x, m: m(x))
    out = []
    for i in loop(range(6)):
        x = tf.ones((1, 3)) * float(i)
        out.append(float(tf.reduce_sum(f(x, scale=2.0)) + tf.reduce_sum(g(x, layer))))
    return out, [v.numpy() for v in layer.variables]


def test_keywords_and_objects_keep_tensorflow_dispatch(dispatches):
    terra = compare(keyword_and_object, SEGMENTS, at_least=0.5)
    assert not any(r.hits for r in function_rows(terra))


def eagerly_from_the_sixth_step(loop):
    """``tf.config.run_functions_eagerly(True)`` in the middle of the loop: from then on the
    function's Python runs on every call, as eager runs it (its list grows)."""
    ran = []

    @tf.function
    def f(x):
        ran.append(1)  # Python: runs when traced, and on every call run eagerly
        return x * 2.0

    out = []
    try:
        for i in loop(range(10)):
            if i == 6:
                tf.config.run_functions_eagerly(True)
            out.append(float(tf.reduce_sum(f(tf.ones((2,)) * float(i)))))
    finally:
        tf.config.run_functions_eagerly(False)
    return out + [len(ran)], []


def test_functions_run_eagerly_midway_run_their_python():
    values, _, _, _ = run(eagerly_from_the_sixth_step, None)
    values2, _, _, terra = run(eagerly_from_the_sixth_step, SEGMENTS)
    assert values2 == values and values[-1] == 5  # one trace, four calls run eagerly
    assert sum(r.hits for r in function_rows(terra)) >= 3  # steps 2-5 before the switch


_RUNS = itertools.count()


def a_new_shape_every_step(loop):
    """Three calls with one shape and one with a new shape every step: one call in four traces,
    too few for TensorFlow's retracing warning, as long as the calls answered without
    dispatch are counted too."""
    # TensorFlow keeps call counts per code object (equal code, one count): a new name per run
    # gives each run its own, so the runs do not add up
    name, scope = f"double_sum_{next(_RUNS)}", {"tf": tf}
    exec(f"def {name}(x):\n    return tf.reduce_sum(x * 2.0)", scope)  # noqa: S102
    f = tf.function(scope[name])
    out = []
    for i in loop(range(10)):
        out += [float(f(tf.ones((3,)))) for _ in range(3)] + [float(f(tf.ones((4 + i,))))]
    return out, []


def test_tensorflows_retracing_warnings_stay_eagers():
    logger = logging.getLogger("tensorflow")
    for options in (None, SEGMENTS):
        with contextlib.ExitStack() as stack:
            handler = logging.handlers.BufferingHandler(100)
            logger.addHandler(handler)
            stack.callback(logger.removeHandler, handler)
            values, _, _, terra = run(a_new_shape_every_step, options)
        said = [r.getMessage() for r in handler.buffer if "retracing" in r.getMessage()]
        if options is None:
            eager_values, eager_said = values, said
    assert values == eager_values
    assert eager_said == [], eager_said  # one call in four traced: no warning
    assert said == eager_said
    assert sum(r.hits for r in function_rows(terra)) >= 20


def numpy_kinds(loop):
    """Numpy arguments: an array (keyed like a tensor of its dtype), a numpy scalar (keeps
    TensorFlow's dispatch), an array cast by an input signature, and an array handed to a
    function run eagerly (its Python sees the array itself)."""
    seen = []
    f = tf.function(lambda x, s: tf.reduce_sum(x) * tf.cast(s, tf.float64))
    signed = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec((None, 3))])

    def python_of(x):
        seen.append(type(x).__name__)
        return tf.reduce_sum(x)

    plain = tf.function(python_of)
    out, total = [], tf.constant(0.0, tf.float64)
    for i in loop(range(8)):
        x = np.full((2, 3), float(i))  # float64
        total += f(x, np.float32(0.5)) + tf.cast(tf.reduce_sum(signed(x)), tf.float64)
        if i == 5:
            tf.config.run_functions_eagerly(True)
        try:
            out.append(float(plain(x)))
        finally:
            tf.config.run_functions_eagerly(False)
    return out + [float(total)] + seen, []


def test_numpy_arguments_dispatch_as_tensorflow_does():
    # the signed function's output shape is not static, so its call and what it feeds run for
    # real in co-executed iterations (plan "none"), with or without function_calls
    terra = compare(numpy_kinds, SEGMENTS, at_least=0.4, plan="none")
    # a numpy scalar, an input signature: TensorFlow's dispatch, no row
    (row,) = function_rows(terra)
    assert row.name == "python_of (tf.function)" and row.hits >= 3  # an array: a float64 tensor


def a_variable_on_a_later_trace(loop):
    """A trace that creates a variable (refused by TensorFlow) flips the function's tracing
    options: every spec traces anew, reading the Python state of then."""
    k = {"scale": 2.0, "make": False}

    @tf.function
    def f(x):
        if k["make"]:
            tf.Variable(1.0)
        return x * k["scale"]

    out = []
    for i in loop(range(8)):
        if i == 2:
            k.update(make=True, scale=10.0)
            try:
                f(tf.ones([3]))
            except ValueError as error:
                out.append(type(error).__name__)
            k["make"] = False
        out.append(float(f(tf.constant(1.0))))
    return out + [f.experimental_get_tracing_count()], []


def test_a_variable_created_on_a_later_trace_retraces_every_spec():
    # every value is read at once: nothing is left for the graph to run (plan "none")
    terra = compare(a_variable_on_a_later_trace, SEGMENTS, at_least=0.3, plan="none")
    (row,) = function_rows(terra)
    assert row.hits >= 3, row  # from iteration 4, on the new trace


def failing_calls(loop):
    """Calls that fail at run time are no calls for TensorFlow's retracing count."""
    name, scope = f"positive_{next(_RUNS)}", {"tf": tf}
    exec(f"def {name}(x):\n    tf.debugging.assert_positive(x)\n    return x", scope)  # noqa: S102
    g, failed = tf.function(scope[name]), 0
    for i in loop(range(6)):
        if i < 2:
            g(tf.ones([1]))
            continue
        g(tf.ones([i + 2]))  # a new shape: traces
        for _ in range(3):
            try:
                g(-tf.ones([1]))
            except tf.errors.InvalidArgumentError:
                failed += 1
        g(tf.ones([1]))
    return [failed], []


def test_calls_that_fail_are_not_counted_for_retracing_warnings():
    logger, said = logging.getLogger("tensorflow"), {}
    for label, options in (("eager", None), ("terra", SEGMENTS)):
        handler = logging.handlers.BufferingHandler(100)
        logger.addHandler(handler)
        try:
            values, _, _, terra = run(failing_calls, options)
        finally:
            logger.removeHandler(handler)
        said[label] = (values, [r.getMessage()[:40] for r in handler.buffer
                                if "retracing" in r.getMessage()])
    assert said["terra"] == said["eager"] and said["eager"][1], said
    assert sum(r.hits for r in function_rows(terra)) >= 3  # the calls that returned


def unconvertible_arrays(loop):
    """Numpy arrays TensorFlow cannot convert: its own dispatch traces and raises its error."""

    @tf.function
    def f(x):
        print("traced")
        return x

    out = []
    for _ in loop(range(3)):
        for bad in (np.array([1, "a"], dtype=object), np.array(["2020-01-01"], "datetime64[D]")):
            try:
                f(bad)
            except (TypeError, ValueError) as error:
                out.append(f"{type(error).__name__}: {str(error)[:60]}")
    return out + [f.experimental_get_tracing_count()], []


def test_arrays_tensorflow_cannot_convert_keep_its_dispatch():
    values, _, printed, _ = run(unconvertible_arrays, None)
    assert printed.count("traced") >= 1 and len(values) == 7
    compare(unconvertible_arrays, SEGMENTS, at_least=0.3, plan="none")  # no op ever runs


def nan_on_the_last_step(through_a_layer: bool):
    """A function first traced in the loop (called directly, or by a layer's ``call``) fails at
    run time: its error names where its node was defined, the user's lines only (and Keras'),
    no frame of terra-nb's wrappers."""

    def program(loop):
        @tf.function
        def checked(x):
            tf.debugging.check_numerics(x, "bad")
            return x * 2.0

        class Checked(keras.layers.Layer):
            def call(self, x):
                return checked(x)

        step, out = Checked() if through_a_layer else checked, []
        for i in loop(range(4)):
            try:
                out.append(float(tf.reduce_sum(step(tf.constant([float("nan") if i == 3
                                                                  else 1.0])))))
            except tf.errors.InvalidArgumentError as error:
                out.append(str(error))
        return out, []

    return program


@pytest.mark.parametrize("through_a_layer", [False, True])
def test_an_error_names_the_users_lines_as_in_eager(through_a_layer):
    program = nan_on_the_last_step(through_a_layer)
    values, _, _, _ = run(program, None)
    values2, _, _, terra = run(program, SEGMENTS)
    lines = [line for line in values[-1].splitlines() if __file__ in line]
    assert len(lines) == 2 + through_a_layer  # the step's line, (the layer's call,) the op
    assert values2[:3] == values[:3] and "terra_nb" not in values2[-1]
    assert [line for line in values2[-1].splitlines() if __file__ in line] == lines
    assert terra.regions.rows  # the calls went through the region wrappers


def test_hidden_frames_hand_their_files_over_only_when_the_filters_around_change():
    """Each regions iteration enters this thread's HiddenFrames again (intercept.py); its files
    go to TensorFlow's stack filter again only when the filters around it changed."""
    hidden, handed = HiddenFrames(), []

    class Handed:
        def update_to(self, files):
            handed.append(frozenset(files))

    hidden.internal_set = Handed()  # nothing traces inside: TensorFlow never reads it here
    for _ in range(3):
        with hidden:
            pass
    assert len(handed) == 1 and any("terra_nb" in f for f in handed[0])

    class Around(tf_stack.StackTraceFilter):
        def get_filtered_filenames(self):
            return frozenset({"/elsewhere.py"})

    with Around(), hidden:
        pass
    assert len(handed) == 2 and handed[1] == handed[0] | {"/elsewhere.py"}


def python_argument_every_call(loop):
    """A Python int that changes every few calls: 20 values, three calls each."""
    f = tf.function(lambda x, k: x * float(k))
    x = tf.ones((2,))
    return [float(tf.reduce_sum(f(x, k))) for k in loop(range(20)) for _ in range(3)], []


def test_a_function_with_a_python_argument_that_keeps_changing_is_refused():
    # a new trace every iteration: a new op each time, so the loop stays in tracing, as it should
    terra = compare(python_argument_every_call, SEGMENTS, tracing_only=True)
    (row,) = function_rows(terra)
    # each of the first 15 values: traced, remembered, one hit; the 16th to remember refuses
    assert row.state == "refused" and "argument specs" in row.reason and row.hits == 15, row


def no_arguments(loop):
    """A step of no arguments reading its data from an iterator it closes over."""
    it = iter(tf.data.Dataset.range(50).map(lambda z: tf.cast(z, tf.float32)))
    w = tf.Variable(1.0)

    @tf.function
    def step():
        w.assign_add(next(it) * 0.01)
        return w * 2.0

    return [float(step()) for _ in loop(range(8))], [w.numpy()]


def test_a_function_of_no_arguments_skips_its_dispatch():
    terra = compare(no_arguments, SEGMENTS, at_least=0.3, plan="none")
    (row,) = function_rows(terra)
    assert row.hits == 6, row  # traced, remembered, then every call
