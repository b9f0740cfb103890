"""Tape regions (on with regions, ``regions/tapes.py``): ``GradientTape.gradient``
answered by one compiled function G. Every test compares with plain eager execution (values and
variables bit-identical) AND asserts what ran: the tape's row formed and hit, TensorFlow's own
gradient (``imperative_grad``) run only where no G answered, and the share of co-executed
iterations."""

import collections
import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import compare, data, formed, rows, sequential, state_of
from tensorflow.python.eager import imperative_grad

from terra_nb import Terra, TerraUsageError
from terra_nb.regions import tapes

TAPES = {"regions": True}
TAPE = "GradientTape.gradient"
RAN: collections.Counter = collections.Counter()  # TensorFlow's gradients run, per run


@pytest.fixture(autouse=True)
def formation_is_free(monkeypatch):
    """G forms at a recording's second call: these loops are too short to repay a formation's
    real cost (the rent rule has its own tests, ``test_tape_rental.py``)."""
    monkeypatch.setattr(tapes, "FORM_BASE_S", 0.0)
    monkeypatch.setattr(tapes, "FORM_PER_OP_S", 0.0)


@pytest.fixture(autouse=True)
def counted(monkeypatch):
    """Count TensorFlow's own gradient computations (a G hit skips them)."""
    original = imperative_grad.imperative_grad

    def counting(*args, **kwargs):
        RAN["tape"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(imperative_grad, "imperative_grad", counting)
    RAN.clear()


def compare_counted(program, at_least: float = 0.5, options: dict = TAPES):
    """``compare`` under tape regions; also TensorFlow's gradients run plainly and under Terra."""
    runs = []

    def counting_program(loop):
        RAN.clear()
        out = program(loop)
        runs.append(RAN["tape"])
        return out

    terra, _, _ = compare(counting_program, options, at_least=at_least)
    plain, under_terra = runs
    return terra, plain, under_terra


def mlp_program(loop):
    """A Keras model (a region), the loss op by op under the tape, Adam."""
    model, opt = sequential(), keras.optimizers.Adam(1e-2)
    out = []
    for x, y in loop(data(24)):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.square(logits - tf.one_hot(y, 4)))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append(float(loss))
    return out, state_of(model, opt)


def test_gradient_is_answered_by_one_function():
    terra, plain, under_terra = compare_counted(mlp_program)
    row = formed(terra, TAPE)
    assert row.hits >= 10, terra.regions
    assert plain == 24 and under_terra == plain - row.hits  # hits ran no gradient function
    calls = [c for c in terra.graph.region_calls if c.name == TAPE]
    assert calls and all(c.kind == "backward" for c in calls)


def rnn_program(loop):
    """A cell called in a Python loop over time steps (a region hit per step, on the tape)."""
    cell, head = keras.layers.SimpleRNNCell(8), keras.layers.Dense(1)
    opt = keras.optimizers.SGD(1e-2)
    rng = np.random.default_rng(0)
    seqs = [rng.normal(size=(4, 5, 3)).astype("float32") for _ in range(20)]
    out = []
    for seq in loop(seqs):
        with tf.GradientTape() as tape:
            h = [tf.zeros((4, 8))]
            for t in range(seq.shape[1]):
                _, h = cell(seq[:, t, :], h)
            loss = tf.reduce_mean(tf.square(head(h[0])))
        variables = cell.trainable_variables + head.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        out.append(float(loss))
    return out, state_of(cell, head)


def test_a_cell_called_in_a_python_loop():
    terra, plain, under_terra = compare_counted(rnn_program)
    assert formed(terra, "SimpleRNNCell.__call__").hits >= 40
    row = formed(terra, TAPE)
    assert row.hits >= 8 and under_terra == plain - row.hits, terra.regions


def test_a_gs_zeros_are_one_tensor_per_spec(monkeypatch):
    # the cell's B reads static shapes of values it does not use: G fills them with zeros, one
    # tensor per spec (rnn-varlen's G asked 52 of a few specs, half its build time)
    built, original = [], tapes.TapeRegion.__init__

    def keep(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(tapes.TapeRegion, "__init__", keep)
    terra, plain, under_terra = compare_counted(rnn_program)
    assert formed(terra, TAPE).hits >= 8 and built
    for g in built:
        zeros = [(t.dtype, tuple(t.shape)) for op in g.fn.cf.graph.get_operations()
                 if re.fullmatch(r"zeros(_\d+)?", op.name) for t in op.outputs]
        assert len(zeros) >= 2 and len(zeros) == len(set(zeros)), zeros


def gan_program(loop):
    """Two models, two tapes recording at once, two optimizers (no Keras region: two tapes)."""
    gen = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                            keras.layers.Dense(4)])
    disc = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    g_opt, d_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
    rng = np.random.default_rng(1)
    batches = [(rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 4)).astype(
        "float32")) for _ in range(24)]
    out = []
    for noise, real in loop(batches):
        with tf.GradientTape() as gt, tf.GradientTape() as dt:
            fake = gen(noise, training=True)
            d_fake, d_real = disc(fake, training=True), disc(real, training=True)
            g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
            d_loss = tf.reduce_mean(tf.nn.softplus(d_fake) + tf.nn.softplus(-d_real))
        g_opt.apply_gradients(zip(gt.gradient(g_loss, gen.trainable_variables),
                                  gen.trainable_variables))
        d_opt.apply_gradients(zip(dt.gradient(d_loss, disc.trainable_variables),
                                  disc.trainable_variables))
        out.append(float(g_loss) + float(d_loss))
    return out, state_of(gen, disc, g_opt, d_opt)


def test_two_tapes_recording_at_once():
    terra, plain, under_terra = compare_counted(gan_program, at_least=0.4)
    tape_rows = [r for r in rows(terra, TAPE) if r.state == "formed" and r.hits]
    assert len(tape_rows) == 2, terra.regions  # the generator's and the discriminator's
    assert under_terra == plain - sum(r.hits for r in tape_rows)


def declined_program(kind: str):
    """The tape's gradient is TensorFlow's: the copy cannot know what the tape holds, or the
    call asks for what G does not give."""

    @tf.custom_gradient
    def clipped(x):
        return tf.identity(x), lambda g: tf.clip_by_value(g, -0.1, 0.1)

    def program(loop):
        model, opt = sequential(), keras.optimizers.SGD(1e-2)
        out = []
        for x, _ in loop(data(16)):
            xt = tf.constant(x)
            with tf.GradientTape(persistent=kind == "persistent") as tape:
                if kind == "watch":
                    tape.watch(xt)
                logits = model(xt, training=True)
                if kind == "custom_gradient":
                    logits = clipped(logits)
                loss = tf.reduce_mean(tf.square(logits))
            seed = tf.constant(2.0) if kind == "output_gradients" else None
            grads = tape.gradient(loss, model.trainable_variables, output_gradients=seed)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            out.append(float(loss))
            del tape
        return out, state_of(model, opt)

    return program


@pytest.mark.parametrize("kind", ["watch", "persistent", "custom_gradient", "output_gradients"])
def test_what_the_copy_cannot_see_runs_tensorflows_gradient(kind):
    terra, plain, under_terra = compare_counted(declined_program(kind))
    assert not any(r.hits for r in rows(terra, TAPE)), terra.regions
    assert under_terra == plain == 16
    if kind != "persistent":  # (a persistent tape may differentiate twice: no model region)
        assert formed(terra, "Sequential.__call__").hits >= 8  # the model's region still runs


def test_the_option_is_checked():
    with pytest.raises(TerraUsageError, match="regions must be True, False, None or 'calls'"):
        Terra(regions="tapes")
    for options in ({}, TAPES):  # on by default
        terra, plain, under_terra = compare_counted(mlp_program, options=options)
        assert formed(terra, TAPE).hits >= 10 and under_terra < plain
    with Terra(regions="calls") as calls:  # the Keras calls only: TensorFlow's gradient
        for x, _ in calls.loop(data(4)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.constant(x))
            tape.gradient(loss, [])
    assert not rows(calls, TAPE)


def test_matched_copies_are_not_wired_again(monkeypatch):
    """Once G formed, a copy with the same key (``tape_key.CopyKey``) is answered without
    building its ``TapeRecording``: only the calls before G formed are wired."""
    from terra_nb.regions import tapes

    wired = collections.Counter()

    class Counted(tapes.TapeRecording):
        def __init__(self, *args, **kwargs):
            wired["copies"] += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(tapes, "TapeRecording", Counted)
    terra, plain, under_terra = compare_counted(mlp_program)
    row = formed(terra, TAPE)
    assert row.hits >= 10 and under_terra == plain - row.hits, terra.regions
    assert 0 < wired["copies"] <= plain - row.hits  # no hit wired its copy


def shared_outside_program(loop):
    """The same ops on outside tensors that are one tensor in some iterations and two in the
    others: G of the first reads one argument twice, so the key must tell them apart."""
    w = tf.Variable(tf.ones((3,)))
    rng = np.random.default_rng(2)
    pairs = [rng.normal(size=(2, 3)).astype("float32") for _ in range(24)]
    out = []
    for i, pair in enumerate(loop(pairs)):
        a = tf.constant(pair[0])
        b = a if i % 2 else tf.constant(pair[1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * a) + tf.reduce_sum(tf.square(w * b))
        (grad,) = tape.gradient(loss, [w])
        w.assign_sub(0.1 * grad)
        out.append(float(loss))
    return out, [w.numpy()]


def test_outside_tensors_shared_or_not_get_their_own_g():
    terra, plain, under_terra = compare_counted(shared_outside_program)
    row = formed(terra, TAPE)
    assert row.hits >= 10 and under_terra == plain - row.hits, terra.regions
    assert len(terra.learned.regions.tapes.table) == 2, terra.regions  # one G for each wiring


def test_no_placeholder_outlives_a_tape_loop(monkeypatch):
    """G's recording is dropped once G is traced (and has no reference cycle), so a G formed in
    a co-executed iteration keeps no placeholder alive: closing the loop walks no heap for
    placeholders to swap, and leaves no capture hook in place."""
    from terra_nb.capture import hooks
    from terra_nb.coexec import handover

    walks = collections.Counter()
    real_gc = handover.gc

    class CountingGc:
        @staticmethod
        def get_referrers(*objects):
            walks["heap"] += 1
            return real_gc.get_referrers(*objects)

    monkeypatch.setattr(handover, "gc", CountingGc)
    for _ in range(3):  # placeholders of earlier tests held until their cycles are collected
        real_gc.collect()
    terra, _, _ = compare_counted(rnn_program)
    assert formed(terra, TAPE).hits >= 8, terra.regions
    assert walks["heap"] == 0 and hooks._holds == 0 and not hooks.is_installed()


def test_indices_fed_as_numpy_reach_g_as_the_tensor_the_gather_converts_them_to():
    """An embedding gathered with a new numpy batch of indices each step. G forms in an
    iteration run for real, where the gather converted the array before the copy saw it; the
    co-executed ones feed it the array itself. G takes it as the gather's tensor (before: a
    TypeError from the function call at the first co-executed hit, which eager does not raise;
    the adversarial review's r02)."""

    def program(loop):
        rng = np.random.RandomState(2)
        table = tf.Variable(rng.randn(10, 8).astype("float32"))
        w = tf.Variable(rng.randn(8, 1).astype("float32"))
        losses = []
        for _ in loop(range(24)):
            idx = rng.randint(0, 10, size=(4,)).astype("int32")
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.gather(table, idx) @ w))
            g_table, g_w = tape.gradient(loss, [table, w])
            table.assign_sub(0.01 * tf.convert_to_tensor(g_table))
            w.assign_sub(0.01 * g_w)
            losses.append(float(loss))
        return losses, [table.numpy(), w.numpy()]

    terra, _, _ = compare(program, {"mode": "coexec", **TAPES}, at_least=0.8)
    assert formed(terra, TAPE).hits >= 15
    assert "fallback" not in [s.phase for s in terra.stats]


def test_a_numpy_array_changed_after_the_op_that_read_it_keeps_the_read_values_on_the_copy():
    """A mask refilled in place every step and zeroed after the forward ops, before the
    gradient: eager's ``Mul`` converted the array when it ran, and the tape's gradient uses those
    values. The copy G reads from keeps them (before: G converted the zeroed array at the
    gradient). TensorFlow aliases a 64-byte-aligned array instead of copying it, so eager's
    own result would depend on the array's address: the mask here is never aligned so."""

    def program(loop):
        rng = np.random.RandomState(8)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.1)
        mask = np.ones(9, np.float32)[1:]  # 4 bytes past a 16-byte boundary: copied by TF
        losses = []
        for _ in loop(range(20)):
            mask[:] = rng.rand(8) > 0.5
            x = rng.randn(8, 4).astype("float32")
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x)[:, 0] * mask)
            mask[:] = 0.0
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            losses.append(float(loss))
        return losses, model.get_weights()

    terra, _, _ = compare(program, {"mode": "coexec", **TAPES})
    assert formed(terra, TAPE).hits >= 10
