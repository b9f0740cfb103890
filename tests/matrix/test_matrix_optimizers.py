"""Every built-in Keras 3 optimizer crossed with every option, trained on a small MLP: equal to
eager bit for bit in every setting of ``matrix_harness`` (regions on, tape gradients formed,
regions off, lazy), and really co-executed.

Fast subset: each optimizer once with regions, the options dealt out in turn (so each option
appears at least once), and a few options known to need care under the other settings.
"""

import pytest
from matrix_cases import (
    OPTIMIZERS,
    OPTIONS,
    Case,
    batches,
    mlp,
    program,
    sparse_logits_loss,
    with_option,
)
from matrix_harness import SETTINGS, check, params

FAST_ELSEWHERE = {("adam", "loss-scale", "coexec"), ("adam", "loss-scale", "lazy"),
                  ("sgd-momentum", "accumulate-3", "lazy"),
                  ("sgd-momentum", "accumulate-3", "no-regions"), ("adam", "ema-3", "tapes")}


def fast(index: int, name: str, option: str, setting: str) -> bool:
    dealt = option == OPTIONS[index % len(OPTIONS)] and setting == "coexec"
    return dealt or (name, option, setting) in FAST_ELSEWHERE


CASES = [(f"{name}-{option}-{setting}", (name, option, setting), fast(i, name, option, setting))
         for i, name in enumerate(OPTIMIZERS) for option in OPTIONS for setting in SETTINGS]


def optimizer_case(name: str, option: str) -> Case:
    return Case(model=mlp, optimizer=lambda: with_option(name, option), loss=sparse_logits_loss,
                data=lambda: batches("vec", "classes"))


@pytest.mark.parametrize(("name", "option", "setting"), params(CASES))
def test_optimizer(name, option, setting, record_property):
    """Optimizer ``name`` with ``option``, 20 steps reading the loss every step: per-step
    losses, model and optimizer variables (slots, iterations, accumulators, EMA copies, loss
    scale) equal eager's bit for bit, and the loop co-executed (``matrix_harness.check``)."""
    check(f"{name}-{option}", program(optimizer_case(name, option)), setting, record_property)
