"""Common Keras losses and metrics on a small MLP: equal to eager bit for bit under Terra with
regions on, with tape gradients formed, without regions and lazily, and really co-executed.

A metric is updated every step, its ``result()`` read after steps 3, 7, 11 and 15 and at the
end, and ``reset_state()`` called after step 9. Fast subset: each loss (Adam) and each metric
once, with regions.
"""

import pytest
from matrix_cases import LOSSES, METRICS, TASKS, Case, batches, mlp, program, with_option
from matrix_harness import SETTINGS, check, params

LOSS_CASES = [(f"{loss}-{opt}-{setting}", (loss, opt, setting),
               opt == "adam" and setting == "coexec")
              for loss in LOSSES for opt in ("adam", "sgd") for setting in SETTINGS]
METRIC_CASES = [(f"{metric}-{setting}", (metric, setting), setting == "coexec")
                for metric in METRICS for setting in SETTINGS]


def loss_case(loss: str, optimizer: str, **metric) -> Case:
    make, head, target = LOSSES[loss]
    return Case(model=lambda: mlp(head), optimizer=lambda: with_option(optimizer, "none"),
                loss=make, data=lambda: batches("vec", target), **metric)


@pytest.mark.parametrize(("loss", "optimizer", "setting"), params(LOSS_CASES))
def test_loss(loss, optimizer, setting, record_property):
    """Loss ``loss`` (with the head and targets it expects), 20 steps: per-step losses and all
    variables equal eager's bit for bit, and the loop co-executed."""
    check(f"{loss}-{optimizer}", program(loss_case(loss, optimizer)), setting, record_property)


@pytest.mark.parametrize(("metric", "setting"), params(METRIC_CASES))
def test_metric(metric, setting, record_property):
    """Metric ``metric`` updated every step, read at some steps, reset mid-loop: every result
    read, per-step losses and all variables (the metric's included) equal eager's bit for bit,
    and the loop co-executed."""
    make, task, args = METRICS[metric]
    case = loss_case(TASKS[task], "adam", metric=make, metric_args=args)
    check(f"metric-{metric}", program(case), setting, record_property)
