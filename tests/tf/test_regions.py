"""Regions (issue 14): outermost Keras calls answered by compiled functions made from the ops
recorded when they ran eagerly. Every test compares with plain eager execution of the same
program (same seed, same data: values, printed text and variables bit-identical) AND asserts what
ran: regions formed and hit, the object's Python not run on hits (``CALLS`` is counted outside
the objects), and under coexec the share of co-executed iterations."""

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import (
    CALLS,
    COEXEC,
    EAGER,
    OPTIONS,
    CountingDense,
    assert_bit_identical,
    compare,
    data,
    effect_model,
    formed,
    rows,
    sequential,
    state_of,
    step,
    token_data,
    training,
)

from terra_nb import Terra, TerraUsageError

MODES = list(OPTIONS)
LOSS = "SparseCategoricalCrossentropy.__call__"


def assert_python_skipped(terra, calls, eager_calls, name: str, dense_layers: int) -> None:
    """Dense.call ran in the traced model calls, never in the hits; co-executed, the regions'
    functions ran as graph work (calls in compiled segments)."""
    row = formed(terra, name)
    skipped = eager_calls["Dense.call"] - calls["Dense.call"]
    assert skipped == dense_layers * row.hits, (calls, eager_calls, str(terra.regions))
    if terra.mode in ("coexec", "lazy"):
        listing = "\n".join(map(str, terra.programs))
        assert listing.count("__inference_") >= 3, listing  # F of model, loss, optimizer; B


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model,name", [("sequential", "Sequential.__call__"),
                                        ("functional", "Functional.__call__"),
                                        ("subclassed", "Subclassed.__call__")])
def test_models_losses_and_adam_form_regions(model, name, mode):
    terra, calls, eager_calls = compare(training(model, steps=16), OPTIONS[mode])
    assert eager_calls["Dense.call"] >= 2 * 16
    assert_python_skipped(terra, calls, eager_calls, name, 2)
    assert formed(terra, LOSS).hits >= 8
    assert formed(terra, "Adam.apply_gradients").hits >= 8
    assert terra.explain().regions.hits == terra.regions.hits > 0


@pytest.mark.parametrize("mode", ["trace", "lazy"])
def test_trace_and_lazy_modes(mode):
    options = {"mode": mode, "regions": True}
    terra, calls, eager_calls = compare(training("sequential", steps=16), options,
                                        at_least=0.0 if mode == "trace" else 0.5)
    assert_python_skipped(terra, calls, eager_calls, "Sequential.__call__", 2)
    assert formed(terra, "Adam.apply_gradients").hits >= 8


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("optimizer,name", [("sgd-momentum", "SGD.apply_gradients"),
                                            ("loss-scale", "LossScaleOptimizer.apply_gradients")])
def test_optimizers_form_regions(optimizer, name, mode):
    terra, _, _ = compare(training(optimizer=optimizer, steps=16), OPTIONS[mode])
    assert formed(terra, name).hits >= 8


def test_loss_scale_branch_that_goes_the_other_way_is_a_guard_miss():
    """LossScaleOptimizer decides in Python whether the gradients are finite: a step with an
    infinite input is a guard miss (runs op by op, skips the update, halves the scale)."""
    batches = data(16)
    batches[10] = (batches[10][0] * np.float32("inf"), batches[10][1])
    terra, _, _ = compare(training(optimizer="loss-scale", batches=batches), EAGER)
    row = formed(terra, "LossScaleOptimizer.apply_gradients")
    assert sum(r.misses for r in rows(terra, "LossScaleOptimizer.apply_gradients")) >= 1
    assert row.hits >= 5


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", ["bn", "dropout"])
def test_batchnorm_and_dropout_bit_identical_after_30_steps(model, mode):
    terra, calls, eager_calls = compare(training(model, steps=30), OPTIONS[mode], at_least=0.6)
    assert_python_skipped(terra, calls, eager_calls, "Sequential.__call__", 2)
    assert formed(terra, "Adam.apply_gradients").hits >= 20


@pytest.mark.parametrize("mode", MODES)
def test_an_embedding_gradient_of_indexed_slices_stays_sparse(mode):
    # B returns the embedding's IndexedSlices gradient as three tensors on the wire
    program = training("embedding", batches=token_data(16))
    terra, calls, eager_calls = compare(program, OPTIONS[mode])
    assert_python_skipped(terra, calls, eager_calls, "Sequential.__call__", 1)
    assert formed(terra, "Adam.apply_gradients").hits >= 8


def gathered_loss_program(loop):
    """The loss of rows gathered from the model's output: the tape hands the model's region an
    ``IndexedSlices`` out-grad (GatherV2's gradient), which eager's gradient functions take too."""
    net, opt = sequential(), keras.optimizers.Adam(1e-2)
    rows_of = tf.constant([0, 2, 2, 5, 7])  # a row twice: its slices add up
    CALLS.clear()
    losses = []
    for x, _ in loop(data(12)):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.gather(net(x, training=True), rows_of)))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        losses.append(float(loss))
    return losses, state_of(net)


@pytest.mark.parametrize("mode", MODES)
def test_a_gathered_output_gives_its_region_a_dense_out_grad(mode):
    terra, calls, eager_calls = compare(gathered_loss_program, OPTIONS[mode])
    assert_python_skipped(terra, calls, eager_calls, "Sequential.__call__", 2)


RATE = [0.1]


def callable_rate_program(loop):
    """SGD with a learning rate from a callable that reads a list the loop changes: Python no
    guard sees, which a region of ``apply_gradients`` would bake in."""
    net = sequential()
    opt = keras.optimizers.SGD(learning_rate=lambda: RATE[0])
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    RATE[0] = 0.1
    CALLS.clear()
    losses = []
    for i, (x, y) in enumerate(loop(data(12))):
        if i == 8:
            RATE[0] = 0.0  # the weights stop changing from here, in eager
        losses.append(float(step(net, opt, lossf, x, y)))
    return losses, state_of(net, opt)


@pytest.mark.parametrize("mode", MODES)
def test_a_learning_rate_from_a_callable_keeps_apply_gradients_op_by_op(mode):
    terra, calls, eager_calls = compare(callable_rate_program, OPTIONS[mode])
    (row,) = rows(terra, "SGD.apply_gradients")
    assert row.state == "refused" and row.hits == 0
    assert "hidden input: a learning rate from function" in row.reason
    assert_python_skipped(terra, calls, eager_calls, "Sequential.__call__", 2)


def effect_program(*effects: str, steps: int = 8):
    def program(loop):
        model = effect_model(*effects)
        CALLS.clear()
        out = []
        for x, _ in loop(data(steps)):
            with tf.GradientTape() as tape:
                y = model(x, training=True)
                loss = tf.reduce_mean(y)
            tape.gradient(loss, model.trainable_variables)
            out.append(float(loss))
        return out, state_of(model)

    return program


EFFECTS = {"print": "stdout/stderr write", "counter": "attribute changed: EffectLayer.calls",
           "numpy": "value read", "new variable": "variable created",
           "tensor attribute read": "value read"}


@pytest.mark.parametrize("effect", list(EFFECTS))
def test_refused_with_reason(effect):
    terra, calls, eager_calls = compare(effect_program(effect), EAGER)
    (row,) = rows(terra, "Sequential.__call__")
    assert (row.state, row.hits) == ("refused", 0)
    assert EFFECTS[effect] in row.reason
    assert "test_regions.py" in row.source and "model(x, training=True)" in row.source
    assert calls == eager_calls  # the Python ran every time
    assert EFFECTS[effect] in str(terra.explain())


@pytest.mark.parametrize("mode", MODES)
def test_a_constant_the_call_makes_and_reads_is_no_effect(mode):
    # tf.image.resize reads the size tensor it makes from Python ints: fixed as a baked constant
    # is, so the call forms a region (a tensor made before the call is a value read: above)
    terra, calls, eager_calls = compare(effect_program("resize", steps=12), OPTIONS[mode])
    row = formed(terra, "Sequential.__call__")
    assert row.hits >= 6 and terra.regions.refused == 0
    assert eager_calls["EffectLayer.resize"] - calls["EffectLayer.resize"] == row.hits


def test_refused_under_coexec():
    terra, calls, eager_calls = compare(effect_program("print", "counter", "numpy", steps=12),
                                        COEXEC, at_least=0.3)
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused"
    for effect in ("print", "counter", "numpy"):
        assert EFFECTS[effect] in row.reason
    assert calls == eager_calls


def guard_miss_program(loop):
    """A new batch size (step 15), training=False (every 8th step), a model swapped for another
    (steps 10 and 11)."""
    model, other = sequential(), sequential()
    opts = {id(model): keras.optimizers.Adam(1e-2), id(other): keras.optimizers.Adam(1e-2)}
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    out = []
    for i, (x, y) in enumerate(loop(data(30, sizes={15: 8}))):
        net = other if i in (10, 11) else model
        out.append(float(step(net, opts[id(net)], lossf, x, y)))
        if i % 8 == 7:
            out.append(float(tf.reduce_sum(model(x, training=False))))
    return out, state_of(model, other, *opts.values())


@pytest.mark.parametrize("mode", MODES)
def test_guard_misses(mode):
    terra, _, _ = compare(guard_miss_program, OPTIONS[mode], at_least=0.25)
    model_rows = rows(terra, "Sequential.__call__")
    assert formed(terra, "Sequential.__call__").hits >= 5
    assert sum(r.misses for r in model_rows) >= 2  # the new batch size, training=False
    assert len(model_rows) >= 3  # and the other model's calls are rows of their own
    assert terra.regions.misses >= 2


@pytest.mark.parametrize("mode", MODES)
def test_only_the_outer_call_is_a_region(mode):
    def program(loop):
        model, extra = sequential(), CountingDense(8)
        out = []
        for x, _ in loop(data(12)):
            h = extra(x)  # a layer called from the loop: outermost, a region of its own
            out.append(float(tf.reduce_sum(model(h, training=False))))
        return out, state_of(model, extra)

    terra, _, _ = compare(program, OPTIONS[mode])
    names = {r.name for r in terra.regions.rows}
    assert names == {"Sequential.__call__", "CountingDense.__call__"}
    assert formed(terra, "CountingDense.__call__").hits >= 5


def test_calls_outside_iterations_and_other_threads_pass_through():
    model = sequential()
    x = data(1)[0][0]

    def elsewhere():
        model(x)

    with Terra(mode="eager", regions=True) as terra:
        for _ in range(2):
            model(x)  # between iterations: untouched
        for _ in terra.loop(range(4)):
            model(x)
            CALLS.clear()
            thread = threading.Thread(target=elsewhere)
            thread.start()
            thread.join()
            assert CALLS["Dense.call"] == 2  # another thread: its Python ran
    (row,) = rows(terra, "Sequential.__call__")
    assert row.hits == 2  # formed from the loop's first two calls only
    assert keras.Layer.__call__.__name__ == "__call__"
    for cls in (keras.Layer, keras.losses.Loss, keras.optimizers.Optimizer):  # unwrapped
        for method in ("__call__", "apply_gradients", "__setattr__"):
            assert not hasattr(getattr(cls, method, None), "__terra_region_original__")


def test_options_and_summary():
    with pytest.raises(TerraUsageError, match="regions must be True, False, None or .calls."):
        Terra(regions="yes")
    with pytest.raises(TerraUsageError, match="regions=True needs program='segments'"):
        Terra(regions=True, program="whole")
    with Terra(mode="eager") as terra:
        for _ in terra.loop(range(2)):
            pass
    assert not terra.regions.enabled and "off" in str(terra.regions)
    assert "off" not in str(terra.explain())


def test_keras_side_outputs_are_refused():
    """An activity regulariser adds a loss in ``call``: a region would lose it."""

    def program(loop):
        model = keras.Sequential([keras.Input((8,)), CountingDense(
            4, activity_regularizer=keras.regularizers.L2(0.1))])
        CALLS.clear()
        out = []
        for x, _ in loop(data(6)):
            y = model(x, training=True)
            out.append(float(tf.reduce_sum(y) + tf.add_n(model.losses)))
        return out, state_of(model)

    terra, calls, eager_calls = compare(program, EAGER)
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and "side output: losses added by" in row.reason
    assert calls == eager_calls


def test_calls_inside_a_user_tf_function_pass_through():
    model = sequential()
    step = tf.function(lambda x: model(x, training=False))
    x = data(1)[0][0]
    with Terra(mode="eager", regions=True) as terra:
        out = [step(x) for _ in terra.loop(range(3))]
    # no Keras call is a region inside it; the function's own dispatch is (function_calls)
    assert [r.name for r in terra.regions.rows] == ["<lambda> (tf.function)"]
    np.testing.assert_array_equal(out[-1].numpy(), model(x, training=False).numpy())


@pytest.mark.parametrize("mode", MODES)
def test_nested_tapes_run_the_python(mode):
    """A second-order gradient needs a differentiable backward: under two tapes the call runs
    its Python (a guard miss), under one it is a hit."""

    def program(loop):
        model = sequential()
        CALLS.clear()
        out = []
        for i, (x, _) in enumerate(loop(data(12))):
            with tf.GradientTape() as outer:
                outer.watch(x)
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    y = tf.reduce_sum(model(x, training=True) ** 2)
                g = inner.gradient(y, x)
                z = tf.reduce_sum(g * g) if i % 2 else tf.reduce_sum(g)
            out.append(float(tf.reduce_sum(outer.gradient(z, x))))
        return out, state_of(model)

    terra, calls, eager_calls = compare(program, OPTIONS[mode], at_least=0.3)
    assert calls == eager_calls  # every call ran its Python
    assert terra.regions.hits == 0


def test_a_persistent_tape_refuses_with_its_own_reason():
    """A persistent tape may take a gradient of a gradient: the call runs its Python, and the
    refusal says why (it said "two gradient tapes record" for this one tape)."""

    def program(loop):
        model = sequential()
        CALLS.clear()
        out = []
        for x, _ in loop(data(10)):
            with tf.GradientTape(persistent=True) as tape:
                y = tf.reduce_sum(model(x, training=True) ** 2)
            grads = tape.gradient(y, model.trainable_variables)
            out.append(float(tf.add_n([tf.reduce_sum(g) for g in grads])))
            del tape
        return out, state_of(model)

    terra, calls, eager_calls = compare(program, COEXEC, at_least=0.3)
    assert calls == eager_calls and terra.regions.hits == 0  # every call ran its Python
    reasons = " ".join(r.reason for r in rows(terra, "Sequential.__call__"))
    assert "a persistent tape" in reasons, str(terra.regions)


class FunctionLayer(keras.layers.Layer):
    """A layer whose call runs a user ``tf.function`` (one function-call op)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.twice = tf.function(lambda x: x * 2.0)

    def call(self, x):
        return self.twice(x)


def test_a_call_regions_cannot_compile_is_refused():
    def program(loop):
        model = keras.Sequential([keras.Input((8,)), CountingDense(4), FunctionLayer()])
        out = []
        for x, _ in loop(data(6)):
            with tf.GradientTape() as tape:
                y = tf.reduce_sum(model(x, training=True))
            out.append(float(y))
            out.append(float(tf.reduce_sum(tape.gradient(y, model.trainable_variables)[0])))
        return out, state_of(model)

    terra, _, _ = compare(program, EAGER)
    (row,) = rows(terra, "Sequential.__call__")
    assert row.state == "refused" and "cannot compile the call" in row.reason, str(terra.regions)


class Scale(keras.layers.Layer):
    def call(self, x, s):
        return x * s


def test_a_python_argument_new_every_call_is_refused():
    """A Python number is part of the guard: new every call, the call never forms a region (and
    the regions' table stays small: the specs beyond 16 share one refused row)."""

    def program(loop):
        model, scale = sequential(), Scale()
        out = []
        for i, (x, _) in enumerate(loop(data(24))):
            out.append(float(tf.reduce_sum(model(x, training=False))))
            out.append(float(tf.reduce_sum(scale(x, s=0.5 + i))))
        return out, state_of(model)

    terra, _, _ = compare(program, EAGER)
    assert formed(terra, "Sequential.__call__").hits >= 10
    scale_rows = rows(terra, "Scale.__call__")
    assert len(scale_rows) == 17 and not any(r.state == "formed" for r in scale_rows)
    assert "more than 16 argument specs" in scale_rows[-1].reason


@pytest.mark.parametrize("mode", MODES)
def test_an_attribute_set_by_the_user_is_a_guard_miss(mode):
    """``dropout.rate = 0.6`` between steps: the region's constant is stale; the call runs its
    Python again and forms a new region."""

    def program(loop):
        model = sequential("dropout")
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        out = []
        for i, (x, y) in enumerate(loop(data(24))):
            if i == 10:
                model.layers[1].rate = 0.6
                lossf.reduction = "sum"
            out.append(float(lossf(y, model(x, training=True))))
        return out, state_of(model)

    terra, _, _ = compare(program, OPTIONS[mode], at_least=0.3)
    for name in ("Sequential.__call__", LOSS):
        (row,) = rows(terra, name)
        assert row.misses >= 1 and row.state == "formed" and row.hits >= 10, str(terra.regions)


@pytest.mark.parametrize("mode", MODES)
def test_dict_inputs_are_guarded_tensor_by_tensor(mode):
    """A Functional model on a dict of inputs, the same dict object refilled every step: its
    tensors are arguments of the region, not constants baked in."""

    def program(loop):
        a, b = keras.Input((8,), name="a"), keras.Input((8,), name="b")
        model = keras.Model({"a": a, "b": b}, CountingDense(4)(keras.layers.Add()([a, b])))
        feed, out = {}, []
        for x, _ in loop(data(12)):
            feed["a"], feed["b"] = x, x * 2.0
            out.append(float(tf.reduce_sum(model(feed, training=False))))
        return out, state_of(model)

    terra, _, _ = compare(program, OPTIONS[mode])
    assert formed(terra, "Functional.__call__").hits >= 5


class NestedOutputs(keras.layers.Layer):
    """Returns a dict of a tuple and a list, keys out of sorted order (an RNN cell returns
    ``(h, [h])``)."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 4))

    def call(self, x):
        y = tf.matmul(x, self.w)
        return {"z": y, "a": (y * 2.0, [tf.reduce_sum(y)])}


@pytest.mark.parametrize("mode", MODES)
def test_nested_outputs_keep_their_structure(mode):
    """A hit packs its outputs into the structure the call's Python returns: types, key order
    and values."""

    def program(loop):
        layer, out = NestedOutputs(), []
        for x, _ in loop(data(12)):
            r = layer(x)
            assert list(r) == ["z", "a"] and type(r["a"]) is tuple and type(r["a"][1]) is list
            out.append(float(tf.reduce_sum(r["z"]) + r["a"][1][0] + tf.reduce_sum(r["a"][0])))
        return out, state_of(layer)

    terra, _, _ = compare(program, OPTIONS[mode])
    assert formed(terra, "NestedOutputs.__call__").hits >= 5


def _two_runs(between=None):
    """One model trained by two loops in a row (a notebook cell run twice), plainly and under two
    Terras sharing ``learned``; ``between(model)`` runs between the loops, outside any Terra.
    Returns (plain losses, Terra losses, plain state, Terra state, the second Terra)."""
    batches = data(12)

    def train(loops):
        keras.utils.set_random_seed(0)
        net, opt = sequential("dropout"), keras.optimizers.Adam(1e-2)
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        losses = []
        for k, loop in enumerate(loops):
            if k and between is not None:
                between(net)
            for x, y in loop(batches[6 * k:6 * k + 6]):
                losses.append(float(step(net, opt, lossf, x, y)))
        return losses, state_of(net, opt)

    plain, plain_state = train([lambda it: it] * 2)
    first = Terra()
    second = Terra(learned=first.learned)

    def under(terra):
        def loop(it):
            with terra:
                yield from terra.loop(it)
        return loop

    co, co_state = train([under(first), under(second)])
    return plain, co, plain_state, co_state, second


def test_regions_carry_over_to_a_rerun_with_the_same_objects():
    """The second loop (a re-run cell) hits the regions the first formed from its first
    iteration: none of its iterations traces for regions, and it co-executes from the second."""
    plain, co, plain_state, co_state, second = _two_runs()
    assert co == plain
    for a, b in zip(plain_state, co_state):
        assert np.array_equal(a, b)
    assert not any(s.regions_forming for s in second.stats)
    assert [s.phase for s in second.stats][1:] == ["coexec"] * 5
    # three hits in the first loop (formed at its third call), all six calls of the second:
    # hits are the run's own, the first loop's are earlier ones
    row = formed(second, "Sequential.__call__")
    assert (row.hits, row.earlier) == (6, 3)


def test_a_region_whose_object_changed_between_runs_is_dropped():
    """A Dropout rate set in a plain cell between the runs (no Terra open: not counted as an
    assignment) is seen when the next Terra opens: the region is formed again, values stay
    eager's."""
    def between(net):
        net.layers[1].rate = 0.6

    plain, co, plain_state, co_state, second = _two_runs(between)
    assert co == plain
    for a, b in zip(plain_state, co_state):
        assert np.array_equal(a, b)
    model_rows = rows(second, "Sequential.__call__")
    assert any("changed between runs" in r.reason or r.misses for r in model_rows), second.regions
    assert any(s.regions_forming for s in second.stats)


def test_regions_do_not_keep_a_dropped_model_alive():
    import gc
    import weakref

    model, batches = sequential(), data(4)
    with Terra() as terra:
        for x, _ in terra.loop(batches):
            float(tf.reduce_sum(model(x)))
    assert formed(terra, "Sequential.__call__").hits >= 1
    alive, layer = weakref.ref(model), weakref.ref(model.layers[0])
    del model
    gc.collect()
    assert alive() is None
    gc.collect()  # the guard's snapshot let go of them as the model died: the next collection
    assert layer() is None  # frees its layers (and their weights) too
    with Terra(learned=terra.learned) as again:  # opening drops the region of the dead model
        for _ in again.loop(range(1)):
            pass
    assert not terra.learned.regions.table


@pytest.mark.parametrize("mode", MODES)
def test_metric_update_state_forms_a_region(mode):
    """A metric's ``update_state`` (its subclasses' own methods) becomes a region: values read
    from ``result()`` (op by op) every step and the metric's variables stay eager's."""

    def program(loop):
        net, opt = sequential(), keras.optimizers.SGD(1e-2)
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        accuracy, mean = keras.metrics.SparseCategoricalAccuracy(), keras.metrics.Mean()
        CALLS.clear()
        seen = []
        for x, y in loop(data(12)):
            with tf.GradientTape() as tape:
                logits = net(x, training=True)
                loss = lossf(y, logits)
            opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables),
                                    net.trainable_variables))
            accuracy.update_state(y, logits)
            mean.update_state(loss)
            seen.append((float(accuracy.result()), float(mean.result())))
        return seen, state_of(net, opt, accuracy, mean)

    terra, _, _ = compare(program, OPTIONS[mode])
    for name in ("SparseCategoricalAccuracy.update_state", "Mean.update_state"):
        assert formed(terra, name).hits >= 6, terra.regions
    assert not rows(terra, "Mean.result")


def alternating_batches_program(loop):
    """Batch 16 for 20 steps, then 16 and 8 alternating: the size-8 calls come long after the
    loop settled into co-execution."""
    model, opt = sequential(), keras.optimizers.Adam(1e-2)
    lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    out = []
    for x, y in loop(data(40, sizes={i: 8 for i in range(21, 40, 2)})):
        out.append(float(step(model, opt, lossf, x, y)))
    return out, state_of(model, opt)


def test_new_specs_form_regions_while_co_executing():
    """A call with new specs is recorded from its co-executed runs (answered with placeholders):
    its regions form without tracing iterations, bit-identical to eager."""
    terra, _, _ = compare(alternating_batches_program, OPTIONS["coexec"], at_least=0.75)
    model_rows = [r for r in rows(terra, "Sequential.__call__") if r.state == "formed"]
    assert len(model_rows) == 2 and all(r.hits >= 5 for r in model_rows), str(terra.regions)
    assert len([r for r in rows(terra, LOSS) if r.state == "formed"]) == 2
    assert formed(terra, "Adam.apply_gradients").hits >= 30  # its specs never change
    tail = terra.stats[30:]
    assert [s.phase for s in tail] == ["coexec"] * len(tail)  # from then on every call hits


@pytest.mark.parametrize("mode", MODES)
def test_a_schedule_that_settles_is_no_guard_miss(mode):
    """The loop assigns ``dropout.rate`` every step from a schedule that ramps for six steps and
    then stays: each assignment is a new float object, equal from step 6 on. Equal values are
    no change: the region forms once the schedule settles and is hit every step after."""

    def program(loop):
        model = sequential("dropout")
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        out = []
        for i, (x, y) in enumerate(loop(data(24))):
            model.layers[1].rate = 0.5 - 0.05 * min(i, 6) / 3.0  # a new object every step
            out.append(float(lossf(y, model(x, training=True))))
        return out, state_of(model)

    terra, _, _ = compare(program, OPTIONS[mode], at_least=0.3)
    formed_rows = [r for r in rows(terra, "Sequential.__call__") if r.state == "formed"]
    assert formed_rows and formed_rows[-1].hits >= 12 and formed_rows[-1].misses == 0, \
        str(terra.regions)


@pytest.mark.parametrize("mode", MODES)
def test_a_cell_returns_its_output_and_new_state_as_one_tensor_as_in_eager(mode):
    """A recurrent cell returns ``(output, [output])``: one tensor in eager. Answered by its
    region it is one tensor too (F returns it once), so ``out is state[0]`` holds and the tape
    sees one output with two uses, as in eager, not two outputs, one of them unused."""
    from region_programs import run as run_program

    def program(loop):
        cell, head = keras.layers.SimpleRNNCell(8), keras.layers.Dense(1)
        opt = keras.optimizers.SGD(0.05)
        rng = np.random.default_rng(0)
        same, losses = [], []
        for seq in loop([rng.normal(size=(4, 3, 2)).astype("float32") for _ in range(12)]):
            with tf.GradientTape() as tape:
                h = [tf.zeros((4, 8))]
                for t in range(seq.shape[1]):
                    out, h = cell(seq[:, t, :], h)
                    same.append(out is h[0])
                loss = tf.reduce_mean(tf.square(head(out)))
            variables = cell.trainable_variables + head.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            losses.append(float(loss))
        return (losses, same), state_of(cell, head, opt)

    (values, plain_same), variables, _, _, _ = run_program(program, None)
    (values2, same), variables2, _, terra, _ = run_program(program, OPTIONS[mode])
    assert values2 == values and all(plain_same) and all(same)
    assert_bit_identical(variables, variables2)
    assert formed(terra, "SimpleRNNCell.__call__").hits >= 20, str(terra.regions)


def loss_made_anew_program(loop):
    """The loss object made anew in every step (a row of its own each, before)."""
    model, opt = sequential(), keras.optimizers.Adam(1e-2)
    out = []
    for x, y in loop(data(30)):
        lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        out.append(float(step(model, opt, lossf, x, y)))
    return out, state_of(model, opt)


@pytest.mark.parametrize("mode", MODES)
def test_a_loss_made_anew_every_step_is_one_folded_row(mode):
    terra, _, _ = compare(loss_made_anew_program, OPTIONS[mode], at_least=0.6)
    assert formed(terra, "Sequential.__call__").hits >= 20
    assert formed(terra, "Adam.apply_gradients").hits >= 20
    # each loss object was collected before a region answered it: one row holds those the
    # loop dropped, and no region is kept for them; the last one's row is its own
    folded, last = rows(terra, LOSS)
    assert folded.state == "tracing" and folded.hits == 0, str(terra.regions)
    # (co-executed, the first step's call ran plainly: a tape takes no hit before one of its
    # gradients was seen, so that object was never on the way to a region)
    made = 28 if mode == "coexec" else 29
    assert folded.reason.startswith(f"{made} objects made anew, each collected before a region")
    calls = [r for r in terra.regions.rows if r.name != "GradientTape.gradient"]
    assert last.hits == 0 and len(calls) == 4 and terra.regions.formed == 2


def loss_every_five_program(loop):
    """A loss object made anew every 5 steps: each hits before it goes, and the next one often
    gets its address."""
    model, opt = sequential(), keras.optimizers.Adam(1e-2)
    out, lossf = [], None
    for i, (x, y) in enumerate(loop(data(40))):
        if i % 5 == 0:
            lossf = None  # collected here, before the next one is made
            lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        out.append(float(step(model, opt, lossf, x, y)))
    return out, state_of(model, opt)


def test_an_object_at_a_collected_ones_address_gets_a_row_of_its_own():
    terra, _, _ = compare(loss_every_five_program, OPTIONS["coexec"], at_least=0.6)
    losses = rows(terra, LOSS)
    collected = [r for r in losses if r.reason == "its object was collected"]
    # every loss but the last hit, and is listed as collected, its hits its own; none missed
    # for another's region at its address, and only the live objects' regions count as formed
    assert len(collected) >= 6 and all(1 <= r.hits <= 5 for r in collected), str(terra.regions)
    assert not any(r.misses for r in losses)
    assert terra.regions.formed == 3 and formed(terra, "Adam.apply_gradients").hits >= 30
