"""Keras ``fit``, ``evaluate`` and ``predict`` under a Terra (issue 41): each step Keras runs
eagerly is one co-executed iteration (``terra_nb/keras_steps.py``), and everything equals a
plain run bit for bit: History, weights, printed text, checkpoints, evaluate's and predict's
results. Each test also asserts what ran (the co-executed share, the regions hit, the steps'
labels), so a fit that silently ran plainly fails it."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from fit_programs import (
    StepFunction_of,
    assert_equal_runs,
    data,
    hits,
    labels,
    mlp,
    python_step_model,
    run_fit,
)
from what_ran import assert_coexecuted

COEXEC: dict = {}  # Terra's defaults: coexec, regions on


def _fit_mlp(steps_per_execution: int = 1):
    x, y = data()
    model = mlp(steps_per_execution=steps_per_execution)
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0)
    return history.history, model


def test_fit_run_eagerly_coexecutes_each_step_equal_to_plain_fit():
    plain = run_fit(_fit_mlp, None)
    got = run_fit(_fit_mlp, COEXEC)
    assert_equal_runs(got, plain)
    terra = got[3]
    assert len(terra.stats) == 4 * 8  # one iteration per step
    assert labels(terra)[:3] == ["fit epoch 0 step 0", "fit epoch 0 step 1",
                                 "fit epoch 0 step 2"]
    assert labels(terra)[-1] == "fit epoch 3 step 7"
    assert_coexecuted(terra, at_least=0.75, last=8)
    # Keras's own train_step needs none of its Python: the whole step is one region (the
    # forward, the tape's gradient, Adam's update, the metrics), one call each step
    assert hits(terra, "Sequential.train_step") >= 24
    assert [r.name for r in terra.regions.rows] == ["Sequential.train_step"], str(terra.regions)
    # fit's History grows every epoch on the model: the step's region never misses for it
    assert not list(terra.explain()) and terra.regions.misses == 0, str(terra.explain())
    assert not terra.notes


def test_a_long_call_starts_the_graph_before_the_step_is_read(monkeypatch):
    """A fit step is read only at its end (``has_value()``, then its logs): it was one segment,
    flushed there, so the graph sat idle while Python issued the step (on the fit benchmark's
    CNN, 4.2 ms of Python, then a 7.2 ms segment). A call learned to be long (here: every call
    of terra-nb's own functions) is flushed as Python issues it: the step's region call is a
    segment of its own, which the graph runs while Python issues the rest of the step
    (``OptionalFromValue``; coexec/early_start.py). Same bits."""
    from terra_nb.coexec import early_start

    monkeypatch.setattr(early_start, "LONG_CALL_S", 0.0)
    plain = run_fit(_fit_mlp, None)
    got = run_fit(_fit_mlp, COEXEC)
    assert_equal_runs(got, plain)
    terra = got[3]
    assert_coexecuted(terra, at_least=0.75, last=8)
    assert hits(terra, "Sequential.train_step") >= 24
    # learned from the first op-by-op runs of the calls: from then on the step's call is a
    # segment of its own, the first the graph runs in each step
    alone = [p for p in terra.programs if len(p.ops) == 1
             and "region_Sequential_train_step_forward" in p.ops[0].op_type]
    assert alone, "\n".join(map(str, terra.programs))
    last = terra.stats[-1].iteration
    ran = [s.label for s in terra.spans if s.runner == "graph" and s.kind == "exec"
           and s.of_iteration == last]
    assert len(ran) >= 2 and ran[0].endswith("region_Sequential_train_step_forward"), ran


def test_a_model_fitted_before_the_terra_gets_its_step_region():
    """Keras keeps a model's step function from its first ``fit``: one made before the Terra
    opened calls ``train_step`` as it was then. Inside the Terra an eager one is made again,
    so the step is one region all the same."""
    x, y = data()
    model = mlp()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # plainly, before the Terra

    def program():
        history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
        return history.history, model

    twin = mlp()  # the same start, fitted plainly both times
    twin.set_weights(model.get_weights())
    twin.optimizer.build(twin.trainable_variables)
    for mine, theirs in zip(twin.optimizer.variables, model.optimizer.variables):
        mine.assign(theirs)
    plain = run_fit(lambda: (twin.fit(x, y, batch_size=8, epochs=3, verbose=0).history, twin),
                    None)
    got = run_fit(program, COEXEC)
    assert_equal_runs(got, plain)
    terra = got[3]
    assert hits(terra, "Sequential.train_step") >= 16, str(terra.regions)


def test_a_terra_whose_opening_was_cut_short_leaves_fit_coexecuted_later(monkeypatch):
    """A Ctrl-C landing while a Terra opens, before it wrapped Keras's step makers, closes it:
    that close must not count one user less (it did, and every later Terra in the process left
    ``fit`` alone: the full suite met it after ``test_open_interrupted``)."""
    from terra_nb import Terra, heap

    real_freeze = heap.freeze

    def freeze_then_ctrl_c():
        real_freeze()
        raise KeyboardInterrupt

    monkeypatch.setattr(heap, "freeze", freeze_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt), Terra():
        pass
    monkeypatch.setattr(heap, "freeze", real_freeze)
    got = run_fit(_fit_mlp, COEXEC)
    assert_coexecuted(got[3], at_least=0.75, last=8)


class _MakesItsOwn(keras.Sequential):
    """Overrides ``make_train_function``, passing ``force`` on by position (review p74)."""

    def make_train_function(self, force=False):
        return super().make_train_function(force)


def test_a_step_maker_override_passing_force_by_position():
    def program():
        x, y = data()
        model = _MakesItsOwn([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", run_eagerly=True)
        return model.fit(x, y, batch_size=8, epochs=3, verbose=0).history, model

    got = run_fit(program, COEXEC)
    assert_equal_runs(got, run_fit(program, None))
    assert hits(got[3], "_MakesItsOwn.train_step") >= 16, str(got[3].regions)


def _fit_python_step():
    x, y = data()
    model = python_step_model()
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    return (history.history, model.log), model


def test_a_train_step_holding_python_runs_its_python_every_step():
    """The counter, the value read, the branch on it and the prints happen at every step, as in
    plain ``fit``; the steps co-execute all the same."""
    plain = run_fit(_fit_python_step, None)
    got = run_fit(_fit_python_step, COEXEC)
    assert_equal_runs(got, plain)
    (_, log), _, printed, terra = got
    assert log["steps"] == 24 and len(log["losses"]) == 24 and printed.count("step ") == 4
    assert_coexecuted(terra, at_least=0.75, last=8)
    assert sum(s.fetches for s in terra.stats if s.phase == "coexec") >= 20  # float(loss)


NOTED: list = []


class Noted(keras.layers.Layer):
    """A layer that keeps a Python record of every call: an effect a region would not repeat."""

    def call(self, x):
        NOTED.append(x.shape[0])
        return x


def _fit_noted():
    NOTED.clear()
    x, y = data()
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              Noted(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", metrics=["mae"],
                  run_eagerly=True)
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0)
    return (history.history, list(NOTED)), model


def test_a_step_that_needs_its_python_runs_it_and_its_calls_are_answered_one_by_one():
    """A layer's ``call`` appends to a list every step: the step's region is refused (a hit
    would not append), the step's Python runs every step as in plain ``fit``, and the calls
    inside it are the outermost ones, answered by their own regions (the optimizer's, the
    loss's, the metrics'): without that the whole step ran op by op."""
    plain = run_fit(_fit_noted, None)
    got = run_fit(_fit_noted, COEXEC)
    assert_equal_runs(got, plain)
    (_, noted), _, _, terra = got
    assert noted.count(8) == 32  # (and None: the symbolic call that builds the model)
    step = next(r for r in terra.regions.rows if r.name == "Sequential.train_step")
    assert step.state == "refused" and "NOTED" in step.reason, str(terra.regions)
    assert hits(terra, "Adam.apply_gradients") >= 16, str(terra.regions)
    assert hits(terra, "LossFunctionWrapper.__call__") >= 16, str(terra.regions)
    assert_coexecuted(terra, at_least=0.75, last=8)


def _fit_validate_checkpoint_evaluate_predict(path):
    def program():
        x, y = data()
        vx, vy = data(n=40, seed=1)
        model = mlp()
        stop = keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, min_delta=10.0)
        save = keras.callbacks.ModelCheckpoint(str(path), save_weights_only=True)
        history = model.fit(x, y, batch_size=8, epochs=10, verbose=0, callbacks=[stop, save],
                            validation_data=(vx, vy))
        values = {"history": history.history, "epochs": history.epoch,
                  "evaluate": model.evaluate(vx, vy, batch_size=8, verbose=0),
                  "predict": model.predict(vx, batch_size=8, verbose=0)}
        saved = mlp()  # after the steps: a variable created makes formed regions miss once
        saved.load_weights(str(path))
        values["saved"] = [w.numpy() for w in saved.weights]
        return values, model

    return program


@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_validation_early_stopping_checkpoint_evaluate_and_predict(tmp_path):
    plain = run_fit(_fit_validate_checkpoint_evaluate_predict(tmp_path / "a.weights.h5"), None)
    got = run_fit(_fit_validate_checkpoint_evaluate_predict(tmp_path / "b.weights.h5"), COEXEC)
    assert_equal_runs(got, plain)
    values, _, _, terra = got
    assert values["epochs"] == [0, 1, 2]  # early stopping ended fit after its third epoch
    kinds = [label.split(" ")[0] for label in labels(terra)]
    # 3 epochs of 8 steps, 5 validation steps after each; evaluate: 5 steps; predict: 5 steps
    assert kinds == (["fit"] * 8 + ["evaluate"] * 5) * 3 + ["evaluate"] * 5 + ["predict"] * 5
    coexec = labels(terra, "coexec")
    assert sum(label.startswith("fit") for label in coexec) >= 16
    assert sum(label.startswith("evaluate") for label in coexec) >= 8
    assert sum(label.startswith("predict") for label in coexec) >= 3
    # evaluate's and predict's steps are regions of their own, as fit's is
    assert hits(terra, "Sequential.train_step") >= 16, str(terra.regions)
    assert hits(terra, "Sequential.test_step") >= 8, str(terra.regions)
    assert hits(terra, "Sequential.predict_step") >= 1, str(terra.regions)


def _fit_compiled():
    x, y = data()
    model = mlp(run_eagerly=False)
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    return (history.history, model.predict(x, verbose=0)), model


def test_a_fit_keras_compiled_is_left_alone_and_says_so():
    plain = run_fit(_fit_compiled, None)
    got = run_fit(_fit_compiled, COEXEC)
    assert_equal_runs(got, plain)
    terra = got[3]
    assert terra.stats == ()
    assert len(terra.notes) == 2  # fit's steps and predict's, each said once
    assert all("compiled" in note and "left alone" in note for note in terra.notes)


def test_the_models_get_their_own_step_functions_back():
    x, y = data()
    model = mlp()
    from terra_nb import Terra

    with Terra():
        model.fit(x, y, batch_size=8, verbose=0)
        assert StepFunction_of(model.train_function)
    assert not StepFunction_of(model.train_function)
    assert keras.Model.make_train_function.__module__.startswith("keras")
    model.fit(x, y, batch_size=8, verbose=0)  # plainly, as Keras made it


def _fit_steps_per_execution():
    return _fit_mlp(steps_per_execution=3)


def test_steps_per_execution_runs_each_execution_as_one_iteration():
    plain = run_fit(_fit_steps_per_execution, None)
    got = run_fit(_fit_steps_per_execution, COEXEC)
    assert_equal_runs(got, plain)
    terra = got[3]
    assert len(terra.stats) == 4 * 3  # 8 steps an epoch: executions of 3, 3 and 2 steps
    assert_coexecuted(terra, at_least=0.5, last=3)


def _fit_in_a_terra_loop(loop):
    x, y = data()
    model = mlp()
    for _ in loop(range(3)):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    return [float(w.numpy().sum()) for w in model.weights], model


def test_fit_inside_an_iteration_runs_as_part_of_it_and_says_so():
    from terra_nb import Terra

    def under_terra():
        with Terra() as terra:
            values, model = _fit_in_a_terra_loop(terra.loop)
        under_terra.terra = terra
        return values, model

    plain = run_fit(lambda: _fit_in_a_terra_loop(lambda it: it), None)
    got = run_fit(under_terra, None)
    assert_equal_runs(got, plain)
    terra = under_terra.terra
    assert len(terra.stats) == 3 and labels(terra) == ["", "", ""]
    assert len(terra.notes) == 1 and "inside a Terra iteration" in terra.notes[0]


def test_a_block_without_a_loop_or_fit_runs_plainly_and_says_so():
    from terra_nb import Terra

    with Terra() as terra:
        total = float(np.sum(np.ones(3)))
    assert total == 3.0 and terra.stats == ()
    assert len(terra.notes) == 1 and terra.notes[0].startswith("nothing to co-execute")


def test_a_step_label_names_the_iteration_and_must_be_text():
    from terra_nb import Terra, TerraUsageError

    with Terra() as terra:
        with terra.step(label="warm-up"):
            pass
        with pytest.raises(TerraUsageError, match="takes a str, got int"):
            terra.step(label=3)
    assert [s.label for s in terra.stats] == ["warm-up"]
