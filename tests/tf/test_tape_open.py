"""A region's hit on a gradient tape sums the gradients in eager's order (``regions/tape_open``).

TensorFlow's tape sums the gradients a value receives in the order its consumers are processed;
a region's hit is one op there, and its gradients came earlier than eager's ops deeper on the tape
would give them. With three or more terms the float sum differed from eager's by an ulp, and the
weights drifted from then on. Each test compares with plain eager execution bit for bit and
asserts what ran: the regions hit, the co-executed share, and where the tape's gradients were
summed over the regions' own ops.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from region_programs import compare, formed, rows

from terra_nb.regions import eager_order, tape_open, tapes

REGIONS = {"regions": True}


def _sums(monkeypatch) -> dict:
    """Count the verdicts and the gradients computed over the opened copy."""
    counts = {"same": 0, "other": 0, "replayed": 0}
    same_sums, replay = eager_order.same_sums, eager_order.replay

    def judged(*args):
        same = same_sums(*args)
        counts["same" if same else "other"] += 1
        return same

    def replayed(*args):
        counts["replayed"] += 1
        return replay(*args)

    monkeypatch.setattr(eager_order, "same_sums", judged)
    monkeypatch.setattr(eager_order, "replay", replayed)
    return counts


def twice_and_penalty(penalty: bool = True, steps: int = 8, late: int = 0):
    """A model called on two batches in a step, and a weight penalty written out: each weight's
    gradient sums two hits' and the penalty's. ``late``: the first step with the second call
    and the penalty (the model called once before)."""

    def program(loop):
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.05)
        rng = np.random.default_rng(0)
        losses = []
        for i in loop(range(steps)):
            a = rng.normal(size=(16, 6)).astype("float32")
            b = rng.normal(size=(16, 6)).astype("float32")
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(a) ** 2)
                if i >= late:
                    loss += tf.reduce_mean((model(b) - 1.0) ** 2)
                if penalty and i >= late:
                    loss += 1e-3 * tf.add_n([tf.reduce_sum(w ** 2) for w in model.weights])
            grads = tape.gradient(loss, model.trainable_weights)
            opt.apply_gradients(zip(grads, model.trainable_weights))
            losses.append(float(loss))
        return losses, [v.numpy() for v in model.weights]

    return program


def test_two_hits_and_a_penalty_sum_in_eagers_order(monkeypatch):
    counts = _sums(monkeypatch)
    terra, _, _ = compare(twice_and_penalty(), {"mode": "coexec", **REGIONS})
    assert formed(terra, "Sequential.__call__").hits >= 8  # two hits a step, co-executed too
    assert counts["other"] >= 1 and counts["replayed"] >= 6  # every step's tape with hits
    tape_row = rows(terra, "GradientTape.gradient")[0]
    assert tape_row.reason == tapes.OPENED


def test_keras_call_regions_alone_sum_in_eagers_order(monkeypatch):
    """``Terra(regions="calls")`` forms no tape G, but its tapes are copied all the same: a hit
    on them sums as eager's would. (It formed the G over the opened copy once that paid, which
    on a loaded machine came within the loop: CI's run, stop 52.)"""
    monkeypatch.setattr(tapes, "FORM_BASE_S", 0.0)  # it would form at once, if it formed
    monkeypatch.setattr(tapes, "FORM_PER_OP_S", 0.0)
    counts = _sums(monkeypatch)
    terra, _, _ = compare(twice_and_penalty(), {"mode": "coexec", "regions": "calls"})
    assert formed(terra, "Sequential.__call__").hits >= 8
    assert counts["other"] >= 1 and counts["replayed"] >= 6
    assert all(r.state != "formed" for r in rows(terra, "GradientTape.gradient"))
    assert not [c for c in terra.graph.region_calls if c.name == "GradientTape.gradient"]


def test_their_g_forms_over_the_opened_copy(monkeypatch):
    """Once its formation pays (free here), G compiled over the opened copy answers the calls:
    checked against the replay bit for bit, and named on the tape's row. Its first call, in the
    iteration run for real for it, is the op its hits are: no iteration after falls back."""
    monkeypatch.setattr(tapes, "FORM_BASE_S", 0.0)
    monkeypatch.setattr(tapes, "FORM_PER_OP_S", 0.0)
    counts = _sums(monkeypatch)
    terra, _, _ = compare(twice_and_penalty(steps=14), {"mode": "coexec", **REGIONS})
    assert formed(terra, "Sequential.__call__").hits >= 14
    tape_row = formed(terra, "GradientTape.gradient")
    assert tape_row.hits >= 4 and counts["replayed"] <= 14 - tape_row.hits
    calls = [c for c in terra.graph.region_calls if c.name == "GradientTape.gradient"]
    assert calls and all(c.kind == "backward" for c in calls)
    phases = [s.phase for s in terra.stats]
    assert "fallback" not in phases and phases[-4:] == ["coexec"] * 4, phases


def test_hits_whose_sums_keep_eagers_order_keep_the_tapes_gradient(monkeypatch):
    """Without the penalty each weight's gradient has two terms: TensorFlow's tape gives eager's
    bits, so nothing is computed again, and the tape's G forms."""
    counts = _sums(monkeypatch)
    terra, _, _ = compare(twice_and_penalty(penalty=False), {"mode": "coexec", **REGIONS})
    assert formed(terra, "Sequential.__call__").hits >= 8
    assert counts["same"] >= 1 and counts["other"] == 0 and counts["replayed"] == 0


def test_a_model_called_with_two_specs_while_its_regions_form(monkeypatch):
    """Three calls of one model a step (a float64 batch, a float32 one, a cast one): the hits
    of the float32 region and the traced float64 call meet on one tape (the adversarial
    review's program, 1 ulp off eager from the second step before)."""
    counts = _sums(monkeypatch)

    def program(loop):
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        opt = keras.optimizers.SGD(0.05)
        rng = np.random.default_rng(0)
        big = rng.normal(size=(40, 12))
        losses = []
        for i in loop(range(6)):
            x64 = big[i:i + 4, ::2]
            xf = np.asfortranarray(rng.normal(size=(4, 6)).astype("float32"))
            xi = rng.integers(-5, 5, size=(4, 6))
            with tf.GradientTape() as tape:
                y = model(x64) + model(xf) + model(tf.cast(xi, tf.float32))
                loss = tf.reduce_mean(y ** 2) * 2.5
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            losses.append(float(loss))
        return losses, [v.numpy() for v in model.weights]

    terra, _, _ = compare(program, {"mode": "coexec", **REGIONS}, at_least=0.3)
    assert formed(terra, "Sequential.__call__").hits >= 4
    assert counts["other"] >= 1 and counts["replayed"] >= 1


def asked(how: str):
    """The penalty loop, its gradient asked otherwise: sources in a dict, a watched input's
    gradient too (or a watched value made on the tape), an unconnected variable with
    ``UnconnectedGradients.ZERO``, an output gradient."""

    def program(loop):
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="relu"),
                                  keras.layers.Dense(1)])
        extra = tf.Variable(tf.ones((2,)))
        opt = keras.optimizers.SGD(0.05)
        rng = np.random.default_rng(0)
        losses = []
        for _ in loop(range(8)):
            a = tf.constant(rng.normal(size=(16, 6)).astype("float32"))
            b = rng.normal(size=(16, 6)).astype("float32")
            with tf.GradientTape(persistent=False) as tape:
                x = a * 1.0 if how == "intermediate" else a  # a value an op made on the tape
                if how in ("watch", "intermediate"):
                    tape.watch(x)
                loss = tf.reduce_mean(model(x) ** 2) + tf.reduce_mean((model(b) - 1.0) ** 2)
                loss += 1e-3 * tf.add_n([tf.reduce_sum(w ** 2) for w in model.weights])
            ws = model.trainable_weights
            if how == "dict":
                got = tape.gradient(loss, {f"w{i}": w for i, w in enumerate(ws)})
                grads = [got[f"w{i}"] for i in range(len(ws))]
            elif how in ("watch", "intermediate"):  # the input's gradient too (an adversarial
                *grads, da = tape.gradient(loss, ws + [x])  # step's)
                losses.append(float(tf.reduce_sum(da * da)))
            elif how == "zero":
                grads = tape.gradient(loss, ws + [extra],
                                      unconnected_gradients=tf.UnconnectedGradients.ZERO)
                losses.append(float(tf.reduce_sum(grads.pop())))
            else:
                grads = tape.gradient(loss, ws, output_gradients=tf.constant(0.5))
            opt.apply_gradients(zip(grads, ws))
            losses.append(float(loss))
        return losses, [v.numpy() for v in model.weights]

    return program


@pytest.mark.parametrize("how", ["dict", "watch", "intermediate", "zero", "seed"])
def test_gradients_asked_otherwise_sum_in_eagers_order(monkeypatch, how):
    counts = _sums(monkeypatch)
    terra, _, _ = compare(asked(how), {"mode": "coexec", **REGIONS})
    assert formed(terra, "Sequential.__call__").hits >= 8
    assert counts["other"] >= 1 and counts["replayed"] >= 6


def test_symbols_tell_the_orders_apart():
    """``same_sums``'s symbols on their own: an ``add_n`` of three terms in another order is
    another sum, two dense terms sum alike either way round, slices concatenate in order."""
    sums = tape_open._Sums()
    a, b, c = sums.sym("a"), sums.sym("b"), sums.sym("c")
    assert sums.fold([a, b]) == sums.fold([b, a])
    assert sums.fold([a, b, c]) != sums.fold([c, a, b])
    assert sums.fold([]) is None and sums.fold([c]) == c
    s = sums.sym("s", sparse=True)
    assert sums.fold([a, s]) != sums.fold([s, a]) and sums.fold([a, s]) in sums.sparse
    assert sums.fold_dense([a, s]) == sums.fold_dense([s, a])  # made dense, then added
    assert sums.fold_dense([a, s]) != sums.fold([a, s])


def two_targets(loop):
    """Two targets at once (``tape.gradient([l1, l2], ...)``), the model called twice with a
    penalty, and an evaluation call outside the tape each step."""
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    rng = np.random.default_rng(12)
    x = rng.normal(size=(64, 6)).astype("float32")
    losses = []
    for i in loop(range(12)):
        a, b = x[(i % 4) * 16:(i % 4) * 16 + 16], x[::4]
        with tf.GradientTape() as tape:
            l1 = tf.reduce_mean(model(a) ** 2)
            l2 = tf.reduce_mean((model(b) - 1.0) ** 2) \
                + 1e-3 * tf.add_n([tf.reduce_sum(w ** 2) for w in model.trainable_weights])
        grads = tape.gradient([l1, l2], model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights))
        losses.append((float(l1), float(l2), float(tf.reduce_mean(model(b)))))
    return losses, [v.numpy() for v in model.weights]


def test_several_targets_take_no_hits_on_their_tape():
    """TensorFlow's tape starts from several targets' ops in the order of a C++ hash map, which
    the opened copy cannot follow: the tape's calls run their Python from the first gradient on
    (before any hit); the call outside the tape is still a region's hit (three a step without
    the refusal)."""
    terra, _, _ = compare(two_targets, {"mode": "coexec", **REGIONS})
    (tape_row,) = rows(terra, "GradientTape.gradient")
    assert tape_row.reason.startswith("no hits on the tapes of") and "several targets" in \
        tape_row.reason
    formed(terra, "Sequential.__call__")  # the call outside the tape: one hit a step at most
    assert 8 <= sum(r.hits for r in rows(terra, "Sequential.__call__")) <= 12


def test_a_backward_built_while_a_tape_records_leaves_no_op_on_it(monkeypatch):
    """A hit's first B is traced while the user's tape records: its captures were recorded on
    that tape (``captured_value``), the copy could not be opened, and a CNN called twice with a
    penalty summed in TensorFlow's order (1 ulp off eager in the iterations a region formed)."""
    counts = _sums(monkeypatch)
    unseen = []
    monkeypatch.setattr(tapes.Tapes, "_unseen", lambda self, why: unseen.append(why))

    def program(loop):
        model = keras.Sequential([keras.Input((8, 8, 2)), keras.layers.Conv2D(4, 3, padding="same"),
                                  keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                                  keras.layers.Dense(2)])
        opt = keras.optimizers.SGD(0.02)
        x = np.random.default_rng(19).normal(size=(32, 8, 8, 2)).astype("float32")
        losses = []
        for i in loop(range(10)):
            a = x[(i % 4) * 8:(i % 4) * 8 + 8]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(a) ** 2) + tf.reduce_mean(tf.abs(model(a[:4] * 0.5))) \
                    + 1e-3 * tf.add_n([tf.reduce_sum(w ** 2) for w in model.trainable_weights])
            grads = tape.gradient(loss, model.trainable_weights)
            opt.apply_gradients(zip(grads, model.trainable_weights))
            losses.append(float(loss))
        return losses, [v.numpy() for v in model.weights]

    terra, _, _ = compare(program, {"mode": "coexec", **REGIONS})
    formed(terra, "Sequential.__call__")
    assert sum(r.hits for r in rows(terra, "Sequential.__call__")) >= 12  # two calls a step
    assert counts["other"] >= 1 and counts["replayed"] >= 6
    assert not any("captured_value" in why for why in unseen)


def test_a_penalty_added_after_the_tapes_call_site_was_declined(monkeypatch):
    """A tape's call site whose G would not repay itself is declined early; the penalty's third
    gradient term comes only later. Its tapes are still copied while a model call's region may
    take hits on them (before: no longer copied, summed in TensorFlow's order)."""
    counts = _sums(monkeypatch)
    declined, decline = [], tapes.Tapes._decline_site

    def declining(self, row, why):
        declined.append((self.iteration, why))
        decline(self, row, why)

    monkeypatch.setattr(tapes.Tapes, "_decline_site", declining)
    program = twice_and_penalty(steps=40, late=20)

    terra, _, _ = compare(program, {"mode": "coexec", **REGIONS})
    formed(terra, "Sequential.__call__")
    assert sum(r.hits for r in rows(terra, "Sequential.__call__")) >= 50
    assert declined and declined[0][0] < 20, declined
    assert counts["other"] >= 1 and counts["replayed"] >= 10


def test_a_g_whose_first_gradients_are_not_the_replays_is_tried_once(monkeypatch):
    """An embedding called on two batches a step: its table's gradient is two gathers' slices,
    which the replay concatenates and G sums dense, so G's first gradients are not the replay's
    and it does not form. The same copy would fail again: one iteration run for real to try it,
    not one every few steps (the adversarial review's p23: at 6, 11, 16, 21 and 26)."""
    monkeypatch.setattr(tapes, "FORM_BASE_S", 0.0)
    monkeypatch.setattr(tapes, "FORM_PER_OP_S", 0.0)

    def program(loop):
        rng = np.random.default_rng(23)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Embedding(12, 5),
                                  keras.layers.Flatten(), keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.05)
        losses = []
        for _ in loop(range(30)):
            a, b = rng.integers(0, 12, size=(10, 6)), rng.integers(0, 12, size=(10, 6))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(a) ** 2) + tf.reduce_mean((model(b) - 1) ** 2)
                loss += 1e-3 * tf.reduce_sum(model.layers[-1].kernel ** 2)
            grads = tape.gradient(loss, model.trainable_weights)
            opt.apply_gradients(zip(grads, model.trainable_weights))
            losses.append(float(loss))
        return losses, [v.numpy() for v in model.weights]

    terra, _, _ = compare(program, {"mode": "coexec", **REGIONS}, at_least=0.8)
    assert formed(terra, "Sequential.__call__").hits >= 40
    tries = [s.iteration for s in terra.stats if "for GradientTape.gradient" in s.why]
    assert len(tries) == 1, tries
    assert all(r.state != "formed" for r in rows(terra, "GradientTape.gradient"))
