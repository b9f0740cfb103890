"""The matrix through Keras's ``fit`` (``run_eagerly=True``): every optimizer with every option,
and every layer, trained by ``fit`` for two epochs of 20 steps under a Terra, equal to the same
``fit`` run eagerly bit for bit (every step's logs, every model, optimizer and metric variable),
and really co-executed.

Keras's own ``train_step`` is the whole step's region (``regions/intercept.py``): the forward,
the tape's gradient, the optimizer's update (accumulation, EMA, loss scaling, schedules, weight
decay) and the metrics, one call each step. Where the step needs its Python (a custom gradient,
say), the step's region is refused and the calls inside it are answered one by one; the
harness's row check accepts either, and the record of what ran says which.

Fast subset: each optimizer once (the options dealt out in turn), the options the custom-loop
matrix found hard, and a few layers.
"""

import pytest
from matrix_cases import (
    LAYERS,
    OPTIMIZERS,
    OPTIONS,
    Case,
    batches,
    fit_program,
    layer_model,
    mlp,
    sparse_logits_loss,
    with_option,
)
from matrix_harness import check, params

FAST_OPTIONS = {("adam", "loss-scale"), ("sgd-momentum", "accumulate-3"), ("adam", "ema-3"),
                ("adam", "subclassed-schedule")}
FAST_LAYERS = {"conv2d", "batchnorm", "dropout", "lstm", "custom-gradient", "embedding",
               "activity-regularizer"}

OPTIMIZER_CASES = [(f"{name}-{option}", (name, option),
                    option == OPTIONS[i % len(OPTIONS)] or (name, option) in FAST_OPTIONS)
                   for i, name in enumerate(OPTIMIZERS) for option in OPTIONS]
LAYER_CASES = [(layer, (layer,), layer in FAST_LAYERS) for layer in LAYERS]


@pytest.mark.parametrize(("name", "option"), params(OPTIMIZER_CASES))
def test_fit_optimizer(name, option, record_property):
    """Optimizer ``name`` with ``option`` under ``fit``: eager's bits, co-executed."""
    case = Case(model=mlp, optimizer=lambda: with_option(name, option),
                loss=sparse_logits_loss, data=lambda: batches("vec", "classes"))
    check(f"fit-{name}-{option}", fit_program(case), "coexec", record_property)


@pytest.mark.parametrize("layer", params(LAYER_CASES))
def test_fit_layer(layer, record_property):
    """Layer ``layer`` in a small classifier under ``fit`` with Adam: eager's bits,
    co-executed."""
    case = Case(model=lambda: layer_model(layer), optimizer=lambda: with_option("adam", "none"),
                loss=sparse_logits_loss, data=lambda: batches(LAYERS[layer][0], "classes"))
    check(f"fit-{layer}", fit_program(case), "coexec", record_property)
