"""Branch variants (``regions/variants.py``): a call whose Python branches on a variable goes
one way in some steps and the other in others (Keras's ``gradient_accumulation_steps`` applies
the gradients on every third step). Each way forms its own region; the guard computes the
branch values before the call and the region of that way answers, so the loop co-executes on
both ways without tracing the call again, and every value stays eager's."""

from __future__ import annotations

import keras
import pytest
from region_programs import COEXEC, compare, formed, training

OPTIMIZERS = {
    "accumulation": lambda: keras.optimizers.SGD(1e-2, gradient_accumulation_steps=3),
    "ema": lambda: keras.optimizers.Adam(1e-2, use_ema=True, ema_overwrite_frequency=3),
}


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_both_ways_of_a_branch_are_answered_by_regions(kind, monkeypatch):
    import region_programs  # noqa: PLC0415 - its optimizer table gets this case for the run

    monkeypatch.setitem(region_programs.OPTIMIZERS, kind, OPTIMIZERS[kind])
    terra, _, _ = compare(training(optimizer=kind, steps=30), COEXEC, at_least=0.6)
    name = f"{type(OPTIMIZERS[kind]()).__name__}.apply_gradients"
    row = formed(terra, name)
    # both ways hit: 30 steps, at most a few traced while the two ways formed
    assert row.hits >= 20, str(terra.regions)
    assert row.misses <= 2, str(terra.regions)
