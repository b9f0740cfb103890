"""The matrix's own machinery: its comparison sees one ulp, its row rule lets no unformed row
pass, and its fast subset covers every optimizer, option, layer, loss and metric."""

from types import SimpleNamespace

import numpy as np
import test_matrix_layers as layers
import test_matrix_losses_metrics as losses_metrics
import test_matrix_optimizers as optimizers
from matrix_cases import LAYERS, LOSSES, METRICS, OPTIMIZERS, OPTIONS
from matrix_harness import differences, row_accounted


def test_one_ulp_in_a_loss_or_a_variable_is_a_difference():
    """``differences`` reports a one-ulp change of a loss and of a variable, and nothing for
    equal bits (NaN equal to NaN)."""
    one = np.float32(1.0)
    ulp = np.nextafter(one, np.float32(2.0))
    want = ({"loss": [1.0, np.nan]}, [("w", np.array([one, 2.0], "float32"))])
    assert differences(want, want) == []
    got_loss = ({"loss": [float(ulp), np.nan]}, want[1])
    got_var = (want[0], [("w", np.array([ulp, 2.0], "float32"))])
    assert differences(want, got_loss)[0].startswith("loss[0] differs first, by 1.19e-07")
    assert differences(want, got_var) == ["1/1 variables differ, most w by 1.19e-07"]


def test_a_row_passes_only_formed_and_hit_refused_or_declined_with_a_reason():
    """Formed and hit, refused with a reason, or a tape call site declined pass; a row still
    forming, formed but never hit, or refused without a reason fails."""

    def row(name="Dense.__call__", state="formed", hits=1, reason=""):
        return SimpleNamespace(name=name, state=state, hits=hits, reason=reason)

    assert row_accounted(row())
    assert row_accounted(row(state="refused", hits=0, reason="value read (1 tensors)"))
    assert row_accounted(row("GradientTape.gradient", "tracing", 0, "declined: would not repay"))
    assert not row_accounted(row(hits=0))
    assert not row_accounted(row(state="tracing", hits=0, reason="traced"))
    assert not row_accounted(row(state="refused", hits=0, reason=" "))
    assert not row_accounted(row(state="tracing", hits=0, reason="declined: a Keras call"))


def fast(cases) -> list[tuple]:
    return [args for _, args, is_fast in cases if is_fast]


def test_the_fast_subset_covers_every_optimizer_option_layer_loss_and_metric():
    """Every optimizer, option, layer, loss and metric is in the fast subset, with regions
    on (``coexec``); the subset holds every setting; it is about 60 cases."""
    opts, lays = fast(optimizers.CASES), fast(layers.CASES)
    loss_cases, metric_cases = fast(losses_metrics.LOSS_CASES), fast(losses_metrics.METRIC_CASES)
    assert {n for n, _, s in opts if s == "coexec"} == set(OPTIMIZERS)
    assert {o for _, o, s in opts if s == "coexec"} == set(OPTIONS)
    assert {n for n, _, s in lays if s == "coexec"} == set(LAYERS)
    assert {n for n, _, s in loss_cases if s == "coexec"} == set(LOSSES)
    assert {n for n, s in metric_cases if s == "coexec"} == set(METRICS)
    settings = {args[-1] for args in opts + lays + loss_cases + metric_cases}
    assert settings == {"coexec", "tapes", "no-regions", "lazy"}
    assert 40 <= len(opts + lays + loss_cases + metric_cases) <= 64
