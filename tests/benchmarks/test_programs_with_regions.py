"""A paper program under co-execution with regions equals eager (found by the paper harness
with ``--regions``): SDPoint keeps its model call op by op (it reads a shape) and forms an SGD
region; the loop keeps tracing while regions form, right after co-executed iterations."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from programs import load  # noqa: E402
from programs.common import step, weights  # noqa: E402

from terra_nb import Terra  # noqa: E402


def run(name: str, n: int, options: dict | None):
    program = load(name)
    state = program.make(0)
    if options is None:
        for i in range(n):
            step(program, state, i)
        return weights(state), None
    with Terra(**options) as terra:
        for i in terra.loop(range(n)):
            step(program, state, i)
    return weights(state), terra


def test_sdpoint_with_regions_equals_eager():
    expected, _ = run("sdpoint", 10, None)
    got, terra = run("sdpoint", 10, {"regions": True})
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(expected, got))
    # compiled conv + batch-norm segments differ from eager by float rounding only
    assert worst < 1e-6, worst
    phases = [s.phase for s in terra.stats]
    assert "coexec" in phases and phases.index("coexec") < len(phases) - 1, phases
    assert any(r.name == "SGD.apply_gradients" and r.hits for r in terra.regions.rows), \
        str(terra.regions)
