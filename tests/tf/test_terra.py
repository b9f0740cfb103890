"""The public Terra API in trace and eager modes: results equal the plain loop; clear errors.
Nothing here co-executes: the tests that compare results assert that too (what_ran.py)."""

import gc
import weakref

import keras
import numpy as np
import pytest
import tensorflow as tf
from what_ran import assert_stayed_in_tracing, phases, plan_of

from terra_nb import Terra, TerraUsageError, capture


def hooks_removed() -> bool:
    """True once no capture hook is left (placeholders of earlier co-executed tests, which keep
    the hooks until they are garbage, are collected first)."""
    for _ in range(3):  # finalizers can free more cycles
        gc.collect()
    return not capture.is_installed()


def batches():
    rng = np.random.default_rng(0)
    for _ in range(6):
        x = rng.normal(size=(8, 3)).astype("float32")
        yield x, x.sum(axis=1, keepdims=True)


def train(loop_wrapper):
    """Train a small Keras model; Python reads values, branches on them and mutates objects."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(5, activation="tanh"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(1),
        ]
    )
    opt = keras.optimizers.Adam(0.05)
    log = {"losses": [], "big": 0}
    for x, y in loop_wrapper(batches()):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        value = float(loss)
        log["losses"].append(value)
        if value > 1.0:
            log["big"] += 1
    weights = [v.numpy() for v in model.weights + opt.variables]
    return weights, log


@pytest.mark.parametrize("mode", ["trace", "eager"])
def test_mode_leaves_every_value_as_the_plain_loop(mode):
    plain_weights, plain_log = train(lambda it: it)
    with Terra(mode=mode) as terra:
        weights, log = train(terra.loop)
    assert log == plain_log
    assert len(weights) == len(plain_weights)
    for a, b in zip(weights, plain_weights):
        np.testing.assert_array_equal(a, b)
    assert [s.iteration for s in terra.stats] == list(range(6))
    assert all(s.ended == "completed" for s in terra.stats)
    assert_stayed_in_tracing(terra)  # trace mode traces every iteration, eager runs each as is
    assert phases(terra) == [{"trace": "tracing", "eager": "eager"}[mode]] * 6
    assert plan_of(terra) == "none" and not terra.explain()  # nothing ran in a graph
    if mode == "trace":
        assert all(s.ops > 0 and s.fetches >= 1 for s in terra.stats)
        assert terra.stats[-1].covered
        fetched = [n.op_type for n in terra.graph.nodes if n.fetches]
        assert "Mean" in fetched  # float(loss); Keras' dropout reads its seed too
    else:
        assert all(s.ops is None and s.phase == "eager" for s in terra.stats)
    assert [s.iteration for s in terra.spans] == list(range(6))
    assert hooks_removed()


def test_step_context_for_while_loops():
    v = tf.Variable(0.0)
    with Terra(mode="trace") as terra:
        while float(v) < 3:  # the condition runs outside the iterations
            with terra.step():
                v.assign_add(1.0)
    assert float(v) == 3.0
    assert len(terra.stats) == 3 and terra.stats[-1].covered
    assert phases(terra) == ["tracing"] * 3 and plan_of(terra) == "none"


def test_break_and_exception_end_the_iteration_and_clean_up():
    with Terra(mode="trace") as terra:
        for i in terra.loop(range(10)):
            tf.constant(1.0) + i
            if i == 2:
                break
    assert [s.ended for s in terra.stats] == ["completed", "completed", "stopped"]
    with pytest.raises(ZeroDivisionError), Terra(mode="trace") as terra2:
        for i in terra2.loop(range(10)):
            tf.constant(1.0) * 2.0
            if i == 1:
                raise ZeroDivisionError("boom")
    assert [s.ended for s in terra2.stats] == ["completed", "stopped"]
    assert hooks_removed()


def test_learned_state_is_reused_by_a_later_terra():
    def run(learned=None):
        x = tf.constant([1.0, 2.0])
        with Terra(mode="trace", learned=learned) as terra:
            for _ in terra.loop(range(2)):
                float(tf.reduce_sum(tf.exp(x)))
        return terra

    first = run()
    assert [s.covered for s in first.stats] == [False, True]
    second = run(first.learned)
    assert [s.covered for s in second.stats] == [True, True]
    assert second.graph == first.graph.__class__.from_json(second.graph.to_json())


def test_unknown_mode():
    with pytest.raises(TerraUsageError, match="unknown mode 'fast'; choose one of coexec"):
        Terra(mode="fast")


def test_loop_needs_an_iterable():
    with Terra(mode="trace") as terra, pytest.raises(TerraUsageError, match="got int"):
        terra.loop(5)


def test_nested_contexts_are_refused():
    outer, inner = Terra(mode="trace"), Terra(mode="trace")
    with outer, pytest.raises(TerraUsageError, match="cannot be nested"):
        inner.__enter__()
    assert hooks_removed()


def test_use_after_close_and_outside_context():
    terra = Terra(mode="trace")
    with pytest.raises(TerraUsageError, match="inside `with Terra"):
        terra.loop([1])
    with terra:
        pass
    with pytest.raises(TerraUsageError, match="closed Terra"):
        terra.loop([1])
    with pytest.raises(TerraUsageError, match="closed Terra"):
        terra.step()
    with pytest.raises(TerraUsageError, match="already used"):
        terra.__enter__()


def test_bad_options():
    with pytest.raises(TerraUsageError, match="max_fallbacks"):
        Terra(mode="trace", max_fallbacks=0)
    with pytest.raises(TerraUsageError, match="learned="):
        Terra(mode="trace", learned=object())


def test_learned_state_does_not_keep_dropped_variables():
    """A Learned kept across notebook cells holds the variables it saw weakly: once the user drops
    the model, its variables are freed although the Learned lives on."""
    def run(v, learned=None):
        with Terra(mode="trace", learned=learned) as terra:
            for _ in terra.loop(range(2)):
                v.assign_add(tf.ones((3,)))
        return terra

    v = tf.Variable(tf.ones((3,)))
    first = run(v)
    assert len(first.learned.handles) == 1  # seen while the variable lives
    dropped = weakref.ref(v)
    del v
    gc.collect()
    assert dropped() is None, "the Learned kept the variable alive"
    assert len(first.learned.handles) == 0
    second = run(tf.Variable(tf.ones((3,))), first.learned)
    assert phases(second) == ["tracing", "tracing"]


def test_objects_alive_before_the_loop_are_left_out_of_garbage_collections():
    """A full collection would walk TensorFlow's and Keras' objects (130-230 ms each time,
    heap.py): a Terra freezes the heap it opens on and gives it back when it closes. Garbage made
    inside the loop is still collected."""
    before = gc.get_freeze_count()
    made_in_loop = []
    with Terra(mode="trace") as terra:
        for _ in terra.loop(range(2)):
            assert gc.get_freeze_count() > before  # the objects alive at open are frozen
            cycle = [tf.constant(1.0)]
            cycle.append(cycle)
            made_in_loop.append(weakref.ref(cycle[0]))
            del cycle
            gc.collect()
            assert made_in_loop[-1]() is None  # a cycle made in the loop is collected
    assert gc.get_freeze_count() == before  # thawed at close: the process is as it was
    assert phases(terra) == ["tracing", "tracing"]


def test_the_heap_is_thawed_when_the_loop_raises():
    before = gc.get_freeze_count()
    with pytest.raises(ZeroDivisionError), Terra(mode="trace") as terra:
        for _ in terra.loop(range(3)):
            1 / 0  # noqa: B018
    assert gc.get_freeze_count() == before
