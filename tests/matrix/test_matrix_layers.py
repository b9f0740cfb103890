"""Common Keras layers, each in a small classifier trained with SGD or Adam: equal to eager bit
for bit in every setting of ``matrix_harness`` (regions on, tape gradients formed, regions off,
lazy), and really co-executed.

The loop keeps each step's loss tensor and reads them after the loop (the handover of the
placeholders it still holds). Fast subset: each layer once with regions (Adam and SGD in
turn), and a few layers known to need care under the other settings.
"""

import pytest
from matrix_cases import (
    LAYERS,
    Case,
    batches,
    layer_model,
    program,
    sparse_logits_loss,
    with_option,
)
from matrix_harness import SETTINGS, check, params

OPTIMIZER_NAMES = ("adam", "sgd")
FAST_ELSEWHERE = {("custom-gradient", "no-regions"), ("custom-gradient", "lazy"),
                  ("batchnorm", "tapes"), ("lstm", "lazy")}


def fast(index: int, layer: str, optimizer: str, setting: str) -> bool:
    dealt = optimizer == OPTIMIZER_NAMES[index % 2]
    return dealt and (setting == "coexec" or (layer, setting) in FAST_ELSEWHERE)


CASES = [(f"{layer}-{opt}-{setting}", (layer, opt, setting), fast(i, layer, opt, setting))
         for i, layer in enumerate(LAYERS) for opt in OPTIMIZER_NAMES for setting in SETTINGS]


def layer_case(layer: str, optimizer: str) -> Case:
    return Case(model=lambda: layer_model(layer), optimizer=lambda: with_option(optimizer, "none"),
                loss=sparse_logits_loss, data=lambda: batches(LAYERS[layer][0], "classes"),
                read_loss=False)


@pytest.mark.parametrize(("layer", "optimizer", "setting"), params(CASES))
def test_layer(layer, optimizer, setting, record_property):
    """``layer`` in a classifier (with its regularisation losses added, if any), 20 steps:
    per-step losses and every model variable (moving statistics, seed states of the random
    layers) and optimizer variable equal eager's bit for bit, and the loop co-executed."""
    check(f"{layer}-{optimizer}", program(layer_case(layer, optimizer)), setting,
          record_property)
